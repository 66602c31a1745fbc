"""python-telegram-bot's `Bot`, used as a plain client: our own polling, sending with the
retries Telegram asks for (flood control), and the plain-text fallback for HTML that
Telegram refuses.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import warnings
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog
from telegram import Bot
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError, TimedOut

from pingu.channels.telegram.render import render_html
from pingu.channels.telegram.request import AiohttpRequest

log = structlog.get_logger("pingu.channels.telegram")

# Flood control is waited out; this bounds how often one message is retried.
MAX_SEND_ATTEMPTS = 8
# A retry_after longer than this is not waited for inside a turn (Telegram has banned us
# for a long time; better to give up on this message than hang every turn).
MAX_RETRY_AFTER_S = 600.0
_NO_PREVIEW_JSON = {"is_disabled": True}
# aiohttp failures that happen before a single byte of the request left this process
# (no connection: refused, DNS, TLS handshake; no connection within the connect or pool
# timeout): Telegram surely never saw it, so sending again cannot duplicate anything.
# Any other transport failure (a read timeout, a dropped connection, a write cut short)
# may come after Telegram acted on the request.
_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: `first_s`, doubling, at most `cap_s`."""

    first_s: float = 1.0
    cap_s: float = 10.0

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt number `attempt` (1-based)."""
        return min(self.first_s * 2 ** max(attempt - 1, 0), self.cap_s)


class DeliveryUncertain(TelegramError):
    """A sendMessage failed in a way that does not tell whether Telegram delivered it.
    It is not sent again: a possibly missing message is better than an answer twice."""


def surely_not_sent(exc: BaseException) -> bool:
    """True when a PTB TimedOut/NetworkError wraps a failure before the request left us
    (AiohttpRequest raises them `from` the aiohttp exception, as PTB's HTTPXRequest does
    from httpx's).

    Anything else is not sure. In particular an HTTP error response that PTB turns into a
    NetworkError (a 5xx such as 502 Bad Gateway, whatever its body: JSON, with no cause,
    or HTML, caused by the failed parse): a gateway in front of the Bot API may answer so
    after the backend delivered the message. The answers that do say "not done" are not
    NetworkErrors and never get here: 429 (RetryAfter: flood control refused it, waited
    out and retried), 400/403 (BadRequest/Forbidden: refused for good)."""
    return isinstance(exc.__cause__, _NOT_SENT)


class PollingBot(Bot):
    """A `Bot` that also returns updates as raw JSON, so that one malformed update cannot
    make the whole batch unreadable (Bot.get_updates parses them all or raises)."""

    async def get_raw_updates(
        self, offset: int | None, timeout_s: int, allowed_updates: list[str]
    ) -> list[Any]:
        data = {"offset": offset, "timeout": timeout_s, "allowed_updates": allowed_updates}
        result = await self._post(
            "getUpdates",
            data,
            # The server holds the request open for up to timeout_s.
            read_timeout=timeout_s + 10.0,
        )
        return result if isinstance(result, list) else []


def build_bot(
    token: str, api_base_url: str, poll_timeout_s: int, *, read_timeout_s: float = 30.0
) -> PollingBot:
    base = api_base_url.rstrip("/")
    return PollingBot(
        token,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        # Many chats answer at once: a roomy pool, and a wait for a free connection
        # rather than an error.
        request=AiohttpRequest(
            connection_pool_size=8,
            read_timeout=read_timeout_s,
            write_timeout=30.0,
            connect_timeout=10.0,
            pool_timeout=30.0,
        ),
        # The long poll on its own connection, so that it never waits behind replies.
        get_updates_request=AiohttpRequest(
            connection_pool_size=1,
            read_timeout=poll_timeout_s + 10.0,
            connect_timeout=10.0,
        ),
    )


def retry_after_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB warns about the int -> timedelta migration
        warnings.simplefilter("ignore")
        value = exc.retry_after
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


def is_parse_error(exc: BaseException) -> bool:
    return isinstance(exc, BadRequest) and "can't parse entities" in exc.message.lower()


def is_not_modified(exc: BaseException) -> bool:
    return isinstance(exc, BadRequest) and "message is not modified" in exc.message.lower()


def redact(text: str, token: str) -> str:
    """PTB puts the token in URLs; error texts may carry it."""
    if token:
        text = text.replace(token, "***")
        secret = token.partition(":")[2]
        if secret:
            text = text.replace(secret, "***")
    return text


class TelegramSender:
    """Sends and edits messages. Every method takes a Markdown chunk (already short enough)
    and sends it as HTML, falling back to the same text as plain text."""

    def __init__(self, bot: Bot, token: str, *, retry: RetryPolicy | None = None) -> None:
        self.bot = bot
        self._token = token
        self._retry = retry or RetryPolicy()

    async def send(
        self,
        chat_id: int,
        markdown: str,
        *,
        thread_id: int | None = None,
        reply_to: int | None = None,
    ) -> int:
        """Send one chunk; returns its message_id. Waits out flood control; raises
        TelegramError when the message cannot be delivered."""
        # Raw calls (Bot._post) rather than Bot.send_message: we need only the new
        # message's id, and building PTB's Message object from every answer was a large
        # part of the daemon's CPU per turn.
        params: dict[str, Any] = {"chat_id": chat_id, "link_preview_options": _NO_PREVIEW_JSON}
        if thread_id is not None:
            params["message_thread_id"] = thread_id
        if reply_to is not None:
            params["reply_parameters"] = {
                "message_id": reply_to,
                "allow_sending_without_reply": True,
            }

        async def html() -> Any:
            return await self.bot._post(
                "sendMessage", {**params, "text": render_html(markdown), "parse_mode": "HTML"}
            )

        async def plain() -> Any:
            return await self.bot._post("sendMessage", {**params, "text": markdown})

        message = await self._deliver(html, plain, what="sendMessage", idempotent=False)
        return int(message["message_id"])

    async def edit(
        self, chat_id: int, message_id: int, markdown: str, *, wait_out_flood: bool = True
    ) -> bool:
        """Replace a message's text. True when the message now shows this text. With
        `wait_out_flood` False (progressive edits) a 429 gives up at once."""

        params: dict[str, Any] = {
            "chat_id": chat_id,
            "message_id": message_id,
            "link_preview_options": _NO_PREVIEW_JSON,
        }

        async def html() -> Any:
            return await self.bot._post(
                "editMessageText",
                {**params, "text": render_html(markdown), "parse_mode": "HTML"},
            )

        async def plain() -> Any:
            return await self.bot._post("editMessageText", {**params, "text": markdown})

        try:
            await self._deliver(html, plain, what="editMessageText", wait_out_flood=wait_out_flood)
        except TelegramError as exc:
            if is_not_modified(exc):
                return True  # it already shows exactly this
            if wait_out_flood:
                raise
            return False
        return True

    async def typing(self, chat_id: int, thread_id: int | None) -> None:
        """Best effort: a typing indicator that fails is not worth a retry."""
        params: dict[str, Any] = {"chat_id": chat_id, "action": "typing"}
        if thread_id is not None:
            params["message_thread_id"] = thread_id
        try:
            await self.bot._post("sendChatAction", params)
        except TelegramError as exc:
            log.debug("telegram.typing_failed", chat_id=chat_id, error=self.describe(exc))

    def describe(self, exc: BaseException) -> str:
        return redact(f"{type(exc).__name__}: {exc}", self._token)

    async def _deliver(
        self,
        html: Any,
        plain: Any,
        *,
        what: str,
        wait_out_flood: bool = True,
        idempotent: bool = True,
    ) -> Any:
        send = html
        for attempt in range(1, MAX_SEND_ATTEMPTS + 1):
            try:
                return await send()
            except RetryAfter as exc:
                seconds = retry_after_seconds(exc)
                if not wait_out_flood or seconds > MAX_RETRY_AFTER_S:
                    raise
                log.info("telegram.flood_wait", method=what, retry_after_s=seconds)
                await asyncio.sleep(seconds)
            except BadRequest as exc:
                if send is html and is_parse_error(exc):
                    log.info("telegram.plain_fallback", method=what, error=exc.message)
                    send = plain
                    continue
                raise
            except (TimedOut, NetworkError) as exc:
                if not idempotent and not surely_not_sent(exc):
                    # A read timeout or a dropped connection may come after Telegram
                    # delivered the message: sending it again could show the answer
                    # twice, so the caller is told and decides (it never resends).
                    log.warning(
                        "telegram.delivery_uncertain", method=what, error=self.describe(exc)
                    )
                    raise DeliveryUncertain(self.describe(exc)) from None
                # The request never reached Telegram (or an edit, which is idempotent).
                if attempt == MAX_SEND_ATTEMPTS:
                    raise
                log.warning("telegram.send_retry", method=what, error=self.describe(exc))
                await asyncio.sleep(self._retry.delay(attempt))
        return await send()
