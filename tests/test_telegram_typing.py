"""The typing indicator: one per chat, shown while any of the chat's messages waits for or
runs its turn, gone once the chat has nothing left. Real channel, dispatcher, runtime and
database (the `stack` of test_telegram_delivery) against the fakes; typing_interval_s is
0.5 there."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pingu.channels.telegram.channel import TYPING_DELAY_S
from tests.fakes.responses_api import FakeResponsesAPI, Reply, slow, text
from tests.fakes.telegram_api import FakeTelegram
from tests.test_telegram_delivery import Stack, stack  # noqa: F401 (the fixture)
from tests.test_telegram_e2e import USER, user_text, wait_answers

INTERVAL_S = 0.5  # typing_interval_s in test_telegram_e2e.telegram_config


async def test_a_chat_with_queued_messages_shows_one_typing_indicator_until_done(
    stack: Stack,  # noqa: F811
    fake_telegram: FakeTelegram,
    fake_responses: FakeResponsesAPI,
) -> None:
    tg = fake_telegram

    def slow_echo(body: dict[str, Any]) -> Reply:
        return slow(text(f"Answer to: {user_text(body)}"), delay_s=0.8)

    fake_responses.responder = slow_echo
    started = time.monotonic()
    for n in range(3):  # all three queued at once: they run one after another
        tg.push_text(USER, USER, f"message {n}")
    await wait_answers(tg, USER, [f"Answer to: message {n}" for n in range(3)])
    elapsed = time.monotonic() - started

    typing = [a for a in tg.chat_actions if a.chat_id == USER]
    assert typing and all(a.action == "typing" for a in typing)
    # One loop for the chat: its first action after the delay, then one per interval
    # (sleeps are never shorter than asked). A loop per queued message would send
    # about three times as many.
    first = min(TYPING_DELAY_S, INTERVAL_S)
    assert len(typing) <= 1 + (elapsed - first) / INTERVAL_S

    # The chat has nothing left: no more typing.
    shown = len(typing)
    await asyncio.sleep(3 * INTERVAL_S)
    assert len([a for a in tg.chat_actions if a.chat_id == USER]) == shown
    assert not stack.channel._typing
