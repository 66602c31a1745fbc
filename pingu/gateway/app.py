"""The HTTP gateway: an aiohttp application over the dispatcher and the store.

Routes (described for clients in `pingu.gateway.openapi`):

    GET    /healthz                  no auth; 503 until the daemon is ready
    GET    /openapi.json             no auth
    POST   /v1/chat                  run a turn, stream its events as SSE
    GET    /v1/sessions              list sessions (limit/offset)
    GET    /v1/sessions/{id}         one session and its turns
    DELETE /v1/sessions/{id}/run     cancel the session's running turn

`/v1/*` needs `Authorization: Bearer <token>` when `[gateway] token` is set. Every error
is JSON: `{"error": {"code": "...", "message": "..."}}`.

A chat turn goes through the dispatcher like a Telegram message, so turns of one
session are ordered whatever channel they come from. The HTTP request only watches the
turn: if the client goes away, the turn runs to the end and is saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

import structlog
from aiohttp import web

from pingu.agent.events import AgentEvent, TurnDone, TurnError
from pingu.agent.turn import CANCELLED, FAILED, TurnRequest, TurnResult
from pingu.config.model import Config
from pingu.dispatcher import Dispatcher, DispatcherClosed
from pingu.gateway import sse
from pingu.gateway.openapi import openapi_document

log = structlog.get_logger("pingu.gateway")

HTTP_CHANNEL = "http"
MAX_SESSION_ID_LENGTH = 200
MAX_PAGE_SIZE = 200
DEFAULT_PAGE_SIZE = 50
# Far beyond any real list of sessions, far below SQLite's 64-bit integers (an offset
# near 2**63 overflowed into a 500).
MAX_OFFSET = 1_000_000_000
KEEPALIVE_INTERVAL_S = 15.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class GatewayStatus(Protocol):
    """What the daemon tells the gateway about itself."""

    @property
    def phase(self) -> str:
        """starting, ready or stopping."""
        ...

    async def health(self) -> dict[str, Any]:
        """`{"database": {...}, "channels": {name: {...}}}` for /healthz."""
        ...


class AgentResolver(Protocol):
    def resolve_agent(self, name: str | None) -> Any: ...


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    return web.json_response(
        {"error": {"code": code, "message": message}}, status=status, headers=headers
    )


# aiohttp's own errors (no route, wrong method, body too large) -> our JSON shape.
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


@web.middleware
async def _errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow",)}
        code = _HTTP_CODES.get(exc.status, "http_error")
        message = exc.reason if exc.status != 413 else "request body too large"
        return error_response(exc.status, code, message, headers)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("http_handler_failed", method=request.method, path=request.path)
        return error_response(500, "internal_error", "internal server error")


def _auth_middleware(token: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
    expected = token.encode() if token else None

    @web.middleware
    async def check_bearer(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is not None and (request.path == "/v1" or request.path.startswith("/v1/")):
            scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
            # compare_digest: the time taken does not tell how much of the token matched.
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                credential.strip().encode(), expected
            )
            if not ok:
                raise ApiError(
                    401,
                    "unauthorized",
                    "missing or invalid bearer token",
                    {"WWW-Authenticate": 'Bearer realm="pingu"'},
                )
        return await handler(request)

    return check_bearer


def create_app(
    *,
    config: Config,
    dispatcher: Dispatcher,
    runtime: AgentResolver,
    db: Any,
    status: GatewayStatus,
) -> web.Application:
    """The gateway application. `db` is the open `pingu.store.Database`."""
    gateway = _Gateway(config, dispatcher, runtime, db, status)
    app = web.Application(
        client_max_size=config.gateway.max_body_bytes,
        middlewares=[_errors_middleware, _auth_middleware(config.gateway.token)],
    )
    app.router.add_get("/healthz", gateway.healthz, allow_head=True)
    app.router.add_get("/openapi.json", gateway.openapi)
    app.router.add_post("/v1/chat", gateway.chat)
    app.router.add_get("/v1/sessions", gateway.list_sessions)
    app.router.add_get("/v1/sessions/{session_id}", gateway.get_session)
    app.router.add_delete("/v1/sessions/{session_id}/run", gateway.cancel_run)
    return app


class _Gateway:
    def __init__(
        self,
        config: Config,
        dispatcher: Dispatcher,
        runtime: AgentResolver,
        db: Any,
        status: GatewayStatus,
    ) -> None:
        self._config = config
        self._dispatcher = dispatcher
        self._runtime = runtime
        self._db = db
        self._status = status
        # Streams whose client went away: their turns keep running, nobody reads.
        self._watchers: set[asyncio.Future[TurnResult]] = set()

    # -- unauthenticated ---------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        phase = self._status.phase
        if phase != "ready":
            return web.json_response({"status": phase}, status=503)
        health = await self._status.health()
        # Still 200: the daemon runs and serves; "degraded" says a part of it (a channel
        # that cannot reach its service, the database) is not working right now.
        parts = [health.get("database", {}), *health.get("channels", {}).values()]
        healthy = all(not isinstance(p, dict) or p.get("ok", True) for p in parts)
        return web.json_response({"status": "ok" if healthy else "degraded", **health})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document())

    # -- /v1/chat ----------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await _read_json_object(request, self._config.gateway.max_body_bytes)
        session_id = _session_id(body.get("session_id"), "session_id")
        message = body.get("message")
        if not isinstance(message, str) or not message.strip():
            raise ApiError(400, "invalid_request", "'message' must be a non-empty string")
        _check_unicode(message, "message")
        unknown = sorted(set(body) - {"session_id", "message", "agent"})
        if unknown:
            raise ApiError(400, "invalid_request", f"unknown field(s): {', '.join(unknown)}")
        agent = body.get("agent")
        if agent is not None:
            if not isinstance(agent, str) or not agent:
                raise ApiError(400, "invalid_request", "'agent' must be a non-empty string")
            _check_unicode(agent, "agent")
            try:
                self._runtime.resolve_agent(agent)
            except LookupError as exc:
                raise ApiError(404, "unknown_agent", str(exc)) from None
        if self._status.phase != "ready":
            raise ApiError(503, "unavailable", f"the daemon is {self._status.phase}")

        queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()

        async def sink(event: AgentEvent) -> None:
            queue.put_nowait(event)

        turn_request = TurnRequest(
            session_id=session_id, user_message=message, channel=HTTP_CHANNEL, agent=agent
        )
        try:
            future = await self._dispatcher.submit(turn_request, sink)
        except DispatcherClosed:
            raise ApiError(503, "unavailable", "the daemon is shutting down") from None
        future.add_done_callback(lambda _: queue.put_nowait(None))
        self._watchers.add(future)
        future.add_done_callback(self._forget)
        log.info("http_chat", session=session_id, agent=agent)

        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            }
        )
        try:
            await response.prepare(request)
            await self._stream(response, queue, future)
        except (ConnectionResetError, ConnectionError):
            # The client left; the turn goes on and is saved. Deliberately no cancel.
            log.info("http_chat_client_gone", session=session_id)
            return response
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        queue: asyncio.Queue[AgentEvent | None],
        future: asyncio.Future[TurnResult],
    ) -> None:
        done_sent = False
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), KEEPALIVE_INTERVAL_S)
            except TimeoutError:
                await response.write(sse.KEEPALIVE)
                continue
            if event is None:  # the turn's future settled: nothing more will come
                break
            if isinstance(event, TurnDone):
                done_sent = True
            await response.write(sse.encode_event(event))
        if not done_sent:
            for event in _closing_events(future):
                await response.write(sse.encode_event(event))

    def _forget(self, future: asyncio.Future[TurnResult]) -> None:
        self._watchers.discard(future)
        # Retrieve the outcome so an unwatched failure is not reported as unretrieved.
        if not future.cancelled():
            future.exception()

    # -- sessions ----------------------------------------------------------------------

    async def list_sessions(self, request: web.Request) -> web.Response:
        limit = _int_query(request, "limit", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
        offset = _int_query(request, "offset", 0, 0, MAX_OFFSET)
        # One extra row tells whether there is a next page.
        rows = await self._db.history.list_sessions(limit=offset + limit + 1)
        page = [_session_json(s) for s in rows[offset : offset + limit]]
        for item in page:
            item["running"] = self._dispatcher.is_running(str(item.get("id")))
        return web.json_response(
            {
                "sessions": page,
                "limit": limit,
                "offset": offset,
                "has_more": len(rows) > offset + limit,
            },
            dumps=_dumps,
        )

    async def get_session(self, request: web.Request) -> web.Response:
        session_id = _session_id(request.match_info["session_id"], "session id")
        session = await self._db.history.get_session(session_id)
        if session is None:
            raise ApiError(404, "unknown_session", f"no session {session_id!r}")
        turns = [_turn_json(t) for t in await self._db.history.list_turns(session_id)]
        result = _session_json(session)
        result["running"] = self._dispatcher.is_running(session_id)
        result["turns"] = turns
        return web.json_response(result, dumps=_dumps)

    async def cancel_run(self, request: web.Request) -> web.Response:
        session_id = _session_id(request.match_info["session_id"], "session id")
        queued = request.query.get("queued", "").lower() in ("1", "true", "yes")
        if self._dispatcher.cancel(session_id, queued=queued):
            log.info("http_cancel", session=session_id)
            return web.json_response({"cancelled": True})
        if await self._db.history.get_session(session_id) is None:
            raise ApiError(404, "unknown_session", f"no session {session_id!r}")
        return web.json_response({"cancelled": False})


def _closing_events(future: asyncio.Future[TurnResult]) -> list[AgentEvent]:
    """The final events of a stream whose turn ended without sending `done` itself."""
    if future.cancelled():
        return [TurnDone(text="", status=CANCELLED, turn_id=None)]
    error = future.exception()
    if error is not None:
        message = "the turn failed unexpectedly"
        return [TurnError(message), TurnDone(text=message, status=FAILED, turn_id=None)]
    result = future.result()
    return [
        TurnDone(text=result.text, status=result.status, turn_id=result.turn_id, usage=result.usage)
    ]


async def _read_json_object(request: web.Request, limit: int) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, "body_too_large", f"request body over {limit} bytes")
    raw = await request.read()  # raises 413 past client_max_size without Content-Length
    if not raw:
        raise ApiError(400, "invalid_json", "request body is empty; expected a JSON object")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "request body must be a JSON object")
    return body


def _session_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ApiError(400, "invalid_request", f"'{what}' must be a non-empty string")
    if len(value) > MAX_SESSION_ID_LENGTH:
        raise ApiError(
            400, "invalid_request", f"'{what}' is longer than {MAX_SESSION_ID_LENGTH} characters"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ApiError(400, "invalid_request", f"'{what}' contains control characters")
    _check_unicode(value, what)
    return value


def _check_unicode(value: str, what: str) -> None:
    """JSON can carry lone surrogates ("\\ud800"), which no UTF-8 text (the database,
    Telegram, the model) can hold: refused here rather than failing inside the turn."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(
            400, "invalid_request", f"'{what}' contains invalid Unicode (a lone surrogate)"
        ) from None


