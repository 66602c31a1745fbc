"""The Telegram channel: our own long-polling loop around python-telegram-bot's `Bot`.

Exactly-once handling rests on the update ledger (`db.inbound`). Telegram forgets an
update once a later getUpdates asks for a higher offset, so every update of a batch is
recorded in the ledger before the offset moves past it; at start, unfinished ledger rows
are resumed and updates already recorded are ignored. An answer's first message is
created once and its id recorded (see stream.py); a turn is saved with
`inbound_ref = "telegram:{update_id}"`, so a resumed update whose turn was already saved
has its stored answer delivered instead of asking the model again.

Per-chat order and cross-chat concurrency come from the Dispatcher: updates are
submitted to it one by one, in update order, from the polling loop; everything slow
(Telegram calls, waiting for turns) happens in one task per update.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from telegram import BotCommand
from telegram.error import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)

from pingu.agent.turn import CANCELLED, COMPLETED, LIMITED, TurnRequest, TurnResult
from pingu.channels.telegram.api import (
    DeliveryUncertain,
    RetryPolicy,
    TelegramSender,
    build_bot,
    redact,
    retry_after_seconds,
)
from pingu.channels.telegram.render import split_markdown
from pingu.channels.telegram.stream import DeliveryState, ReplyStreamer, record_shielded
from pingu.channels.telegram.updates import (
    COMMAND,
    IGNORE,
    NOT_TEXT,
    TEXT,
    Incoming,
    chat_key_of,
    parse_update,
    update_id_of,
)
from pingu.dispatcher import CANCEL_SHUTDOWN, cancel_reason

if TYPE_CHECKING:
    from pingu.agent.runtime import AgentRuntime
    from pingu.config.model import ChannelConfig, Config
    from pingu.dispatcher import Dispatcher
    from pingu.store.db import Database

log = structlog.get_logger("pingu.channels.telegram")

ALLOWED_UPDATES = ["message"]
COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "Say hello"),
    ("help", "What I can do"),
    ("new", "Start a fresh conversation"),
    ("stop", "Stop the answer being written"),
    ("status", "Agent, model and this conversation"),
    ("usage", "Tokens and cost for this chat"),
)
HELP_TEXT = (
    "I am Pingu, an assistant that can use tools. Send me a message and I will answer.\n\n"
    "/new – start a fresh conversation (the old one is kept)\n"
    "/stop – stop the answer being written\n"
    "/status – agent, model and this conversation\n"
    "/usage – tokens and cost for this chat\n"
    "/help – this text"
)
NOT_TEXT_REPLY = "I can only read text for now."
ERROR_REPLY = "Sorry, something went wrong while answering this message."
# A message whose handling was interrupted this many times (crashes) is given up on.
MAX_ATTEMPTS = 3
# A turn shows "typing" once it has taken this long.
TYPING_DELAY_S = 1.0
# How long close() waits for answers still being delivered. The daemon's whole stop is
# grace (20 s) + this + the HTTP shutdown (3 s): systemd's TimeoutStopSec covers the sum.
CLOSE_GRACE_S = 15.0
# A reply Telegram did not take (unreachable, 5xx, ...) is sent again in this process
# with this backoff until it is delivered, Telegram refuses it for good, or the channel
# closes (then the next start delivers it).
DELIVERY_RETRY = RetryPolicy(first_s=1.0, cap_s=30.0)
# The sender's own quick retries of one request before the channel's backoff takes over.
SEND_RETRY = RetryPolicy(first_s=1.0, cap_s=10.0)


@dataclass
class _Typing:
    """A chat's typing indicator: one per chat (topic), shown while any of its accepted
    messages waits for or runs its turn (`users` of them)."""

    users: int
    stop: asyncio.Event


class TelegramChannel:
    def __init__(
        self,
        cfg: ChannelConfig,
        *,
        config: Config,
        dispatcher: Dispatcher,
        db: Database,
        runtime: AgentRuntime,
        delivery_retry: RetryPolicy = DELIVERY_RETRY,
        send_retry: RetryPolicy = SEND_RETRY,
    ) -> None:
        settings = cfg.settings
        if not settings.bot_token:
            raise ValueError(f"channel.{cfg.name}: settings.bot_token is not set")
        self.name = cfg.name
        self._settings = settings
        self._config = config
        self._dispatcher = dispatcher
        self._db = db
        self._runtime = runtime
        self._token = settings.bot_token
        self._allowed = frozenset(settings.allowed_users)
        self._bot = build_bot(settings.bot_token, settings.api_base_url, settings.poll_timeout_s)
        self._sender = TelegramSender(self._bot, settings.bot_token, retry=send_retry)
        self._delivery_retry = delivery_retry
        self._closing = asyncio.Event()  # close() began: retries stop, work stays resumable
        self._bot_id = 0
        self._bot_username = ""
        self._connected = False
        self._receiving = False
        self._stop = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._typing: dict[tuple[int, int | None], _Typing] = {}
        self._typing_tasks: set[asyncio.Task[None]] = set()  # also those winding down
        # Each chat's latest answer under way, done once delivered or given up on: the
        # next answer of the chat waits for it (order within a chat).
        self._answers: dict[str, asyncio.Future[None]] = {}
        # Each chat's current session: only this channel changes it (/new), so it is read
        # from the database once per chat, not once per message.
        self._sessions: dict[str, str] = {}
        self._last_poll_ok: float | None = None
        self._last_error: str | None = None
        self._handled = 0

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        connected = True
        try:
            await self._connect()
        except InvalidToken:
            # `from None`: PTB's message quotes the token.
            raise ValueError(self._refused_token_message()) from None
        except TelegramError as exc:
            # Telegram unreachable: the daemon runs on (/healthz says this channel is
            # not ok) and the polling loop keeps trying to connect, with backoff.
            connected = False
            self._last_error = self._sender.describe(exc)
            log.warning(
                "telegram.connect_failed", channel=self.name, error=self._last_error, retry_in_s=1.0
            )
        self._receiving = True
        self._poller = asyncio.create_task(
            self._run(retry_first=not connected), name=f"telegram:{self.name}:poll"
        )

    def _refused_token_message(self) -> str:
        return (
            f"channel.{self.name}: Telegram refused the bot token; check "
            f"channel.{self.name}.settings.bot_token"
        )

    async def stop_receiving(self) -> None:
        self._receiving = False
        self._stop.set()
        if self._poller is not None:
            await self._poller
            self._poller = None

    async def close(self) -> None:
        await self.stop_receiving()
        self._closing.set()
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=CLOSE_GRACE_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        for task in list(self._typing_tasks):
            task.cancel()
        if self._typing_tasks:
            await asyncio.wait(set(self._typing_tasks))
        with contextlib.suppress(Exception):
            await self._bot.shutdown()

    def status(self) -> dict[str, Any]:
        polled_ago = (
            None if self._last_poll_ok is None else round(time.monotonic() - self._last_poll_ok, 1)
        )
        return {
            "ok": self._connected and self._receiving and self._last_error is None,
            "bot": self._bot_username or None,
            "receiving": self._receiving,
            "last_poll_s_ago": polled_ago,
            "in_flight": len(self._tasks),
            "handled": self._handled,
            "error": self._last_error,
        }

    async def _connect(self) -> None:
        if self._connected:
            return
        await self._bot.initialize()  # getMe
        self._bot_id = self._bot.id
        self._bot_username = self._bot.username or ""
        self._connected = True
        self._last_error = None
        try:
            await self._bot.set_my_commands([BotCommand(c, d) for c, d in COMMANDS])
        except TelegramError as exc:
            log.warning("telegram.set_commands_failed", error=self._sender.describe(exc))
        log.info("telegram.connected", channel=self.name, bot=self._bot_username)

    # -- polling --------------------------------------------------------------------

    async def _run(self, *, retry_first: bool = False) -> None:
        backoff = 1.0
        if retry_first:  # start() has just tried
            if await self._sleep_or_stop(backoff):
                return
            backoff = 2.0
        while self._receiving and not self._connected:
            try:
                await self._connect()
            except Exception as exc:
                if isinstance(exc, InvalidToken):  # revoked while we were away
                    self._last_error = self._refused_token_message()
                else:
                    self._last_error = self._sender.describe(exc)
                log.warning(
                    "telegram.connect_failed",
                    channel=self.name,
                    error=self._last_error,
                    retry_in_s=backoff,
                )
                if await self._sleep_or_stop(backoff):
                    return
                backoff = min(backoff * 2, 60.0)
        if not self._receiving:
            return
        await self._resume_unfinished()
        await self._poll()

    async def _poll(self) -> None:
        offset: int | None = None
        try:
            recorded = await self._db.inbound.max_update_id(self.name)
            offset = None if recorded is None else recorded + 1
        except Exception as exc:  # Telegram then re-sends unconfirmed updates: deduplicated
            log.warning("telegram.max_update_id_failed", error=repr(exc))
        backoff = 1.0
        while self._receiving:
            fetch = asyncio.create_task(
                self._bot.get_raw_updates(offset, self._settings.poll_timeout_s, ALLOWED_UPDATES)
            )
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait({fetch, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not fetch.done():
                # Stopping: the updates of an unanswered request are not confirmed, so
                # Telegram sends them again next time.
                fetch.cancel()
                with contextlib.suppress(BaseException):
                    await fetch
                return
            try:
                batch = fetch.result()
                self._last_poll_ok = time.monotonic()
                offset = await self._ingest(batch, offset)
                self._last_error = None
                backoff = 1.0
            except RetryAfter as exc:
                if await self._sleep_or_stop(retry_after_seconds(exc)):
                    return
            except Exception as exc:
                self._last_error = redact(f"{type(exc).__name__}: {exc}", self._token)
                hint = (
                    " (another process polls with this token, or a webhook is set)"
                    if isinstance(exc, Conflict)
                    else ""
                )
                log.warning(
                    "telegram.poll_failed",
                    channel=self.name,
                    error=self._last_error + hint,
                    retry_in_s=backoff,
                )
                if await self._sleep_or_stop(backoff):
                    return
                backoff = min(backoff * 2, 30.0)

    async def _sleep_or_stop(self, seconds: float) -> bool:
        """Sleep; True if the channel was told to stop meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        return self._stop.is_set()

    async def _ingest(self, batch: list[Any], offset: int | None) -> int | None:
        """Record the batch, then handle what is new. Returns the next offset, which
        confirms the batch: only reached once every update of it is in the ledger.
        The batch is recorded in one transaction; if that fails, its updates are recorded
        one by one (see _accept_one_by_one). Only if the database fails altogether does
        this raise: the offset stays and Telegram sends the same batch again."""
        records: list[tuple[int, str, dict[str, Any]]] = []
        highest = offset - 1 if offset is not None else None
        for payload in batch:
            update_id = update_id_of(payload)
            if update_id is None:
                log.warning("telegram.malformed_update", reason="no update_id")
                continue
            records.append((update_id, chat_key_of(payload), payload))
            highest = update_id if highest is None else max(highest, update_id)
        try:
            new_ids = await self._db.inbound.accept_many(self.name, records)
        except Exception as exc:
            log.warning("telegram.batch_not_recorded", updates=len(records), error=repr(exc))
            new_ids = await self._accept_one_by_one(records)
        fresh: list[tuple[int, dict[str, Any]]] = []
        for update_id, _, payload in records:
            if update_id in new_ids:
                new_ids.discard(update_id)  # an id twice in one batch is handled once
                fresh.append((update_id, payload))
            else:
                log.info("telegram.duplicate_update", update_id=update_id)
        await self._route_all(fresh)
        return None if highest is None else highest + 1

    async def _accept_one_by_one(self, records: list[tuple[int, str, dict[str, Any]]]) -> set[int]:
        """One update the ledger cannot store must not stop the channel (the offset would
        never move past it): it is recorded as a closed minimal row, the others as usual.
        If even the minimal row cannot be written, the database itself is failing: that
        raises, and nothing is confirmed to Telegram."""
        new_ids: set[int] = set()
        for update_id, chat_key, payload in records:
            try:
                if await self._db.inbound.accept(self.name, update_id, chat_key, payload):
                    new_ids.add(update_id)
            except Exception as exc:
                await self._db.inbound.accept_unrecordable(
                    self.name, update_id, chat_key, type(exc).__name__
                )
                log.error("telegram.update_not_recorded", update_id=update_id, error=repr(exc))
        return new_ids

    async def _route_all(self, fresh: list[tuple[int, dict[str, Any]]]) -> None:
        for update_id, payload in fresh:
            # One update's trouble never stops the loop or the others.
            try:
                await self._route(update_id, payload, None)
            except Exception:
                log.exception("telegram.update_failed", update_id=update_id)

    # -- routing ----------------------------------------------------------------------

    async def _route(
        self, update_id: int, payload: Any, state: DeliveryState | None, attempts: int = 0
    ) -> None:
        """Handle one recorded update: everything that must happen in update order
        (session choice, /new, submitting the turn) happens here, the rest in a task."""
        try:
            if not isinstance(payload, dict):
                raise TypeError("update is not an object")
            incoming = parse_update(payload, bot_id=self._bot_id, bot_username=self._bot_username)
        except Exception as exc:
            log.warning("telegram.malformed_update", update_id=update_id, error=repr(exc))
            await self._finish(update_id, "ignored")
            return
        if incoming.kind == IGNORE:
            log.info("telegram.ignored", update_id=update_id, reason=incoming.reason)
            await self._finish(update_id, "ignored")
            return
        replied = state.chunks_sent if state is not None else 0
        if incoming.user_id not in self._allowed:
            self._spawn(self._refuse(incoming, replied))
            return
        log.debug(
            "telegram.accepted",
            update_id=update_id,
            chat=incoming.chat_key,
            user_id=incoming.user_id,
            kind=incoming.kind,
            command=incoming.command or None,
        )
        if incoming.kind == NOT_TEXT:
            self._spawn(self._reply_and_finish(incoming, NOT_TEXT_REPLY, "done", replied))
        elif incoming.kind == COMMAND:
            await self._command(incoming, replied)
        elif incoming.kind == TEXT:
            await self._start_turn(incoming, state or DeliveryState(), attempts)

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("telegram.task_failed", error=repr(task.exception()))

    async def _finish(self, update_id: int, status: str) -> None:
        await self._db.inbound.mark_done(self.name, update_id, status)
        self._handled += 1
        log.info("telegram.done", update_id=update_id, status=status)

    async def _refuse(self, incoming: Incoming, replied: int = 0) -> None:
        log.warning(
            "telegram.refused",
            update_id=incoming.update_id,
            user_id=incoming.user_id,
            chat_id=incoming.chat_id,
            hint=f"to allow this user: {self._allow_command(incoming.user_id)}",
        )
        text = (
            f"Sorry, you are not allowed to use this bot. Your Telegram user ID is "
            f"{incoming.user_id}; the bot's owner can allow it."
        )
        await self._reply_and_finish(incoming, text, "ignored", replied)

    def _allow_command(self, user_id: int) -> str:
        """The `pingu config set` command that adds a user to the allowed ones (the value
        is the whole list: setting only the new ID would drop the others)."""
        users = [*self._settings.allowed_users, user_id]
        value = "[" + ", ".join(str(u) for u in users) + "]"
        return f"pingu config set channel.{self.name}.settings.allowed_users '{value}'"

    async def _reply_and_finish(
        self, incoming: Incoming, text: str, status: str, replied: int = 0
    ) -> None:
        """Send a reply that is not an answer (commands, refusals, ...), chunk by chunk.
        Each chunk sent (or maybe sent) is counted in the ledger's chunks_sent, so that a
        reply resumed after a crash (`replied`: the count recorded) goes on after it."""
        chunks = split_markdown(text)
        sent = replied
        attempt = 0
        while sent < len(chunks):
            try:
                await self._sender.send(
                    incoming.chat_id,
                    chunks[sent],
                    thread_id=incoming.thread_id,
                    reply_to=incoming.message_id if incoming.is_group else None,
                )
            except DeliveryUncertain:
                pass  # maybe delivered: never sent twice
            except asyncio.CancelledError:
                # Cut off mid-request (close()): maybe delivered, counted like the above.
                await record_shielded(self._record_replied(incoming, sent + 1))
                raise
            except TelegramError as exc:
                attempt += 1
                if not await self._wait_to_retry(incoming, exc, attempt, "telegram.reply_failed"):
                    if _is_final(exc):
                        status = "failed"
                        break
                    return  # closing: left unfinished, sent at the next start
                continue
            sent += 1
            await record_shielded(self._record_replied(incoming, sent))
        await self._finish(incoming.update_id, status)

    async def _record_replied(self, incoming: Incoming, chunks: int) -> None:
        await self._db.inbound.set_chunks_sent(self.name, incoming.update_id, chunks)

    async def _wait_to_retry(
        self, incoming: Incoming, exc: TelegramError, attempt: int, event: str
    ) -> bool:
        """After a failed delivery: True once it is time to try again; False if the error
        is final (Telegram refused the message for good) or the channel is closing."""
        error = self._sender.describe(exc)
        if _is_final(exc):
            log.warning(event, update_id=incoming.update_id, error=error, final=True)
            return False
        delay = self._delivery_retry.delay(attempt)
        if isinstance(exc, RetryAfter):
            delay = max(delay, retry_after_seconds(exc))
        log.warning(event, update_id=incoming.update_id, error=error, retry_in_s=delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=delay)
        return not self._closing.is_set()

    # -- turns --------------------------------------------------------------------------

    def _next_answer(
        self, chat_key: str
    ) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """The chat's previous answer still under way (if any), and this one's future."""
        previous = self._answers.get(chat_key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._answers[chat_key] = mine

        def forget(_: asyncio.Future[None]) -> None:
            if self._answers.get(chat_key) is mine:
                del self._answers[chat_key]

        mine.add_done_callback(forget)
        return (previous if previous is not None and not previous.done() else None), mine

    async def _answering(self, answered: asyncio.Future[None], work: Awaitable[None]) -> None:
        try:
            await work
        finally:
            if not answered.done():
                answered.set_result(None)

    async def _start_turn(self, incoming: Incoming, state: DeliveryState, attempts: int) -> None:
        previous, answered = self._next_answer(incoming.chat_key)
        try:
            await self._start_turn_in_order(incoming, state, attempts, previous, answered)
        except BaseException:
            if not answered.done():
                answered.set_result(None)
            raise

    async def _start_turn_in_order(
        self,
        incoming: Incoming,
        state: DeliveryState,
        attempts: int,
        previous: asyncio.Future[None] | None,
        answered: asyncio.Future[None],
    ) -> None:
        update_id = incoming.update_id
        streamer = self._streamer(incoming, state, previous)
        ref = f"telegram:{update_id}"
        if attempts:
            # A resumed update: its turn may have been saved before the crash.
            ref, saved = await self._saved_turn(update_id)
            if saved is not None:
                text, status = _saved_answer(saved)
                log.info(
                    "telegram.resume_saved_answer",
                    update_id=update_id,
                    turn=saved.id,
                    turn_status=saved.status,
                )
                self._spawn(
                    self._answering(answered, self._deliver(incoming, streamer, text, status))
                )
                return
            if attempts > MAX_ATTEMPTS:
                log.error("telegram.giving_up", update_id=update_id, attempts=attempts)
                self._spawn(
                    self._answering(
                        answered, self._deliver(incoming, streamer, ERROR_REPLY, "failed")
                    )
                )
                return
        session_id = await self._current_session(incoming.chat_key)
        request = TurnRequest(
            session_id=session_id,
            user_message=incoming.text,
            channel="telegram",
            channel_id=incoming.chat_key,
            inbound_ref=ref,
        )
        try:
            future = await self._dispatcher.submit(request, streamer.sink)
        except Exception as exc:  # shutting down: left unfinished, resumed at the next start
            log.info("telegram.not_submitted", update_id=update_id, error=repr(exc))
            if not answered.done():
                answered.set_result(None)
            return
        self._spawn(
            self._answering(answered, self._await_turn(incoming, session_id, future, streamer))
        )

    async def _saved_turn(self, update_id: int) -> tuple[str, Any]:
        """The saved turn of an update, or the inbound_ref a new run should use.

        A cancelled turn is run again: it was cancelled by a shutdown before its answer
        was delivered (a turn /stop cancelled is closed in the ledger with its "Stopped."
        reply, so it is not resumed). It keeps its ref (refs are unique), so the re-run
        gets the next one ('#2', ...). A failed or limited turn is an answer: the user is
        told what the live turn would have said, and the model is not asked again."""
        attempt = 1
        while True:
            ref = f"telegram:{update_id}" if attempt == 1 else f"telegram:{update_id}#{attempt}"
            turn = await self._db.history.turn_for_inbound(ref)
            if turn is None:
                return ref, None
            if turn.status != CANCELLED:
                return ref, turn
            attempt += 1

    def _streamer(
        self, incoming: Incoming, state: DeliveryState, after: asyncio.Future[None] | None
    ) -> ReplyStreamer:
        update_id = incoming.update_id

        async def created(message_id: int) -> None:
            await self._db.inbound.set_reply_message(self.name, update_id, message_id)

        async def chunks_sent(count: int) -> None:
            await self._db.inbound.set_chunks_sent(self.name, update_id, count)

        return ReplyStreamer(
            self._sender,
            chat_id=incoming.chat_id,
            thread_id=incoming.thread_id,
            reply_to=incoming.message_id,
            edit_interval_s=self._settings.edit_interval_s,
            state=state,
            on_message_created=created,
            on_chunks_sent=chunks_sent,
            after=after,
        )

    async def _await_turn(
        self,
        incoming: Incoming,
        session_id: str,
        future: asyncio.Future[TurnResult],
        streamer: ReplyStreamer,
    ) -> None:
        async with self._typing_while(incoming.chat_id, incoming.thread_id):
            await asyncio.wait([future])
        if future.cancelled():
            if cancel_reason(future) == CANCEL_SHUTDOWN:
                # Cancelled by a shutdown: left unfinished, answered after the restart.
                log.info("telegram.turn_interrupted", update_id=incoming.update_id)
                await streamer.finish_abandoned()
                return
            # Stopped by the user (/stop, the HTTP API): the turn is over.
            partial = streamer.streamed_text.strip()
            text = f"{partial}\n\n(stopped)" if partial else "Stopped."
            await self._deliver(incoming, streamer, text, "done")
            return
        error = future.exception()
        if error is not None:
            log.error("telegram.turn_failed", update_id=incoming.update_id, error=repr(error))
            await self._deliver(incoming, streamer, ERROR_REPLY, "failed")
            return
        result = future.result()
        ok = result.status in (COMPLETED, LIMITED)
        text = result.text if result.text.strip() or ok else ERROR_REPLY
        await self._deliver(incoming, streamer, text, "done" if ok else "failed")

    async def _deliver(
        self, incoming: Incoming, streamer: ReplyStreamer, text: str, status: str
    ) -> None:
        # finish() picks up where a failed try stopped (the ledger's state): a retry
        # never sends a message twice.
        attempt = 0
        while True:
            try:
                await streamer.finish(text)
                break
            except TelegramError as exc:
                attempt += 1
                if await self._wait_to_retry(incoming, exc, attempt, "telegram.delivery_failed"):
                    continue
                if _is_final(exc):
                    status = "failed"
                    break
                return  # closing: left unfinished, delivered at the next start
        await self._finish(incoming.update_id, status)

    @contextlib.asynccontextmanager
    async def _typing_while(self, chat_id: int, thread_id: int | None) -> AsyncIterator[None]:
        """Typing is shown in the chat while any of its turns is queued or running: one
        loop per chat, however many of its messages wait."""
        key = (chat_id, thread_id)
        typing = self._typing.get(key)
        if typing is None:
            typing = self._typing[key] = _Typing(0, asyncio.Event())
            task = asyncio.create_task(self._keep_typing(chat_id, thread_id, typing.stop))
            self._typing_tasks.add(task)
            task.add_done_callback(self._typing_tasks.discard)
        typing.users += 1
        try:
            yield
        finally:
            typing.users -= 1
            if typing.users == 0:
                # Stopped, not cancelled: a sendChatAction cut off mid-request would
                # cost its connection. The chat's next message starts a new loop.
                typing.stop.set()
                if self._typing.get(key) is typing:
                    del self._typing[key]

    async def _keep_typing(self, chat_id: int, thread_id: int | None, stop: asyncio.Event) -> None:
        # Only for turns that take a while: a quick answer is its own sign of life, and
        # a sendChatAction per message costs a request for nothing.
        interval = self._settings.typing_interval_s
        if await _set_within(stop, min(TYPING_DELAY_S, interval)):
            return
        while True:
            await self._sender.typing(chat_id, thread_id)
            if await _set_within(stop, interval):
                return

    # -- resume ---------------------------------------------------------------------------

    async def _resume_unfinished(self) -> None:
        try:
            rows = await self._db.inbound.unfinished(self.name)
        except Exception:
            log.exception("telegram.resume_failed")
            return
        if rows:
            log.info("telegram.resuming", channel=self.name, updates=len(rows))
        for row in rows:
            try:
                payload = row.payload
                if isinstance(payload, str):
                    payload = json.loads(payload)
                attempts = await self._db.inbound.add_attempt(self.name, row.update_id)
                state = DeliveryState(row.reply_message_id, row.chunks_sent)
                await self._route(row.update_id, payload, state, max(attempts, 1))
            except Exception:
                log.exception("telegram.resume_update_failed", update_id=row.update_id)

    # -- commands -------------------------------------------------------------------------

    async def _command(self, incoming: Incoming, replied: int = 0) -> None:
        command = incoming.command
        if command == "new":
            # Here, not in a task: messages after /new must go to the new session. Per
            # update: a /new resumed after a crash does not move the chat again.
            session_id = await self._db.inbound.start_new_session(
                incoming.chat_key, channel=self.name, update_id=incoming.update_id
            )
            self._sessions[incoming.chat_key] = session_id
            log.info("telegram.new_session", chat=incoming.chat_key, session=session_id)
            reply = "Started a new conversation. The previous one is kept."
        elif command == "stop":
            session_id = await self._current_session(incoming.chat_key)
            if self._dispatcher.cancel(session_id):
                # The stopped turn's own message says so: no second reply.
                await self._finish(incoming.update_id, "done")
                return
            reply = "Nothing is running."
        elif command in ("start", "help"):
            reply = HELP_TEXT
        elif command == "status":
            self._spawn(self._reply_later(incoming, self._status_text(incoming), replied))
            return
        elif command == "usage":
            self._spawn(self._reply_later(incoming, self._usage_text(incoming), replied))
            return
        else:
            reply = f"Unknown command /{command}. /help lists what I understand."
        self._spawn(self._reply_and_finish(incoming, reply, "done", replied))

    async def _reply_later(
        self, incoming: Incoming, text: Awaitable[str], replied: int = 0
    ) -> None:
        try:
            reply = await text
        except Exception:
            log.exception("telegram.command_failed", command=incoming.command)
            reply = ERROR_REPLY
        await self._reply_and_finish(incoming, reply, "done", replied)

    async def _current_session(self, chat_key: str) -> str:
        session_id = self._sessions.get(chat_key)
        if session_id is None:
            session_id = await self._db.inbound.current_session(chat_key)
            self._sessions[chat_key] = session_id
        return session_id

    async def _status_text(self, incoming: Incoming) -> str:
        session_id = await self._current_session(incoming.chat_key)
        agent = self._runtime.default_agent_name
        model = self._config.llm_for(self._runtime.resolve_agent(agent)).model
        turns = await self._db.history.count_turns(session_id)
        history = await self._db.history.load_input_history(session_id)
        approx_tokens = len(json.dumps(history)) // 4
        running = self._dispatcher.is_running(session_id)
        waiting = self._dispatcher.pending(session_id)
        return (
            f"Agent: {agent}\nModel: {model}\nSession: {session_id}\nTurns: {turns}\n"
            f"Context: {len(history)} items, about {approx_tokens} tokens\n"
            f"Running: {'yes' if running else 'no'}" + (f", {waiting} waiting" if waiting else "")
        )

    async def _usage_text(self, incoming: Incoming) -> str:
        # The chat's sessions: its first one, those /new started ('#2', ...) and their
        # sub-agents' sessions ('...:delegate:<agent>'); not the topics of a group. One
        # query over them, however many sessions the database holds.
        key = incoming.chat_key
        totals = _UsageSum()
        totals.add(await self._db.usage.totals_for_chat(key))
        return totals.describe(await self._db.usage.chat_conversations(key))


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`; True if it is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()


def _saved_answer(turn: Any) -> tuple[str, str]:
    """What a live turn with this saved outcome delivered, and the ledger status."""
    if turn.status == COMPLETED:
        return turn.reply_text, "done"
    if turn.status == LIMITED:
        # The explanation of the limit is the turn's answer (saved as its error).
        return turn.error or turn.reply_text or ERROR_REPLY, "done"
    return ERROR_REPLY, "failed"


class _UsageSum:
    """`db.usage.totals` rows (one per model) of several sessions, added up."""

    def __init__(self) -> None:
        self.input_tokens = self.cached_input_tokens = self.output_tokens = 0
        self.total_tokens = self.calls = self.unpriced_calls = 0
        self.cost = 0.0

    def add(self, totals: list[Any]) -> None:
        for row in totals:
            self.input_tokens += row.input_tokens
            self.cached_input_tokens += row.cached_input_tokens
            self.output_tokens += row.output_tokens
            self.total_tokens += row.total_tokens
            self.calls += row.calls
            self.unpriced_calls += row.unpriced_calls
            self.cost += row.cost_estimate or 0.0

    def describe(self, sessions: int) -> str:
        cost = f"${self.cost:.4f}"
        if self.unpriced_calls:
            cost += f" (plus {self.unpriced_calls} model calls with no known price)"
        return (
            f"Usage in this chat ({sessions} conversation{'s' if sessions != 1 else ''}, "
            f"{self.calls} model calls):\n"
            f"Input tokens: {self.input_tokens} ({self.cached_input_tokens} cached)\n"
            f"Output tokens: {self.output_tokens}\nTotal tokens: {self.total_tokens}\n"
            f"Estimated cost: {cost}"
        )


def _is_final(exc: TelegramError) -> bool:
    """Errors that another try will not fix (as opposed to the network being down or
    Telegram failing for a while): the chat blocked us (403), a message Telegram will
    not take (400; HTML it cannot parse is resent as plain text before this), or a
    message that may already be in the chat (never sent twice)."""
    return isinstance(exc, BadRequest | Forbidden | DeliveryUncertain)
