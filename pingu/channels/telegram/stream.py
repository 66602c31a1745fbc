"""One answer in one Telegram message, shown while it is written.

The answer message is created once, when there is first text to show (at most
`edit_interval_s` after the model starts answering, or at the end), and its id is
recorded before anything else happens to it; after that, progress and the final text
are edits of that message, which are idempotent. Chunks beyond the first are new
messages, each recorded once sent. That is what lets a restarted daemon finish a
delivery without sending anything twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from telegram.error import BadRequest, TelegramError

from pingu.agent.events import AgentEvent, AgentMessage, TextDelta
from pingu.channels.telegram.api import DeliveryUncertain, TelegramSender
from pingu.channels.telegram.render import MESSAGE_LIMIT, split_markdown

log = structlog.get_logger("pingu.channels.telegram")

EMPTY_ANSWER = "(The agent finished without a text answer.)"
# Recorded as the answer's message id when the sendMessage of its final first chunk may
# or may not have arrived (DeliveryUncertain, or cut off by a shutdown): Telegram's ids
# are positive, so 0 means "the answer was sent, id unknown": it is never sent again.
UNKNOWN_MESSAGE_ID = 0
# Recorded when a *progress* message's sendMessage was uncertain: at most a prefix of the
# answer may be in the chat, and it cannot be edited, so the final answer is still sent
# once, as a new message.
LOST_PROGRESS_MESSAGE_ID = -1
# Progress shows only the first message of an answer: splitting this much of the text
# is enough to know that first message (and whether more follow), however long the
# answer grows. (Splitting all of a 2 MB answer at every flush blocked the event loop.)
PROGRESS_WINDOW = 2 * MESSAGE_LIMIT


@dataclass
class DeliveryState:
    """What the ledger knows about an answer already under way."""

    message_id: int | None = None  # the answer's first message
    chunks_sent: int = 0  # chunks after the first one already sent (as a count of chunks)


class ReplyStreamer:
    def __init__(
        self,
        sender: TelegramSender,
        *,
        chat_id: int,
        thread_id: int | None,
        reply_to: int | None,
        edit_interval_s: float,
        state: DeliveryState,
        on_message_created: Callable[[int], Awaitable[None]],
        on_chunks_sent: Callable[[int], Awaitable[None]],
        after: asyncio.Future[None] | None = None,
    ) -> None:
        self._sender = sender
        # The chat's previous answer: this answer's first message waits for it to be
        # delivered (or given up on), so that answers appear in the order of the messages.
        self._after = after
        self._chat_id = chat_id
        self._thread_id = thread_id
        self._reply_to = reply_to
        self._interval = edit_interval_s
        self._state = state
        self._on_message_created = on_message_created
        self._on_chunks_sent = on_chunks_sent
        self._text = ""
        self._shown: str | None = None  # the Markdown the message shows, if known
        self._last_flush = 0.0
        self._frozen = False  # the answer outgrew one message: no more progress edits
        self._dirty = asyncio.Event()  # new text to show
        self._close = asyncio.Event()  # the turn is over: the final delivery takes over
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None
        self._edits = 0
        # The final answer's first chunk, once finish() knows it; and the text of a
        # progress message whose send was uncertain. If they are the same, that message
        # may show the answer's first chunk in full: it is then never sent again.
        self._final_first: str | None = None
        self._lost_progress: str | None = None

    @property
    def streamed_text(self) -> str:
        return self._text

    async def sink(self, event: AgentEvent) -> None:
        """The EventSink for this turn. Never raises."""
        try:
            if isinstance(event, TextDelta):
                if not self._text:
                    self._last_flush = time.monotonic()
                self._text += event.text
                self._dirty.set()
                if self._flusher is None and not self._closing:
                    self._flusher = asyncio.create_task(self._flush_loop())
            elif isinstance(event, AgentMessage):
                for chunk in split_markdown(event.text):
                    await self._sender.send(self._chat_id, chunk, thread_id=self._thread_id)
        except TelegramError as exc:
            log.warning("telegram.event_delivery_failed", error=self._sender.describe(exc))

    async def finish(self, text: str) -> None:
        """Deliver the complete final text: the first chunk into the answer message, the
        rest as new messages. Raises TelegramError if Telegram will not take it."""
        chunks = split_markdown(text) or [EMPTY_ANSWER]
        first = self._final_first = chunks[0]
        await self._stop_flusher()
        if self._state.message_id == LOST_PROGRESS_MESSAGE_ID and self._lost_progress == first:
            await self._record_created(UNKNOWN_MESSAGE_ID)
        if self._state.message_id in (None, LOST_PROGRESS_MESSAGE_ID):
            # (After a lost progress message the final text goes out once, anew: the
            # answer itself was never sent, only possibly a prefix of it. The state says
            # so until this send succeeds or is uncertain, so a retry sends it too.)
            await self._create(first, final=True)
        elif self._state.message_id == UNKNOWN_MESSAGE_ID:
            # Resumed after an uncertain send of this answer's first message: it may well
            # be in the chat already, and it cannot be edited. Never send it twice.
            log.info("telegram.first_message_uncertain_skipped")
        elif self._shown != first:
            try:
                await self._sender.edit(self._chat_id, self._state.message_id, first)
            except BadRequest as exc:
                # The message is gone (deleted by the user) or cannot be edited: send anew.
                log.info("telegram.edit_failed_resend", error=self._sender.describe(exc))
                await self._create(first, final=True)
        self._shown = first
        for index in range(max(1, self._state.chunks_sent), len(chunks)):
            try:
                await self._sender.send(self._chat_id, chunks[index], thread_id=self._thread_id)
            except DeliveryUncertain:
                pass  # counted as sent: a chunk possibly missing, never one twice
            except asyncio.CancelledError:
                # Cut off by a shutdown mid-request: it may be in the chat. Counted as
                # sent, like DeliveryUncertain, before the cancellation goes on.
                self._state.chunks_sent = index + 1
                await record_shielded(self._on_chunks_sent(index + 1))
                raise
            self._state.chunks_sent = index + 1
            await record_shielded(self._on_chunks_sent(index + 1))

    async def finish_abandoned(self) -> None:
        """The turn will not end here (shutdown): stop showing progress, send nothing."""
        await self._stop_flusher()

    def _must_wait(self) -> bool:
        return self._after is not None and not self._after.done()

    async def _create(self, markdown: str, *, final: bool) -> None:
        """Send the answer's first message: `final` for the answer's own first chunk,
        not for a progress message (a prefix of the answer)."""
        if self._after is not None:
            # asyncio.wait, not await: cancelling this must not cancel the other answer's.
            await asyncio.wait([self._after])
        try:
            message_id = await self._sender.send(
                self._chat_id, markdown, thread_id=self._thread_id, reply_to=self._reply_to
            )
        except DeliveryUncertain:
            # Maybe in the chat, id unknown: recorded so that neither this process nor a
            # restarted one sends it again.
            message_id = self._uncertain_id(markdown, final)
            if not final:
                self._lost_progress = markdown
        except asyncio.CancelledError:
            # A shutdown cut the request off: it may have reached Telegram all the same.
            # Recorded as uncertain (whatever happens to this task meanwhile) before the
            # cancellation goes on, or the next start would send the answer again.
            await self._record_created(self._uncertain_id(markdown, final))
            raise
        self._shown = markdown
        await self._record_created(message_id)

    def _uncertain_id(self, markdown: str, final: bool) -> int:
        """What to record for a first message that may or may not be in the chat."""
        if final or markdown == self._final_first:
            return UNKNOWN_MESSAGE_ID  # (a progress message showing the whole first chunk)
        return LOST_PROGRESS_MESSAGE_ID

    async def _record_created(self, message_id: int) -> None:
        # Shielded: a sent message whose id is not recorded would be sent again.
        self._state.message_id = message_id
        await record_shielded(self._on_message_created(message_id))

    async def _stop_flusher(self) -> None:
        # Never cancel a flush mid-request: a sendMessage cut short could create a
        # message whose id we never learn.
        self._closing = True
        self._close.set()
        self._dirty.set()
        if self._flusher is not None:
            try:
                await self._flusher
            except Exception as exc:
                log.warning("telegram.progress_failed", error=self._sender.describe(exc))

    async def _flush_loop(self) -> None:
        while not self._closing and not self._frozen:
            await self._dirty.wait()
            delay = self._last_flush + self._interval - time.monotonic()
            if delay > 0:
                # Wake early when the turn ends, so finish() never waits out an interval.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._close.wait(), timeout=delay)
            if self._closing:
                return
            self._dirty.clear()
            await self._flush()

    async def _flush(self) -> None:
        if self._state.message_id is not None and self._state.message_id <= 0:
            self._frozen = True  # an uncertain message (resumed): nothing to edit
            return
        if self._state.message_id is None and self._must_wait():
            return  # the previous answer is not delivered yet: no progress before it
        window = self._text[:PROGRESS_WINDOW]
        chunks = split_markdown(window)
        if not chunks:
            return
        if len(chunks) > 1 or len(window) < len(self._text):
            self._frozen = True  # the final delivery takes it from here
        first = chunks[0]
        self._last_flush = time.monotonic()
        if first == self._shown:
            return
        try:
            if self._state.message_id is None:
                await self._create(first, final=False)
                if self._state.message_id == LOST_PROGRESS_MESSAGE_ID:
                    self._frozen = True  # nothing left to edit
            elif await self._sender.edit(
                self._chat_id, self._state.message_id, first, wait_out_flood=False
            ):
                self._shown = first
                self._edits += 1
        except TelegramError as exc:
            log.info("telegram.progress_skipped", error=self._sender.describe(exc))
        self._last_flush = time.monotonic()


async def record_shielded(write: Awaitable[None]) -> None:
    """Await a ledger write that must happen even if the awaiting task is cancelled
    (close() cancelling a late delivery): the write goes on, and completes before the
    task ends unless the task is cancelled a second time."""
    task = asyncio.ensure_future(write)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        # Cancelled again while writing: let the write finish, then go on cancelling.
        with contextlib.suppress(Exception):
            await asyncio.shield(task)
        raise
