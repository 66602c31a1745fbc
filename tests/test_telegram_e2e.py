"""End to end: the real `pingu gateway` process against the fake Telegram Bot API and the
fake Responses API. Every assertion is about what a Telegram user would see (the bot's
messages in the chat, after all edits), the requests the model got, and the database.
"""

from __future__ import annotations

import asyncio
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from pingu.config.loader import load_config
from pingu.store.db import Database
from tests.fakes.daemon import DaemonProcess, daemon_env, write_config
from tests.fakes.responses_api import FakeResponsesAPI, Reply, function_calls, slow, text
from tests.fakes.telegram_api import FakeTelegram

USER = 111
OTHER_USER = 222
GROUP = -1001


def telegram_config(
    tg: FakeTelegram, *, allowed: tuple[int, ...] = (USER,), extra: str = ""
) -> str:
    users = ", ".join(str(u) for u in allowed)
    return (
        "[channel.tg]\n"
        'type = "telegram"\n'
        "[channel.tg.settings]\n"
        f'bot_token = "{tg.token}"\n'
        f'api_base_url = "{tg.url}"\n'
        f"allowed_users = [{users}]\n"
        "poll_timeout_s = 1\n"
        "edit_interval_s = 0.2\n"
        "typing_interval_s = 0.5\n" + extra
    )


def config_for(
    tmp_path: Path, tg: FakeTelegram, rs: FakeResponsesAPI, *, allowed=(USER,), extra=""
) -> Path:
    return write_config(tmp_path, rs, extra=telegram_config(tg, allowed=allowed) + extra)


def user_text(body: dict[str, Any]) -> str:
    """The last user message of a Responses API request."""
    for item in reversed(body["input"]):
        if item.get("role") == "user":
            content = item["content"]
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content)
    raise AssertionError("no user message in the request")


def echo(body: dict[str, Any]) -> Reply:
    return text(f"Answer to: {user_text(body)}", chunks=3)


def answers(tg: FakeTelegram, chat_id: int, thread_id: int | None = None) -> list[str | None]:
    return tg.chat_texts(chat_id, thread_id)


async def wait_answers(
    tg: FakeTelegram, chat_id: int, expected: list[str], thread_id: int | None = None
) -> None:
    try:
        await tg.wait_for(lambda: answers(tg, chat_id, thread_id) == expected, timeout=15)
    except TimeoutError:
        shown = answers(tg, chat_id, thread_id)
        raise AssertionError(
            f"chat {chat_id}: wanted {expected!r}, the chat shows {shown!r}"
        ) from None


