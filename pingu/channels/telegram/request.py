"""python-telegram-bot's HTTP layer on aiohttp.

PTB's own HTTPXRequest (httpx + httpcore + anyio + h11) cost about 1 ms of CPU per Bot
API call, which made the daemon CPU-bound with many chats; aiohttp's client, already
used by the gateway, does the same work for a fraction of that.

Errors are mapped the way HTTPXRequest maps them (telegram/request/_httpxrequest.py):
timeouts become `TimedOut`, other transport failures `NetworkError`, each raised `from`
the aiohttp exception, so that `api.surely_not_sent` can tell a request that never left
this process (no connection, connect or pool timeout) from one that may have reached
Telegram (read timeout, dropped connection).

PTB puts the bot token in the URL and aiohttp quotes URLs in some of its messages: every
message that leaves this module has the token replaced.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from pingu.http import EnvProxies

# The path segment PTB builds from the token: /bot<id>:<secret>/ (and /file/bot...).
_TOKEN_IN_URL = re.compile(r"bot\d+:[A-Za-z0-9_-]+")
_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def scrub(text: str) -> str:
    """`text` with any bot token in it replaced."""
    return _TOKEN_IN_URL.sub("bot***", text)


class AiohttpRequest(BaseRequest):
    """A `telegram.request.BaseRequest` on one aiohttp session.

    Timeouts follow HTTPXRequest's meaning: `connect_timeout` bounds opening a
    connection, `pool_timeout` the wait for a free one (aiohttp counts both in its
    `connect` timeout, so it gets their sum), `read_timeout` the wait for the response
    once the request is written. aiohttp has no timeout per write: `write_timeout` (or
    `media_write_timeout` for uploads) bounds the whole request together with the others,
    so a request whose body cannot be written still ends, as a TimedOut.
    """

    __slots__ = (
        "_connect_timeout",
        "_media_write_timeout",
        "_pool_size",
        "_pool_timeout",
        "_proxies",
        "_read_timeout",
        "_session",
        "_write_timeout",
    )

    def __init__(
        self,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        if connection_pool_size < 1:
            raise ValueError("connection_pool_size must be at least 1")
        self._pool_size = connection_pool_size
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        # Created in initialize(): an aiohttp session belongs to a running loop.
        self._session: aiohttp.ClientSession | None = None
        # HTTP(S)_PROXY / NO_PROXY, as httpx honours them, looked up once per origin.
        self._proxies = EnvProxies()

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._pool_size, limit_per_host=0)
            self._session = aiohttp.ClientSession(
                connector=connector,
                # Telegram's answers are JSON; the Bot API never sets cookies.
                cookie_jar=aiohttp.DummyCookieJar(),
                # Proxies from the environment come from EnvProxies, once per origin.
                trust_env=False,
            )
            self._proxies.clear()

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        has_files = request_data is not None and request_data.contains_files

        read = self._read_timeout if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = (
            self._connect_timeout if isinstance(connect_timeout, DefaultValue) else connect_timeout
        )
        pool = self._pool_timeout if isinstance(pool_timeout, DefaultValue) else pool_timeout
        if isinstance(write_timeout, DefaultValue):
            write = self._media_write_timeout if has_files else self._write_timeout
        else:
            write = write_timeout
        timeout = aiohttp.ClientTimeout(
            total=_sum(pool, connect, write, read),
            connect=_sum(pool, connect),
            sock_connect=connect,
            sock_read=read,
        )

        body: Any = None
        headers = {"User-Agent": self.USER_AGENT}
        if request_data is not None:
            if has_files:
                body = _form_data(request_data)
            else:
                body = request_data.url_encoded_parameters().encode("ascii")
                headers.update(_FORM)

        proxy, proxy_auth = await self._proxies.for_url(url)
        try:
            async with session.request(
                method,
                url,
                data=body,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
                proxy=proxy,
                proxy_auth=proxy_auth,
            ) as response:
                return response.status, await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            # No connection within the connect (+ pool) timeout: nothing was sent.
            raise TimedOut(
                "Connect or pool timeout: the request was *not* sent to Telegram."
            ) from _scrubbed(exc)
        except TimeoutError as exc:
            # A read timeout (aiohttp.SocketTimeoutError) or the whole-request bound:
            # the request may well have reached Telegram.
            raise TimedOut from _scrubbed(exc)
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {scrub(str(exc))}") from _scrubbed(
                exc
            )


def _sum(*parts: float | None) -> float | None:
    """A bound made of several waits: none if any of them is unbounded."""
    total = 0.0
    for part in parts:
        if part is None:
            return None
        total += part
    return total


def _form_data(request_data: RequestData) -> aiohttp.FormData:
    """The multipart body PTB asks for when it uploads files (what httpx builds from
    `data=` and `files=`): the parameters as text fields, then the files."""
    form = aiohttp.FormData()
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (file_name, content, mime_type) in request_data.multipart_data.items():
        form.add_field(name, content, filename=file_name, content_type=mime_type)
    return form


def _scrubbed(exc: BaseException) -> BaseException:
    """`exc` with the token removed from its arguments: it stays the cause of the error
    PTB raises, and aiohttp quotes the request URL in some messages (connect timeouts,
    failed writes)."""
    exc.args = tuple(scrub(arg) if isinstance(arg, str) else arg for arg in exc.args)
    return exc
