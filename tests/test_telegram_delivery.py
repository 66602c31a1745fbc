"""Delivering answers when Telegram misbehaves for a while, and turns cancelled from
outside the chat: real components (channel, dispatcher, agent runtime, database) or the
real daemon, against the fake Bot API and the fake Responses API."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from pingu.agent.runtime import AgentRuntime
from pingu.channels.telegram import channel as channel_module
from pingu.channels.telegram.api import RetryPolicy
from pingu.channels.telegram.channel import TelegramChannel
from pingu.channels.telegram.stream import UNKNOWN_MESSAGE_ID
from pingu.config.loader import load_config
from pingu.dispatcher import Dispatcher
from pingu.store.db import Database
from pingu.store.inbound import InboundRow
from tests.fakes.daemon import DaemonStarter
from tests.fakes.responses_api import FakeResponsesAPI, slow, text
from tests.fakes.telegram_api import FakeTelegram
from tests.test_telegram_e2e import USER, config_for, echo, wait_answers, wait_handled

# The production backoff (seconds, up to 30 s) made short: the behaviour is the same.
FAST = RetryPolicy(first_s=0.02, cap_s=0.1)


class Stack:
    """What `pingu gateway` runs for one Telegram channel, in this process."""

    def __init__(self, db: Database, runtime: AgentRuntime, channel: TelegramChannel) -> None:
        self.db, self.runtime, self.channel = db, runtime, channel


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path,
    tg: FakeTelegram,
    rs: FakeResponsesAPI,
    prepare: Callable[[Database], Awaitable[None]] | None = None,
) -> AsyncIterator[Stack]:
    """Start the stack on tmp_path's database (again: a restart); stop it as the daemon
    does (stop polling, drain the turns, close the channel)."""
    config = load_config(config_for(tmp_path, tg, rs), env={})
    db = await Database.open(config.db.path)
    if prepare is not None:
        await prepare(db)
    runtime = AgentRuntime(config, db)
    dispatcher = Dispatcher(runtime)
    channel = TelegramChannel(
        config.channels["tg"],
        config=config,
        dispatcher=dispatcher,
        db=db,
        runtime=runtime,
        delivery_retry=FAST,
        send_retry=FAST,
    )
    await channel.start()
    try:
        yield Stack(db, runtime, channel)
    finally:
        await channel.stop_receiving()
        await dispatcher.drain(5)
        await channel.close()
        await runtime.close()
        await db.close()


@pytest.fixture
async def stack(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> AsyncIterator[Stack]:
    async with running(tmp_path, fake_telegram, fake_responses) as started:
        yield started


async def test_a_reply_telegram_refuses_for_a_while_is_retried_before_the_next_answer(
    stack: Stack, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    tg = fake_telegram
    fake_responses.responder = echo
    # More refusals than the sender's own retries of one request: the channel must keep
    # trying, in this process, and hold the chat's next answer back meanwhile. Flood
    # control (429) is how Telegram says "not sent, try later"; a 5xx is no longer used
    # here: it may come after the Bot API delivered the message, so a sendMessage that
    # gets one is uncertain and never sent again (see the 502 test below).
    tg.flood("sendMessage", retry_after=0.02, times=9)
    tg.push_text(USER, USER, "first")
    await tg.wait_for(lambda: len(fake_responses.requests) >= 1, timeout=10)
    tg.push_text(USER, USER, "second")
    await wait_answers(tg, USER, ["Answer to: first", "Answer to: second"])
    await tg.wait_until_idle()
    assert tg.chat_texts(USER) == ["Answer to: first", "Answer to: second"]
    assert await stack.db.inbound.unfinished("tg") == []


async def test_a_reply_telegram_refuses_for_good_is_given_up_without_blocking_the_chat(
    stack: Stack, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    tg = fake_telegram
    fake_responses.responder = echo
    tg.fail("sendMessage", 400, "Bad Request: message text is empty", times=1)
    tg.push_text(USER, USER, "first")
    await tg.wait_for(lambda: len(fake_responses.requests) >= 1, timeout=10)
    tg.push_text(USER, USER, "second")
    await wait_answers(tg, USER, ["Answer to: second"])
    await tg.wait_until_idle()
    # One refused try, no resend of it; the ledger closes it as failed.
    assert await stack.db.inbound.unfinished("tg") == []
    assert [c.status for c in tg.calls("sendMessage")].count(400) == 1


async def test_a_telegram_turn_cancelled_through_the_http_api_ends_like_stop(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_responses: FakeResponsesAPI,
    pingu_daemon: DaemonStarter,
) -> None:
    tg = fake_telegram
    token = "gw-cancel-token-1234"
    config = config_for(tmp_path, tg, fake_responses)
    text_config = config.read_text(encoding="utf-8").replace(
        "[gateway]\n", f'[gateway]\ntoken = "{token}"\n'
    )
    config.write_text(text_config, encoding="utf-8")
    fake_responses.queue(slow(text("too late"), delay_s=5))
    daemon = await pingu_daemon(config)
    tg.push_text(USER, USER, "a long job")
    await tg.wait_for(lambda: len(fake_responses.requests) >= 1, timeout=10)
    async with (
        aiohttp.ClientSession() as http,
        http.delete(
            daemon.url(f"/v1/sessions/telegram:{USER}/run"),
            headers={"Authorization": f"Bearer {token}"},
        ) as r,
    ):
        assert r.status == 200
        assert (await r.json()) == {"cancelled": True}
    await wait_handled(daemon, 1)
    await wait_answers(tg, USER, ["Stopped."])
    assert await daemon.terminate() == 0

    # Closed in the ledger: a restart does not run the message again.
    fake_responses.responder = echo
    daemon = await pingu_daemon(config)
    tg.push_text(USER, USER, "next")
    await wait_answers(tg, USER, ["Stopped.", "Answer to: next"])
    assert await daemon.terminate() == 0
    db = await Database.open(tmp_path / "state" / "pingu.db")
    try:
        turns = await db.history.list_turns(f"telegram:{USER}")
        assert [(t.user_message, t.status) for t in turns] == [
            ("a long job", "cancelled"),
            ("next", "completed"),
        ]
        assert await db.inbound.unfinished("tg") == []
    finally:
        await db.close()
    assert len(fake_responses.requests) == 2


async def test_a_502_to_an_answer_is_uncertain_and_not_sent_again(
    stack: Stack, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    """A 5xx may come from a gateway after the Bot API delivered the message: the answer
    is not sent twice (here it was in fact not delivered; a message missing is the price
    of never showing one twice). The chat's next answer still comes."""
    tg = fake_telegram
    fake_responses.responder = lambda body: text("First answer.")
    tg.fail("sendMessage", 502, "Bad Gateway", times=1)
    tg.push_text(USER, USER, "first")
    await tg.wait_for(lambda: len(tg.calls("sendMessage")) >= 1, timeout=10)
    fake_responses.responder = echo
    tg.push_text(USER, USER, "second")
    await wait_answers(tg, USER, ["Answer to: second"])
    await tg.wait_until_idle()
    assert [c.status for c in tg.calls("sendMessage")] == [502, 200]
    assert await stack.db.inbound.unfinished("tg") == []