async def run_allow_hint(
    tmp_path: Path, hint: str, allowed: tuple[int, ...], new_user: int
) -> None:
    """Run the `pingu config set` command a refusal's hint suggests, for real, on a copy
    of the config: it must succeed and allow the new user without dropping the others."""
    command = shlex.split(hint.partition(": ")[2])
    assert command[:3] == ["pingu", "config", "set"]
    config = tmp_path / "hint-config.toml"
    config.write_text((tmp_path / "config.toml").read_text(encoding="utf-8"), encoding="utf-8")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pingu", *command[1:],
        env=daemon_env({"PINGU_CONFIG": str(config)}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, (out + err).decode()
    loaded = load_config(config, env={})
    assert loaded.channels["tg"].settings.allowed_users == (*allowed, new_user)


async def wait_handled(daemon: DaemonProcess, count: int) -> None:
    """Until the daemon has finished `count` updates (answer sent, ledger closed)."""
    async with asyncio.timeout(15):
        # The log of another process: nothing to wait on but the next line.
        while len(daemon.find("telegram.done")) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_conversation_commands_memory_across_a_restart_and_sigterm(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI, pingu_daemon
) -> None:
    fake_responses.responder = echo
    config = config_for(tmp_path, fake_telegram, fake_responses)
    daemon = await pingu_daemon(config)
    # Commands are registered at start.
    await fake_telegram.wait_for(lambda: fake_telegram.commands(), timeout=10)
    assert {c["command"] for c in fake_telegram.commands()} >= {
        "start", "help", "new", "stop", "status", "usage"
    }  # fmt: skip

    fake_telegram.push_text(USER, USER, "my name is Ada")
    await wait_answers(fake_telegram, USER, ["Answer to: my name is Ada"])
    assert await daemon.terminate() == 0

    daemon = await pingu_daemon(config)
    fake_telegram.push_text(USER, USER, "what is my name?")
    await wait_answers(
        fake_telegram, USER, ["Answer to: my name is Ada", "Answer to: what is my name?"]
    )
    # The model got the first exchange as history after the restart.
    last = fake_responses.bodies[-1]
    contents = [str(item.get("content")) for item in last["input"]]
    assert any("my name is Ada" in c for c in contents)

    await wait_handled(daemon, 1)
    fake_telegram.push_text(USER, USER, "/status")
    await fake_telegram.wait_for(lambda: len(answers(fake_telegram, USER)) == 3, timeout=10)
    status = answers(fake_telegram, USER)[2] or ""
    assert "Session: telegram:111" in status and "Turns: 2" in status

    fake_telegram.push_text(USER, USER, "/new")
    fake_telegram.push_text(USER, USER, "fresh start")
    await fake_telegram.wait_for(lambda: len(answers(fake_telegram, USER)) == 5, timeout=10)
    assert answers(fake_telegram, USER)[3:] == [
        "Started a new conversation. The previous one is kept.",
        "Answer to: fresh start",
    ]
    # The new session starts empty: no earlier messages in the model's input.
    assert not any("Ada" in str(item.get("content")) for item in fake_responses.bodies[-1]["input"])

    await wait_handled(daemon, 4)
    fake_telegram.push_text(USER, USER, "/usage")
    await fake_telegram.wait_for(lambda: len(answers(fake_telegram, USER)) == 6, timeout=10)
    usage = answers(fake_telegram, USER)[5] or ""
    assert "2 conversations" in usage and "3 model calls" in usage

    # /stop cancels the running turn; its answer says so, and nothing else is sent.
    fake_responses.queue(slow(text("too late"), delay_s=5))
    requests_before = len(fake_responses.requests)
    fake_telegram.push_text(USER, USER, "a long job")
    await fake_telegram.wait_for(lambda: len(fake_responses.requests) > requests_before, timeout=10)
    fake_telegram.push_text(USER, USER, "/stop")
    await wait_handled(daemon, 7)
    assert answers(fake_telegram, USER)[6:] == ["Stopped."]
    fake_telegram.push_text(USER, USER, "/stop")
    await fake_telegram.wait_for(lambda: len(answers(fake_telegram, USER)) == 8, timeout=10)
    assert answers(fake_telegram, USER)[7] == "Nothing is running."

    # SIGTERM while a turn runs: the daemon stops taking messages, lets the turn finish,
    # delivers the answer, then exits cleanly.
    fake_responses.queue(
        slow(text("Finished despite SIGTERM.", chunks=4), delay_s=0.3, delta_delay_s=0.2)
    )
    requests_before = len(fake_responses.requests)
    fake_telegram.push_text(USER, USER, "take your time")
    await fake_telegram.wait_for(lambda: len(fake_responses.requests) > requests_before, timeout=10)
    daemon.send_signal(signal.SIGTERM)
    assert await daemon.wait() == 0
    assert answers(fake_telegram, USER)[8:] == ["Finished despite SIGTERM."]
    # The slow turns showed typing meanwhile.
    assert any(a.chat_id == USER and a.action == "typing" for a in fake_telegram.chat_actions)
    assert fake_telegram.token not in daemon.stderr


LONG_PARAGRAPHS = [f"Part {n}: " + "lorem ipsum " * 60 for n in range(12)]
LONG_CODE = "```python\n" + "\n".join(f"print({n})" for n in range(150)) + "\n```"
LONG_ANSWER = (
    "\n\n".join(p.strip() for p in LONG_PARAGRAPHS[:6])
    + "\n\n"
    + LONG_CODE
    + "\n\n"
    + "\n\n".join(p.strip() for p in LONG_PARAGRAPHS[6:])
)
CONCURRENT_CHATS = list(range(5001, 5011))


def scripted(body: dict[str, Any]) -> Reply:
    """The fake model for the one-daemon scenario test, by what the user asked."""
    question = user_text(body)
    if any(i.get("type") == "function_call_output" for i in body["input"]):
        return text("It is 42, according to my researcher.")
    if question == "long please":
        return text(LONG_ANSWER, chunks=20)
    if question in ("first", "second"):
        return slow(text(f"Answer to: {question}"), delay_s=0.3)
    if question == "ask the researcher":
        return function_calls(("delegate", {"agent": "researcher", "task": "find the answer"}))
    if question == "find the answer":  # the sub-agent
        return text("The researcher says 42.")
    return text(f"**Bold** answer to: {question}")


async def test_access_groups_topics_delegation_splitting_and_odd_updates(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI, pingu_daemon
) -> None:
    tg = fake_telegram
    fake_responses.responder = scripted
    extra = '\n[agent.researcher]\nsystem_prompt = "You research."\ntools = ["web_fetch"]\n'
    allowed = (USER, 333, 444, 555, *CONCURRENT_CHATS)
    daemon = await pingu_daemon(
        config_for(tmp_path, tg, fake_responses, allowed=allowed, extra=extra)
    )

    # Malformed and unsupported updates first: they must not stop the loop.
    tg.push_raw({"message": {"chat": "nonsense"}})
    tg.push_raw({"something_new": {"x": 1}})
    tg.push_channel_post(-2002, "a channel post")
    tg.push_new_members(GROUP, [USER, 333], chat_type="supergroup")
    tg.push_sticker(USER, USER)
    # A refused user: one short reply naming their ID, never reaches the model.
    tg.push_text(OTHER_USER, OTHER_USER, "let me in")
    # Groups: only a mention or a reply to the bot is answered.
    tg.push_text(GROUP, USER, "chatting among ourselves", chat_type="supergroup")
    tg.push_text(GROUP, USER, "what is 2+2?", chat_type="supergroup", mention_bot=True)
    # A forum topic is a conversation of its own, answered in the topic.
    tg.push_text(
        GROUP, USER, "topic question", chat_type="supergroup", thread_id=77, mention_bot=True
    )
    # Delegation to a sub-agent.
    tg.push_text(555, 555, "ask the researcher")
    # Many chats at once, two messages each.
    for chat in CONCURRENT_CHATS:
        tg.push_text(chat, chat, "first")
        tg.push_text(chat, chat, "second")

    await tg.wait_for(lambda: len(tg.chat_texts(OTHER_USER)) == 1, timeout=15)
    refusal = tg.chat_texts(OTHER_USER)[0] or ""
    assert str(OTHER_USER) in refusal and "not allowed" in refusal
    await wait_answers(tg, USER, ["I can only read text for now."])
    await wait_answers(tg, GROUP, ["Bold answer to: topic question"], thread_id=77)
    await tg.wait_for(lambda: len(tg.chat_texts(GROUP)) == 2, timeout=15)
    assert "Bold answer to: what is 2+2?" in tg.chat_texts(GROUP)
    await wait_answers(tg, 555, ["It is 42, according to my researcher."])
    for chat in CONCURRENT_CHATS:
        await wait_answers(tg, chat, ["Answer to: first", "Answer to: second"])
    await tg.wait_until_idle()

    # The refused user, the unmentioned group message and the odd updates never reached
    # the model; the mention was stripped from what the model got.
    asked = [user_text(b) for b in fake_responses.bodies]
    assert "let me in" not in asked and "chatting among ourselves" not in asked
    assert {"what is 2+2?", "topic question", "find the answer"} <= set(asked)
    assert daemon.find("telegram.ignored", reason="message without a chat")
    refused = daemon.find("telegram.refused", user_id=OTHER_USER)
    assert refused
    await run_allow_hint(tmp_path, refused[0]["hint"], allowed, OTHER_USER)
    # Every chat's first message reached the model before any second one: chats did not
    # queue behind each other, and each chat kept its order.
    concurrent = [q for q in asked if q in ("first", "second")]
    assert concurrent[: len(CONCURRENT_CHATS)] == ["first"] * len(CONCURRENT_CHATS)

    # A long answer: split below 4096, every paragraph once, the code block whole.
    tg.push_text(USER, USER, "long please")
    await tg.wait_for(lambda: len(tg.chat_texts(USER)) >= 4, timeout=15)
    await tg.wait_until_idle()
    shown = tg.chat_texts(USER)[1:]
    assert all(len((t or "").encode("utf-16-le")) // 2 <= 4096 for t in shown)
    joined = "\n".join(t or "" for t in shown)
    for paragraph in LONG_PARAGRAPHS:
        assert joined.count(paragraph.strip()) == 1
    code_messages = [t for t in shown if t and "print(0)" in t]
    assert len(code_messages) == 1 and "print(149)" in code_messages[0]
    code_message = next(m for m in tg.chat_messages(USER) if m.text and "print(0)" in m.text)
    assert [e["type"] for e in code_message.entities] == ["pre"]

    # Telegram refuses the HTML once: the same text arrives as plain text.
    tg.fail("sendMessage", 400, "Bad Request: can't parse entities: unsupported start tag", times=1)
    tg.push_text(333, 333, "fallback")
    await wait_answers(tg, 333, ["**Bold** answer to: fallback"])
    await tg.wait_until_idle()

    # Flood control: the 429 is waited out and the answer still arrives, exactly once.
    tg.flood("sendMessage", retry_after=1, times=1)
    tg.push_text(444, 444, "flood")
    await wait_answers(tg, 444, ["Bold answer to: flood"])
    assert tg.chat_messages(444)[0].entities[0]["type"] == "bold"
    assert daemon.find("telegram.flood_wait")

    await tg.wait_until_idle()
    assert await daemon.terminate() == 0
    db = await Database.open(tmp_path / "state" / "pingu.db")
    try:
        # The group and its topic are separate conversations.
        group_turns = await db.history.list_turns(f"telegram:{GROUP}")
        topic_turns = await db.history.list_turns(f"telegram:{GROUP}:77")
        assert [t.user_message for t in group_turns] == ["what is 2+2?"]
        assert [t.user_message for t in topic_turns] == ["topic question"]
        assert await db.inbound.unfinished("tg") == []
    finally:
        await db.close()


async def test_sigkill_mid_turn_and_restart_answers_every_message_exactly_once(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    tg = fake_telegram
    chats = [1001, 1002, 1003, 1004]

    def respond(body: dict[str, Any]) -> Reply:
        answer = text(f"Answer to: {user_text(body)}", chunks=4)
        return slow(answer, delay_s=0.1, delta_delay_s=0.15)

    fake_responses.responder = respond
    config = config_for(tmp_path, tg, fake_responses, allowed=tuple(chats))
    expected: dict[int, list[str]] = {}
    for chat in chats:
        for n in range(2):
            tg.push_text(chat, chat, f"chat {chat} message {n}")
        expected[chat] = [f"Answer to: chat {chat} message {n}" for n in range(2)]

    daemon = await DaemonProcess.start(config)
    try:
        # Kill while the first turns stream their answers (some messages shown half-written).
        await tg.wait_for(lambda: len(tg.edits) >= 2 or None, timeout=15)
        daemon.send_signal(signal.SIGKILL)
        await daemon.wait()
        answered_before_kill = {chat: tg.chat_texts(chat) for chat in chats}
        daemon = await DaemonProcess.start(config)
        for chat in chats:
            await wait_answers(tg, chat, expected[chat])
        await tg.wait_until_idle()
        assert await daemon.terminate() == 0
    finally:
        await daemon.kill()
    assert answered_before_kill != expected  # the kill really came mid-way
    # Answers were shown as they were written: edits that extend the text.
    assert any(e.old_text and e.new_text.startswith(e.old_text) for e in tg.edits)
    for chat in chats:
        assert tg.chat_texts(chat) == expected[chat]  # one complete answer each, in order
    db = await Database.open(tmp_path / "state" / "pingu.db")
    try:
        for chat in chats:
            turns = await db.history.list_turns(f"telegram:{chat}")
            completed = [t.user_message for t in turns if t.status == "completed"]
            assert completed == [f"chat {chat} message {n}" for n in range(2)]
        assert await db.inbound.unfinished("tg") == []
    finally:
        await db.close()


async def test_sigkill_after_the_turn_was_saved_delivers_the_stored_answer(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    """Telegram is down when the answer is ready: the turn is saved, the reply is not sent;
    after a SIGKILL and restart the stored answer is delivered without asking the model."""
    tg = fake_telegram
    fake_responses.queue(text("Stored answer."))
    config = config_for(tmp_path, tg, fake_responses)
    # Telegram refuses the first try (flood control: surely not sent; a 5xx would leave
    # the answer uncertain, never sent again); the daemon waits a second before trying
    # again, and is killed.
    tg.flood("sendMessage", retry_after=1, times=1)
    daemon = await DaemonProcess.start(config)
    try:
        tg.push_text(USER, USER, "hello")
        await daemon.wait_for("turn", timeout=15)
        daemon.send_signal(signal.SIGKILL)
        await daemon.wait()
        daemon = await DaemonProcess.start(config)
        await wait_answers(tg, USER, ["Stored answer."])
        assert await daemon.terminate() == 0
    finally:
        await daemon.kill()
    assert len(fake_responses.bodies) == 1
    assert daemon.find("telegram.resume_saved_answer")