def _int_query(request: web.Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "invalid_request", f"'{name}' must be an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ApiError(400, "invalid_request", f"'{name}' must be {bound}")
    return value


def _plain(value: Any) -> dict[str, Any]:
    """A row from the store (dataclass, mapping or sqlite Row) as a dict."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return dict(value)
    if hasattr(value, "keys"):
        return {key: value[key] for key in value.keys()}  # noqa: SIM118 - sqlite3.Row
    return dict(vars(value))


def _session_json(session: Any) -> dict[str, Any]:
    return _plain(session)


# Turn fields a client sees; the raw output items stay internal.
_TURN_FIELDS = ("id", "user_message", "status", "error", "agent", "model", "created_at")


def _turn_json(turn: Any) -> dict[str, Any]:
    raw = _plain(turn)
    result = {key: raw[key] for key in _TURN_FIELDS if key in raw}
    reply = getattr(turn, "reply_text", None)
    result["final_text"] = reply if isinstance(reply, str) else _final_text(raw.get("items") or [])
    return result


def _final_text(items: Any) -> str:
    """The text of the last assistant message among a turn's output items."""
    if isinstance(items, str):
        try:
            items = json.loads(items)
        except ValueError:
            return ""
    for item in reversed(list(items)):
        if isinstance(item, dict) and item.get("type") == "message":
            parts = item.get("content") or []
            return "".join(
                p.get("text", "")
                for p in parts
                if isinstance(p, dict) and p.get("type") == "output_text"
            )
    return ""


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default, ensure_ascii=False)
