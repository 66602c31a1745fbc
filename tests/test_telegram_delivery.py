"""Delivering answers when Telegram misbehaves for a while, and turns cancelled from
outside the chat: real components (channel, dispatcher, agent runtime, database) or the
real daemon, against the fake Bot API and the fake Responses API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from pingu.agent.runtime import AgentRuntime
from pingu.channels.telegram.api import RetryPolicy
from pingu.channels.telegram.channel import TelegramChannel
from pingu.config.loader import load_config
from pingu.dispatcher import Dispatcher
from pingu.store.db import Database
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


@pytest.fixture
async def stack(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> AsyncIterator[Stack]:
    config = load_config(config_for(tmp_path, fake_telegram, fake_responses), env={})
    db = await Database.open(config.db.path)
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


async def test_a_reply_telegram_refuses_for_a_while_is_retried_before_the_next_answer(
    stack: Stack, fake_telegram: FakeTelegram, fake_responses: FakeResponsesAPI
) -> None:
    tg = fake_telegram
    fake_responses.responder = echo
    # More failures than the sender's own retries of one request: the channel must keep
    # trying, in this process, and hold the chat's next answer back meanwhile.
    tg.fail("sendMessage", 502, "Bad Gateway", times=9)
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
