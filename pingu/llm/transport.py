"""An httpx2 transport that sends through aiohttp.

The openai client keeps doing what it does (auth headers, base_url, redirects, status
errors, the mapping of transport errors to APIConnectionError / APITimeoutError); only the
bytes go through aiohttp instead of httpcore2. httpcore2's pool scanned every pooled
connection, with a getpeername and a poll each, for every request: with a few hundred
concurrent streams that alone cost about 1 ms of CPU per call.

Differences from httpx2's default transport, all on purpose:
- No cap on connections by default (`max_connections=None`): concurrency is bounded by the
  turns the dispatcher runs, and a queue for a free connection would only add a wait that
  aiohttp reports like a connect timeout (a PoolTimeout is reported as ConnectTimeout).
- aiohttp has no timeout per write: a write that stalls ends on the read timeout (the
  server sends nothing meanwhile), and ModelClient's own bound covers the whole call.
- HTTP/1.1 only (so was the default transport: openai does not enable http2).
- Proxies: HTTP(S)_PROXY / NO_PROXY from the environment (pingu.http.EnvProxies);
  ALL_PROXY is not honoured. TLS: aiohttp's default verifying context (the system's CA
  store, SSL_CERT_FILE / SSL_CERT_DIR honoured by OpenSSL).

Errors become httpx2's exceptions, with a message naming the aiohttp error and never a
header (the API key travels in one): aiohttp's ClientResponseError carries the request's
headers in its request_info, so no aiohttp exception is chained to the ones raised here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2
import openai

from pingu.http import EnvProxies

_HTTP_11 = {"http_version": b"HTTP/1.1"}


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Sends httpx2 requests with one aiohttp ClientSession, created on first use on the
    running loop and closed by `aclose()` (which httpx2.AsyncClient.aclose calls)."""

    def __init__(
        self,
        *,
        max_connections: int | None = None,
        keepalive_expiry_s: float = 5.0,
        trust_env: bool = True,
    ) -> None:
        if max_connections is not None and max_connections < 1:
            raise ValueError("max_connections must be at least 1 (or None: no limit)")
        self._max_connections = max_connections
        self._keepalive_expiry_s = keepalive_expiry_s  # httpx2's default keepalive_expiry
        self._proxies = EnvProxies() if trust_env else None
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections or 0,  # 0: no limit
                limit_per_host=0,
                keepalive_timeout=self._keepalive_expiry_s,
            )
            session = self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx2.AsyncClient keeps the cookies
                auto_decompress=False,  # httpx2.Response decodes Content-Encoding itself
                trust_env=False,  # proxies come from EnvProxies, once per origin
            )
        return session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        session = self._open_session()
        url = str(request.url)
        timeout = request.extensions.get("timeout") or {}
        connect = timeout.get("connect")
        pool = timeout.get("pool")
        client_timeout = aiohttp.ClientTimeout(
            total=None,
            # aiohttp's `connect` covers the wait for a free connection and opening one.
            connect=None if connect is None or pool is None else connect + pool,
            sock_connect=connect,
            sock_read=timeout.get("read"),
        )
        headers = request.headers.multi_items()
        data: Any
        if isinstance(request.stream, httpx2.ByteStream):
            data = request.content or None
        else:
            data = _request_body(request.stream)
            # aiohttp frames a streamed body itself (chunked).
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        proxy, proxy_auth = (
            await self._proxies.for_url(url) if self._proxies is not None else (None, None)
        )
        try:
            response = await session.request(
                request.method,
                url,
                headers=headers,
                data=data,
                timeout=client_timeout,
                allow_redirects=False,  # httpx2.AsyncClient follows them (follow_redirects)
                proxy=proxy,
                proxy_auth=proxy_auth,
                server_hostname=_sni(request),
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _httpx_error(exc, request) from None
        extensions: dict[str, Any] = dict(_HTTP_11)
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode("ascii", "replace")
        return httpx2.Response(
            response.status,
            headers=response.raw_headers,
            stream=AiohttpResponseStream(response, request),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
        if self._proxies is not None:
            self._proxies.clear()


class AiohttpResponseStream(httpx2.AsyncByteStream):
    """The response body as it arrives; `aclose()` gives the connection back (or closes it
    when the body was not read to its end)."""

    __slots__ = ("_request", "_response")

    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = self._response.content
        while True:
            try:
                chunk = await content.readany()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise _httpx_error(exc, self._request) from None
            if not chunk:
                return
            yield chunk

    async def aclose(self) -> None:
        self._response.release()


async def _request_body(stream: Any) -> AsyncIterator[bytes]:
    async for chunk in stream:
        yield chunk


def _sni(request: httpx2.Request) -> str | None:
    name = request.extensions.get("sni_hostname")
    return name.decode("ascii") if isinstance(name, bytes) else name


def _httpx_error(exc: BaseException, request: httpx2.Request) -> httpx2.TransportError:
    """The httpx2 exception for an aiohttp failure, as httpcore2 would have raised it."""
    error_class: type[httpx2.TransportError]
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        error_class = httpx2.ConnectTimeout
    elif isinstance(exc, TimeoutError):  # SocketTimeoutError, ServerTimeoutError
        error_class = httpx2.ReadTimeout
    elif isinstance(exc, aiohttp.ClientProxyConnectionError | aiohttp.ClientHttpProxyError):
        error_class = httpx2.ProxyError
    elif isinstance(exc, aiohttp.ClientConnectorError):  # refused, DNS, TLS
        error_class = httpx2.ConnectError
    elif isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        error_class = httpx2.UnsupportedProtocol
    elif isinstance(
        exc,
        aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError,
    ):
        # The server broke HTTP: hung up before or during the answer, sent a malformed one.
        error_class = httpx2.RemoteProtocolError
    elif isinstance(exc, aiohttp.ClientConnectionError):  # reset, broken pipe
        error_class = httpx2.ReadError
    else:
        error_class = httpx2.TransportError
    if isinstance(exc, aiohttp.ClientResponseError):
        detail = f"{exc.status} {exc.message}"  # its str() and repr() may name the URL
    else:
        detail = str(exc)
    message = (
        f"aiohttp.{type(exc).__name__}: {detail}" if detail else f"aiohttp.{type(exc).__name__}"
    )
    return error_class(message, request=request)


def openai_http_client(transport: AiohttpTransport | None = None) -> httpx2.AsyncClient:
    """The http_client for openai.AsyncOpenAI: the openai package's own defaults
    (timeout, follow_redirects; its connection limits only apply to httpx2's transport)
    over an AiohttpTransport."""
    return openai.DefaultAsyncHttpxClient(transport=transport or AiohttpTransport())