async def test_an_answer_cut_off_mid_send_by_close_is_not_sent_again_after_a_restart(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_responses: FakeResponsesAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tg = fake_telegram
    monkeypatch.setattr(channel_module, "CLOSE_GRACE_S", 0.2)
    fake_responses.responder = lambda body: text("The answer.")
    # Telegram takes the message, its response never comes before close() gives up.
    tg.stall("sendMessage", 40)
    async with running(tmp_path, tg, fake_responses) as stack:
        update_id = tg.push_text(USER, USER, "hello")
        await wait_answers(tg, USER, ["The answer."])
    row = await _row_after_close(tmp_path, update_id)
    assert (row.status, row.reply_message_id) == ("pending", UNKNOWN_MESSAGE_ID)

    async with running(tmp_path, tg, fake_responses) as stack:
        await wait_closed(stack.db, update_id)
        await tg.wait_until_idle()
        assert tg.chat_texts(USER) == ["The answer."]
    assert len(fake_responses.requests) == 1


async def test_a_new_command_cut_off_by_close_is_neither_resent_nor_applied_again(
    tmp_path: Path,
    fake_telegram: FakeTelegram,
    fake_responses: FakeResponsesAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tg = fake_telegram
    monkeypatch.setattr(channel_module, "CLOSE_GRACE_S", 0.2)
    fake_responses.responder = echo
    started = "Started a new conversation. The previous one is kept."
    tg.stall("sendMessage", 40)
    async with running(tmp_path, tg, fake_responses):
        update_id = tg.push_text(USER, USER, "/new")
        await wait_answers(tg, USER, [started])
    row = await _row_after_close(tmp_path, update_id)
    assert (row.status, row.chunks_sent) == ("pending", 1)

    async with running(tmp_path, tg, fake_responses) as stack:
        await wait_closed(stack.db, update_id)
        tg.push_text(USER, USER, "hello")
        await wait_answers(tg, USER, [started, "Answer to: hello"])
        # The chat moved once: the resumed /new did not start a third session.
        assert await stack.db.inbound.current_session(f"telegram:{USER}") == f"telegram:{USER}#2"
        turns = await stack.db.history.list_turns(f"telegram:{USER}#2")
        assert [t.user_message for t in turns] == ["hello"]


async def test_a_command_reply_sent_before_a_crash_is_not_sent_again_on_resume(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    """What a process killed between sending /help's reply and closing the update left:
    the update pending, its one chunk counted as sent."""
    tg = fake_telegram
    update_id = tg.push_text(USER, USER, "/help")
    payload = next(u for u in tg._updates if u["update_id"] == update_id)

    async def crashed_after_the_reply(db: Database) -> None:
        assert await db.inbound.accept("tg", update_id, f"telegram:{USER}", payload)
        await db.inbound.set_chunks_sent("tg", update_id, 1)

    async with running(tmp_path, tg, fake_responses, crashed_after_the_reply) as stack:
        await wait_closed(stack.db, update_id)
        await tg.wait_until_idle()
    assert tg.calls("sendMessage") == []

    # And a live reply leaves that record behind.
    async with running(tmp_path, tg, fake_responses) as stack:
        again = tg.push_text(USER, USER, "/help")
        await tg.wait_for(lambda: len(tg.chat_texts(USER)) == 1, timeout=10)
        await wait_closed(stack.db, again)
        row = await stack.db.inbound.get("tg", again)
        assert row is not None and row.chunks_sent == 1


async def test_an_update_the_ledger_cannot_store_is_closed_and_the_channel_goes_on(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    """Whatever makes one update unstorable (here a trigger refuses it), the batch is
    recorded update by update: that one as ignored, the others as usual."""
    tg = fake_telegram
    fake_responses.responder = echo

    async def refuse_poison(db: Database) -> None:
        await db.write_statement(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON inbound_updates "
            "WHEN NEW.payload LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'unstorable'); END",
            {},
        )

    async with running(tmp_path, tg, fake_responses, refuse_poison) as stack:
        tg.push_text(USER, USER, "before")
        await wait_answers(tg, USER, ["Answer to: before"])
        # In one batch: the poison one must not hold "after" back.
        poison = tg.push_text(USER, USER, "poison pill")
        tg.push_text(USER, USER, "after")
        await wait_answers(tg, USER, ["Answer to: before", "Answer to: after"])
        await tg.wait_until_idle()
        row = await stack.db.inbound.get("tg", poison)
        assert row is not None and row.status == "ignored"
        assert await stack.db.inbound.unfinished("tg") == []
        assert tg.pending_update_ids == []  # the offset moved past it


async def test_a_lone_surrogate_in_a_message_is_stored_and_answered(
    stack: Stack, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    """JSON allows "\\ud800", UTF-8 does not: it once made the whole batch unstorable,
    and the same batch was fetched forever."""
    tg = fake_telegram
    fake_responses.responder = echo
    tg.push_text(USER, USER, "before")
    await wait_answers(tg, USER, ["Answer to: before"])
    message = {
        "message_id": 900,
        "from": {"id": USER, "is_bot": False, "first_name": "User"},
        "date": int(time.time()),
        "chat": {"id": USER, "type": "private", "first_name": "User"},
        "text": "bad \ud800 text",
    }
    bad = tg.push_raw({"message": message})
    tg.push_text(USER, USER, "after")
    await wait_answers(
        tg, USER, ["Answer to: before", "Answer to: bad \ufffd text", "Answer to: after"]
    )
    await tg.wait_until_idle()
    row = await stack.db.inbound.get("tg", bad)
    assert row is not None and row.payload["message"]["text"] == "bad \ud800 text"
    assert await stack.db.inbound.unfinished("tg") == []


async def wait_closed(db: Database, update_id: int) -> None:
    """Until the ledger closes the update (resumed, answered or not)."""
    async with asyncio.timeout(10):
        while True:
            row = await db.inbound.get("tg", update_id)
            if row is not None and row.status != "pending":
                return
            await asyncio.sleep(0.02)


async def _row_after_close(tmp_path: Path, update_id: int) -> InboundRow:
    db = await Database.open(tmp_path / "state" / "pingu.db")
    try:
        row = await db.inbound.get("tg", update_id)
    finally:
        await db.close()
    assert row is not None
    return row
