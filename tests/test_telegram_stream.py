"""The reply streamer against the fake Bot API with the real python-telegram-bot client:
throttled progress, the final text, and finishing a delivery after a restart without
sending anything twice."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from telegram.error import RetryAfter

from pingu.agent.events import TextDelta
from pingu.channels.telegram import stream as stream_module
from pingu.channels.telegram.api import TelegramSender, build_bot
from pingu.channels.telegram.render import split_markdown
from pingu.channels.telegram.stream import (
    LOST_PROGRESS_MESSAGE_ID,
    PROGRESS_WINDOW,
    UNKNOWN_MESSAGE_ID,
    DeliveryState,
    ReplyStreamer,
)
from tests.fakes.telegram_api import FakeTelegram

CHAT = 111


@pytest.fixture
async def sender(fake_telegram: FakeTelegram) -> AsyncIterator[TelegramSender]:
    bot = build_bot(fake_telegram.token, fake_telegram.url, poll_timeout_s=1)
    await bot.initialize()
    try:
        yield TelegramSender(bot, fake_telegram.token)
    finally:
        await bot.shutdown()


class Ledger:
    """What the channel would write to db.inbound."""

    def __init__(self) -> None:
        self.message_ids: list[int] = []
        self.chunks_sent: list[int] = []

    async def created(self, message_id: int) -> None:
        self.message_ids.append(message_id)

    async def chunks(self, count: int) -> None:
        self.chunks_sent.append(count)


def streamer(sender: TelegramSender, ledger: Ledger, state: DeliveryState, interval: float):
    return ReplyStreamer(
        sender,
        chat_id=CHAT,
        thread_id=None,
        reply_to=None,
        edit_interval_s=interval,
        state=state,
        on_message_created=ledger.created,
        on_chunks_sent=ledger.chunks,
    )


async def test_deltas_within_one_interval_become_one_message(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")  # makes the chat exist
    ledger = Ledger()
    reply = streamer(sender, ledger, DeliveryState(), interval=30.0)
    for word in ["Hello", " **wonderful**", " world"]:
        await reply.sink(TextDelta(word))
    await reply.finish("Hello **wonderful** world")
    assert fake_telegram.chat_texts(CHAT) == ["Hello wonderful world"]
    assert fake_telegram.calls("editMessageText") == []
    assert ledger.message_ids == [fake_telegram.chat_messages(CHAT)[0].message_id]


async def test_progress_edits_one_message_and_the_final_text_is_complete(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    ledger = Ledger()
    reply = streamer(sender, ledger, DeliveryState(), interval=0.0)
    await reply.sink(TextDelta("First part"))
    await fake_telegram.wait_for(lambda: fake_telegram.chat_texts(CHAT) == ["First part"])
    await reply.sink(TextDelta(", second part"))
    await fake_telegram.wait_for(
        lambda: fake_telegram.chat_texts(CHAT) == ["First part, second part"]
    )
    await reply.finish("First part, second part, and the end.")
    assert fake_telegram.chat_texts(CHAT) == ["First part, second part, and the end."]
    assert len(ledger.message_ids) == 1


async def test_a_resumed_delivery_edits_the_recorded_message_and_sends_only_missing_chunks(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    answer = "\n\n".join(f"Paragraph {n} " + "text " * 700 for n in range(4))
    chunks = split_markdown(answer)
    assert len(chunks) == 4

    # Before the crash: the first message and one extra chunk went out and were recorded.
    first = await sender.send(CHAT, chunks[0])
    await sender.send(CHAT, chunks[1])
    ledger = Ledger()
    reply = streamer(sender, ledger, DeliveryState(message_id=first, chunks_sent=2), 1.0)
    await reply.finish(answer)

    shown = fake_telegram.chat_texts(CHAT)
    assert [t.split(" ")[1] for t in shown if t] == ["0", "1", "2", "3"]  # each chunk once
    assert ledger.message_ids == []  # no new first message
    assert ledger.chunks_sent == [3, 4]
    # The identical re-edit of the first message counted as success.
    assert fake_telegram.calls("editMessageText")[-1].status == 400


@pytest.fixture
async def impatient_sender(fake_telegram: FakeTelegram) -> AsyncIterator[TelegramSender]:
    """A sender whose read timeout the fake can outlast."""
    bot = build_bot(fake_telegram.token, fake_telegram.url, poll_timeout_s=1, read_timeout_s=0.3)
    await bot.initialize()
    try:
        yield TelegramSender(bot, fake_telegram.token)
    finally:
        await bot.shutdown()


async def test_a_send_that_timed_out_after_delivery_is_not_sent_again(
    fake_telegram: FakeTelegram, impatient_sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    # Telegram delivers the answer, then its response comes too late for the client.
    fake_telegram.stall("sendMessage", 1.0)
    ledger = Ledger()
    reply = streamer(impatient_sender, ledger, DeliveryState(), interval=30.0)
    await reply.sink(TextDelta("The answer"))
    await reply.finish("The answer")
    assert fake_telegram.chat_texts(CHAT) == ["The answer"]  # once, not twice
    assert len(fake_telegram.calls("sendMessage")) <= 1
    # The ledger says "sent, id unknown": a resumed delivery will not send it again either.
    assert ledger.message_ids == [UNKNOWN_MESSAGE_ID]
    resumed = streamer(impatient_sender, Ledger(), DeliveryState(UNKNOWN_MESSAGE_ID), 30.0)
    await resumed.finish("The answer")
    assert fake_telegram.chat_texts(CHAT) == ["The answer"]


async def test_an_uncertain_extra_chunk_is_counted_as_sent_and_an_edit_is_retried(
    fake_telegram: FakeTelegram, impatient_sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    answer = "\n\n".join(f"Paragraph {n} " + "text " * 700 for n in range(3))
    first = await impatient_sender.send(CHAT, "Paragraph 0 (progress)")
    # The edit times out after taking effect: editing again is harmless and is done.
    fake_telegram.stall("editMessageText", 1.0)
    # The second chunk's response is late: the third chunk still goes out, the second
    # is not repeated.
    fake_telegram.stall("sendMessage", 1.0)
    ledger = Ledger()
    reply = streamer(impatient_sender, ledger, DeliveryState(message_id=first), 30.0)
    await reply.finish(answer)
    shown = fake_telegram.chat_texts(CHAT)
    assert [t.split(" ")[1] for t in shown if t] == ["0", "1", "2"]
    assert ledger.chunks_sent == [2, 3]
    assert len(fake_telegram.calls("editMessageText")) >= 1


async def test_progress_splits_only_the_first_message_worth_of_a_long_answer(
    fake_telegram: FakeTelegram, sender: TelegramSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Splitting a whole 2 MB answer for a progress edit blocked the event loop: progress
    renders only what can still change, the full split happens once, at the end."""
    split_sizes: list[int] = []

    def recording_split(markdown: str, *args: object) -> list[str]:
        split_sizes.append(len(markdown))
        return split_markdown(markdown, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(stream_module, "split_markdown", recording_split)
    fake_telegram.push_text(CHAT, CHAT, "hi")
    reply = streamer(sender, Ledger(), DeliveryState(), interval=0.0)
    await reply.sink(TextDelta("Start. "))
    await fake_telegram.wait_for(lambda: fake_telegram.chat_texts(CHAT) == ["Start."])
    bulk = "\n\n".join(f"Paragraph {n} " + "word " * 200 for n in range(500))
    await reply.sink(TextDelta(bulk))
    await fake_telegram.wait_for(lambda: len(fake_telegram.calls("editMessageText")) >= 1)
    during_streaming = list(split_sizes)
    answer = "Start. " + bulk
    await reply.finish(answer)

    assert max(during_streaming) <= PROGRESS_WINDOW < len(answer)
    assert split_sizes.count(len(answer)) == 1  # the final delivery's one full split
    shown = fake_telegram.chat_texts(CHAT)
    assert shown[0] is not None and shown[0].startswith("Start. Paragraph 0")
    assert "".join(t or "" for t in shown).count("Paragraph 499 ") == 1


async def test_after_an_uncertain_progress_message_the_final_answer_survives_a_failed_try(
    fake_telegram: FakeTelegram, impatient_sender: TelegramSender
) -> None:
    """The progress message (a prefix) may or may not be in the chat; the answer itself
    was never sent. A try of the final send that Telegram refuses (flood control) must
    not turn that into "the answer is sent": the next try sends it, once."""
    fake_telegram.push_text(CHAT, CHAT, "hi")
    ledger = Ledger()
    reply = streamer(impatient_sender, ledger, DeliveryState(), interval=0.0)
    fake_telegram.stall("sendMessage", 1.0)
    await reply.sink(TextDelta("Partial ans"))
    await fake_telegram.wait_for(lambda: ledger.message_ids, timeout=5)
    # Recorded apart from an uncertain *final* send: a resumed delivery still sends it.
    assert ledger.message_ids == [LOST_PROGRESS_MESSAGE_ID]
    final = "Partial answer, complete now."
    # Longer than the sender waits out inside one send: raised to the caller (the
    # channel), which tries finish() again later.
    fake_telegram.flood("sendMessage", retry_after=3600, times=1)
    with pytest.raises(RetryAfter):
        await reply.finish(final)
    await reply.finish(final)
    assert fake_telegram.chat_texts(CHAT) == ["Partial ans", final]
    assert ledger.message_ids[:1] == [LOST_PROGRESS_MESSAGE_ID]
    assert ledger.message_ids[-1] == fake_telegram.chat_messages(CHAT)[-1].message_id


async def test_a_resumed_answer_after_a_lost_progress_message_is_sent_once(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    ledger = Ledger()
    resumed = streamer(sender, ledger, DeliveryState(LOST_PROGRESS_MESSAGE_ID), 30.0)
    await resumed.finish("The whole answer.")
    assert fake_telegram.chat_texts(CHAT) == ["The whole answer."]
    assert len(ledger.message_ids) == 1 and ledger.message_ids[0] > 0
    # Resumed again (say, the process died before closing the update): not again.
    again = streamer(sender, Ledger(), DeliveryState(ledger.message_ids[0]), 30.0)
    await again.finish("The whole answer.")
    assert fake_telegram.chat_texts(CHAT) == ["The whole answer."]


async def test_an_uncertain_progress_message_showing_the_whole_answer_is_not_repeated(
    fake_telegram: FakeTelegram, impatient_sender: TelegramSender
) -> None:
    fake_telegram.push_text(CHAT, CHAT, "hi")
    ledger = Ledger()
    reply = streamer(impatient_sender, ledger, DeliveryState(), interval=0.0)
    fake_telegram.stall("sendMessage", 1.0)
    await reply.sink(TextDelta("Short answer."))
    await fake_telegram.wait_for(lambda: ledger.message_ids, timeout=5)
    await reply.finish("Short answer.")
    assert fake_telegram.chat_texts(CHAT) == ["Short answer."]
    # From here on it counts as the answer sent, id unknown (a restart skips it too).
    assert ledger.message_ids[-1] == UNKNOWN_MESSAGE_ID
