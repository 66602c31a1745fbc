"""A fake OpenAI Responses API on 127.0.0.1, as strict as the real one, for tests that use the
real `openai` client.

Use it through the `fake_responses` pytest fixture (registered in tests/conftest.py)::

    async def test_something(fake_responses):
        fake_responses.queue(text("Hello", chunks=3))          # the next request gets this
        fake_responses.queue(function_calls(("shell", {"command": "ls"})))
        client = AsyncOpenAI(base_url=fake_responses.url, api_key=fake_responses.api_key)
        ...
        assert fake_responses.requests[0].body["input"][0]["content"] == "hi"

For a Pingu config: `LLMConfig(base_url=fake.url, api_key=fake.api_key, max_retries=..)`.

What it serves
--------------
`POST /v1/responses` with `stream: false` (a JSON Response object) and `stream: true` (SSE with
the real event sequence: response.created, response.in_progress, then per output item
response.output_item.added, [content_part.added, output_text.delta..., output_text.done,
content_part.done | function_call_arguments.delta..., function_call_arguments.done],
response.output_item.done, and finally response.completed; every event has sequence_number).
Shapes and ids (resp_, msg_, fc_, call_, rs_) are copied from the recorded corpus. The
`output_item.added` event of a reasoning item carries a *different* encrypted_content than its
`output_item.done` (as the real API does), so a client that keeps `added` is caught.

What it rejects, with the real status, message, param and code
--------------------------------------------------------------
- a missing or wrong `Authorization: Bearer` key: 401 `invalid_api_key`, key masked;
- a body that is not JSON; an unknown top-level parameter (`Unknown parameter: 'foo'.`);
  a missing `model` or `input`;
- an input item that does not match the openai package's ResponseInputItemParam (unknown or
  null-valued keys, wrong literals, missing keys): see tests/fakes/openai_schema.py.
  `FakeResponsesAPI(allow_nulls=True)` tolerates nulls the way the real service does;
  the default rejects them (`Unknown parameter: 'input[1].status'.`), because Pingu must not
  send them;
- `function_call_output` without an earlier `function_call` of that call_id
  (`No tool call found for function call output with call_id call_x.`), a `function_call` with
  no output after it (`No tool output found for function call call_x.`), a `reasoning` item not
  followed by the item it produced (`Item 'rs_x' of type 'reasoning' was provided without its
  required following item.`); earlier items of `previous_response_id` count (the fake remembers
  every response it served; `remember()` adds others);
- a function tool with `strict: true` whose schema does not list every property in `required`
  or lacks `additionalProperties: false` (`Invalid schema for function 'f': ...`);
- a model not in `fake.models` when that set is given: 404 `model_not_found`.

Scripting replies
-----------------
`fake.queue(reply, ...)` appends to a FIFO; each request takes the next one. When the FIFO is
empty, `fake.responder(body) -> Reply` (sync or async) answers; the default replies with the
text "ok". A reply is only served to a request that passed validation (a rejected request
does not consume it). Builders (module functions, all return `Reply`):

- `text("Hello", chunks=3)` a message, streamed as 3 deltas (or `chunks=["He", "llo"]`);
- `function_calls(("name", {"arg": 1}), ("other", {...}), text=None)` parallel calls (call ids
  are generated unless given as a third tuple element);
- `reply(item, item, ...)` with `message("text")`, `function_call(name, args, call_id=None)`,
  `reasoning(encrypted_content=None, summary=())` items, e.g.
  `reply(reasoning(), function_call("shell", {"command": "ls"}))`;
- `error(status, message, code=None, type=..., param=None, retry_after=None,
  retry_after_ms=None)`; shortcuts `rate_limited(retry_after=0.1)`, `server_error()`,
  `quota_exhausted()`, `context_too_long()`, `model_not_found(model)`, `unavailable()` (503);
- `hang()` never answers (until the fake stops);
- every reply takes `usage=usage(input_tokens=.., cached=.., output_tokens=.., reasoning=..)`,
  `delay_s=` (before answering), `delta_delay_s=` (between text/argument deltas: the
  first delta comes at once, then each next one after this pause),
  `disconnect_after=n` (streaming: close the connection after n events),
  and `model=` (the model name the response reports).
  `slow(reply, delay_s=.., delta_delay_s=..)` returns a slowed copy.

Inspecting: `fake.requests` (every request, rejected ones too: `.body`, `.headers`,
`.status` that was answered), `fake.bodies` (the accepted bodies), `fake.served` (Response
objects served, in order).

Running it
----------
Tests run the fake inside the pytest process, in the test's event loop; a daemon subprocess
started by an end-to-end test reaches it over TCP while the test awaits. Standalone (for
manual runs): `python -m tests.fakes.responses_api --port 0 --key sk-test` prints the base URL
and serves the default "ok" responder until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import itertools
import json
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from aiohttp import web

from tests.fakes.openai_schema import REQUEST_PARAMS, input_item_errors

DEFAULT_KEY = "sk-test-fake-0123456789abcdef"

# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class MessageSpec:
    text: str
    chunks: tuple[str, ...]
    phase: str | None = None


@dataclass(frozen=True)
class FunctionCallSpec:
    name: str
    arguments: str  # the JSON text
    call_id: str | None = None
    chunks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReasoningSpec:
    encrypted_content: str | None = None
    summary: tuple[str, ...] = ()


ItemSpec = MessageSpec | FunctionCallSpec | ReasoningSpec


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None  # None: estimated from the request
    cached_tokens: int = 0
    output_tokens: int | None = None  # None: estimated from the output
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build it with the module's builder functions."""

    items: tuple[ItemSpec, ...] = ()
    usage: Usage = field(default_factory=Usage)
    status: int = 200
    error_body: dict[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    delta_delay_s: float = 0.0
    hang: bool = False
    disconnect_after: int | None = None  # streaming: drop the connection after n events
    model: str | None = None  # the model the response reports; None: the requested one
    response_status: str = "completed"


def _split(text: str, chunks: int | Sequence[str] | None) -> tuple[str, ...]:
    if chunks is None:
        chunks = 1
    if not isinstance(chunks, int):
        parts = tuple(chunks)
        if "".join(parts) != text:
            raise ValueError("chunks must join to the text")
        return parts
    if not text:
        return ()
    n = max(1, min(chunks, len(text)))
    size = -(-len(text) // n)
    return tuple(text[i : i + size] for i in range(0, len(text), size))


def message(text: str, *, chunks: int | Sequence[str] | None = None) -> MessageSpec:
    """An assistant message item, streamed as `chunks` deltas."""
    return MessageSpec(text=text, chunks=_split(text, chunks))


def function_call(
    name: str, arguments: dict[str, Any] | str, *, call_id: str | None = None
) -> FunctionCallSpec:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return FunctionCallSpec(name=name, arguments=args, call_id=call_id, chunks=_split(args, 3))


def reasoning(encrypted_content: str | None = None, summary: Iterable[str] = ()) -> ReasoningSpec:
    return ReasoningSpec(encrypted_content=encrypted_content, summary=tuple(summary))


def usage(
    input_tokens: int | None = None,
    cached: int = 0,
    output_tokens: int | None = None,
    reasoning: int = 0,
) -> Usage:
    return Usage(input_tokens, cached, output_tokens, reasoning)


def reply(*items: ItemSpec, **options: Any) -> Reply:
    return Reply(items=tuple(items), **options)


def text(value: str, *, chunks: int | Sequence[str] | None = None, **options: Any) -> Reply:
    return Reply(items=(message(value, chunks=chunks),), **options)


def function_calls(
    *calls: tuple[str, dict[str, Any] | str] | tuple[str, dict[str, Any] | str, str],
    text: str | None = None,
    **options: Any,
) -> Reply:
    """Parallel function calls (optionally after a message): ("name", {args}[, call_id])."""
    items: list[ItemSpec] = [message(text)] if text else []
    for call in calls:
        name, args = call[0], call[1]
        call_id = call[2] if len(call) > 2 else None  # type: ignore[misc]
        items.append(function_call(name, args, call_id=call_id))
    return Reply(items=tuple(items), **options)


def error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    type: str = "invalid_request_error",  # the API's field name
    param: str | None = None,
    retry_after: float | None = None,
    retry_after_ms: float | None = None,
    **options: Any,
) -> Reply:
    headers: list[tuple[str, str]] = []
    if retry_after is not None:
        headers.append(("retry-after", f"{retry_after:g}"))
    if retry_after_ms is not None:
        headers.append(("retry-after-ms", f"{retry_after_ms:g}"))
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return Reply(status=status, error_body=body, headers=tuple(headers), **options)


def rate_limited(retry_after: float | None = 0.1, **options: Any) -> Reply:
    return error(
        429,
        "Rate limit reached for gpt-4.1-nano in organization org-fake on tokens per min (TPM): "
        "Limit 200000, Used 199000, Requested 2000. Please try again in 300ms. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        code="rate_limit_exceeded",
        type="tokens",
        param=None,
        retry_after=retry_after,
        **options,
    )


def quota_exhausted(**options: Any) -> Reply:
    return error(
        429,
        "You exceeded your current quota, please check your plan and billing details. For more "
        "information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
        code="insufficient_quota",
        type="insufficient_quota",
        **options,
    )


def server_error(status: int = 500, **options: Any) -> Reply:
    return error(
        status,
        "The server had an error while processing your request. Sorry about that!",
        type="server_error",
        **options,
    )


def unavailable(**options: Any) -> Reply:
    return error(
        503,
        "The engine is currently overloaded, please try again later.",
        type="server_error",
        **options,
    )


def context_too_long(**options: Any) -> Reply:
    return error(
        400,
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.",
        code="context_length_exceeded",
        param="input",
        **options,
    )


def model_not_found(model: str, **options: Any) -> Reply:
    return error(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
        **options,
    )


def hang() -> Reply:
    """Accept the request and never answer."""
    return Reply(hang=True)


def slow(base: Reply, *, delay_s: float = 0.0, delta_delay_s: float = 0.0) -> Reply:
    return replace(base, delay_s=delay_s, delta_delay_s=delta_delay_s)


# --------------------------------------------------------------------------- the server


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body (None if it was not JSON)
    status: int | None = None  # what the fake answered


Responder = Callable[[dict[str, Any]], "Reply | Awaitable[Reply]"]


class RequestRejected(Exception):
    def __init__(self, status: int, message: str, *, param: str | None, code: str | None):
        super().__init__(message)
        self.status = status
        self.body = {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": param,
                "code": code,
            }
        }


def _default_responder(body: dict[str, Any]) -> Reply:
    return text("ok")


def _mask_key(key: str) -> str:
    if len(key) <= 8:
        return "*" * len(key)
    return key[:3] + "*" * (len(key) - 7) + key[-4:]


class FakeResponsesAPI:
    """See the module docstring."""

    def __init__(
        self,
        *,
        api_key: str = DEFAULT_KEY,
        models: Iterable[str] | None = None,
        allow_nulls: bool = False,
    ) -> None:
        self.api_key = api_key
        self.models: set[str] | None = set(models) if models is not None else None
        self.allow_nulls = allow_nulls
        self.responder: Responder = _default_responder
        self.requests: list[RecordedRequest] = []
        self.served: list[dict[str, Any]] = []
        self._replies: deque[Reply] = deque()
        # response id -> every item the model had seen or produced up to that response
        self._conversations: dict[str, list[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._closing = asyncio.Event()
        self._port = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self, port: int = 0) -> FakeResponsesAPI:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/responses", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeResponsesAPI:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """The base_url for the openai client."""
        return f"http://127.0.0.1:{self._port}/v1"

    # ------------------------------------------------------------------ scripting
    def queue(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet served."""
        return len(self._replies)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """Bodies of the requests that passed validation."""
        return [r.body for r in self.requests if r.status == 200]

    def remember(self, response: dict[str, Any], input_items: list[dict[str, Any]]) -> None:
        """Make a response this fake did not serve known to `previous_response_id`."""
        context = self._conversations.get(response.get("previous_response_id") or "", [])
        self._conversations[response["id"]] = [
            *context,
            *input_items,
            *response.get("output", []),
        ]

    # ------------------------------------------------------------------ request handling
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        record = RecordedRequest(request.method, request.path, dict(request.headers), body)
        self.requests.append(record)
        try:
            self._check_auth(request)
            body = self._check_body(body)
        except RequestRejected as rejected:
            status = 401 if rejected.body["error"]["code"] == "invalid_api_key" else rejected.status
            record.status = status
            return web.json_response(rejected.body, status=status, headers=self._headers())

        scripted = self._replies.popleft() if self._replies else None
        if scripted is None:
            result = self.responder(body)
            scripted = await result if inspect.isawaitable(result) else result
        assert isinstance(scripted, Reply), f"a responder must return a Reply, got {scripted!r}"
        record.status = scripted.status

        if scripted.hang:
            await self._closing.wait()
            raise web.HTTPServiceUnavailable()
        if scripted.delay_s and await self._sleep(scripted.delay_s):
            raise web.HTTPServiceUnavailable()
        if scripted.status != 200:
            return web.json_response(
                scripted.error_body,
                status=scripted.status,
                headers=self._headers(scripted.headers),
            )
        response = self._build_response(body, scripted)
        if body.get("stream"):
            return await self._stream(request, body, response, scripted)
        self._finish(body, response)
        return web.json_response(response, headers=self._headers())

    async def _sleep(self, seconds: float) -> bool:
        """Sleep unless the fake stops first; True if it stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), seconds)
        return self._closing.is_set()

    def _headers(self, extra: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
        headers = {"x-request-id": f"req_{secrets.token_hex(16)}", "openai-version": "2020-10-01"}
        headers.update(extra)
        return headers

    def _check_auth(self, request: web.Request) -> None:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            raise RequestRejected(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
                "or as the password field (with blank username) if you're accessing the API "
                "from your browser and are prompted for a username and password. You can "
                "obtain an API key from https://platform.openai.com/account/api-keys.",
                param=None,
                code="invalid_api_key",
            )
        key = auth[7:].strip()
        if key != self.api_key:
            raise RequestRejected(
                401,
                f"Incorrect API key provided: {_mask_key(key)}. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                param=None,
                code="invalid_api_key",
            )

    def _check_body(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise RequestRejected(
                400,
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                "payload, but what was sent was not valid JSON. If you have trouble figuring "
                "out how to fix this, please contact us through our help center at "
                "help.openai.com.)",
                param=None,
                code=None,
            )
        for key in body:
            if key not in REQUEST_PARAMS:
                raise RequestRejected(
                    400, f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter"
                )
        if not body.get("model"):
            raise RequestRejected(
                400,
                "Missing required parameter: 'model'.",
                param="model",
                code="missing_required_parameter",
            )
        has_context = body.get("previous_response_id") or body.get("conversation")
        if "input" not in body and not has_context:
            raise RequestRejected(
                400,
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
        items = body.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        elif not isinstance(items, list):
            raise RequestRejected(
                400,
                "Invalid type for 'input': expected one of a string or array of input items, "
                f"but got {type(items).__name__} instead.",
                param="input",
                code="invalid_type",
            )
        for index, item in enumerate(items):
            errors = input_item_errors(item, f"input[{index}]", allow_nulls=self.allow_nulls)
            if errors:
                first = errors[0]
                raise RequestRejected(400, first.message, param=first.param, code=first.code)
        self._check_ranges(body)
        self._check_tools(body.get("tools"))
        context: list[dict[str, Any]] = []
        previous = body.get("previous_response_id")
        if previous:
            if previous not in self._conversations:
                raise RequestRejected(
                    400,
                    f"Previous response with id '{previous}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            context = self._conversations[previous]
        if not body.get("conversation"):
            self._check_pairing(context, items)
        if self.models is not None and body["model"] not in self.models:
            raise RequestRejected(
                404,
                f"The model `{body['model']}` does not exist or you do not have access to it.",
                param=None,
                code="model_not_found",
            )
        return body

    def _check_ranges(self, body: dict[str, Any]) -> None:
        for name, low, high in (("temperature", 0, 2), ("top_p", 0, 1)):
            value = body.get(name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if value < low:
                raise RequestRejected(
                    400,
                    f"Invalid '{name}': decimal below minimum value. Expected a value >= {low}, "
                    f"but got {value:g} instead.",
                    param=name,
                    code="decimal_below_min_value",
                )
            if value > high:
                raise RequestRejected(
                    400,
                    f"Invalid '{name}': decimal above maximum value. Expected a value <= {high}, "
                    f"but got {value:g} instead.",
                    param=name,
                    code="decimal_above_max_value",
                )

    def _check_tools(self, tools: Any) -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            raise RequestRejected(
                400,
                "Invalid type for 'tools': expected an array of tools, but got an object instead.",
                param="tools",
                code="invalid_type",
            )
        for index, tool in enumerate(tools):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                continue
            if not tool.get("name"):
                raise RequestRejected(
                    400,
                    f"Missing required parameter: 'tools[{index}].name'.",
                    param=f"tools[{index}].name",
                    code="missing_required_parameter",
                )
            if tool.get("strict") is True:
                problem = _strict_schema_problem(tool.get("parameters") or {}, ())
                if problem:
                    raise RequestRejected(
                        400,
                        f"Invalid schema for function '{tool['name']}': {problem}",
                        param=f"tools[{index}].parameters",
                        code="invalid_function_parameters",
                    )

    def _check_pairing(self, context: list[dict[str, Any]], items: list[dict[str, Any]]) -> None:
        everything = [*context, *items]
        offset = len(context)
        for index, item in enumerate(everything):
            kind = item.get("type")
            if kind == "function_call_output":
                earlier = everything[:index]
                if not any(
                    e.get("type") == "function_call" and e.get("call_id") == item["call_id"]
                    for e in earlier
                ):
                    raise RequestRejected(
                        400,
                        "No tool call found for function call output with call_id "
                        f"{item['call_id']}.",
                        param="input",
                        code=None,
                    )
            elif kind == "function_call" and index >= offset:
                later = everything[index + 1 :]
                if not any(
                    e.get("type") == "function_call_output" and e.get("call_id") == item["call_id"]
                    for e in later
                ):
                    raise RequestRejected(
                        400,
                        f"No tool output found for function call {item['call_id']}.",
                        param="input",
                        code=None,
                    )
            elif kind == "reasoning" and index >= offset:
                follower = _reasoning_follower(everything, index)
                if follower is None:
                    raise RequestRejected(
                        400,
                        f"Item '{item.get('id')}' of type 'reasoning' was provided without its "
                        "required following item.",
                        param="input",
                        code=None,
                    )

    # ------------------------------------------------------------------ building replies
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}{secrets.token_hex(22)}"

    def _build_response(self, body: dict[str, Any], scripted: Reply) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        for spec in scripted.items:
            if isinstance(spec, MessageSpec):
                output.append(
                    {
                        "id": self._new_id("msg"),
                        "type": "message",
                        "status": "completed",
                        "content": [
                            {
                                "type": "output_text",
                                "annotations": [],
                                "logprobs": [],
                                "text": spec.text,
                            }
                        ],
                        "role": "assistant",
                    }
                )
            elif isinstance(spec, FunctionCallSpec):
                output.append(
                    {
                        "id": self._new_id("fc"),
                        "type": "function_call",
                        "status": "completed",
                        "arguments": spec.arguments,
                        "call_id": spec.call_id or f"call_{secrets.token_urlsafe(18)}",
                        "name": spec.name,
                    }
                )
            else:
                item: dict[str, Any] = {
                    "id": self._new_id("rs"),
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": s} for s in spec.summary],
                }
                if "reasoning.encrypted_content" in (body.get("include") or []):
                    item["encrypted_content"] = spec.encrypted_content or (
                        "gAAAAAB" + secrets.token_urlsafe(96)
                    )
                output.append(item)
        u = scripted.usage
        input_tokens = u.input_tokens
        if input_tokens is None:
            input_tokens = max(1, len(json.dumps(body.get("input", ""))) // 4)
        output_tokens = u.output_tokens
        if output_tokens is None:
            produced = sum(
                len(s.text if isinstance(s, MessageSpec) else getattr(s, "arguments", ""))
                for s in scripted.items
            )
            output_tokens = max(1, produced // 4) + u.reasoning_tokens
        now = int(time.time())
        tools = []
        for tool in body.get("tools") or []:
            echoed = dict(tool)
            if echoed.get("type") == "function":
                echoed.setdefault("strict", True)
                echoed.setdefault("description", None)
            tools.append(echoed)
        return {
            "id": self._new_id("resp"),
            "object": "response",
            "created_at": now,
            "status": scripted.response_status,
            "background": False,
            "completed_at": now,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": scripted.model or body["model"],
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": None,
            "reasoning": {"effort": None, "summary": None, **(body.get("reasoning") or {})},
            "safety_identifier": None,
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": tools,
            "top_logprobs": 0,
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_tokens},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
                "total_tokens": input_tokens + output_tokens,
            },
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    def _finish(self, body: dict[str, Any], response: dict[str, Any]) -> None:
        self.served.append(response)
        items = body.get("input", [])
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        context = self._conversations.get(body.get("previous_response_id") or "", [])
        self._conversations[response["id"]] = [*context, *items, *response["output"]]

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        response: dict[str, Any],
        scripted: Reply,
    ) -> web.StreamResponse:
        stream = web.StreamResponse(
            status=200,
            headers=self._headers(
                [
                    ("Content-Type", "text/event-stream; charset=utf-8"),
                    ("Cache-Control", "no-cache"),
                ]
            ),
        )
        await stream.prepare(request)
        sent_delta = False
        for count, event in enumerate(_events(response, scripted)):
            if scripted.disconnect_after is not None and count >= scripted.disconnect_after:
                # an abrupt end: the client sees the stream break without response.completed
                if request.transport is not None:
                    request.transport.close()
                return stream
            is_delta = event["type"].endswith(".delta")
            pause = scripted.delta_delay_s if is_delta and sent_delta else 0.0
            if pause and await self._sleep(pause):
                return stream
            sent_delta = sent_delta or is_delta
            data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
            await stream.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
        self._finish(body, response)
        await stream.write_eof()
        return stream


def _reasoning_follower(items: list[dict[str, Any]], index: int) -> dict[str, Any] | None:
    """The item a reasoning item produced: the next model output item (a message the model
    wrote, with its id, or a tool call), skipping further reasoning items."""
    for follower in items[index + 1 :]:
        kind = follower.get("type")
        if kind == "reasoning":
            continue
        if kind == "message" or (kind is None and "role" in follower):
            if follower.get("role") == "assistant" and follower.get("id"):
                return follower
            return None
        if kind and kind.endswith("_output"):
            return None
        if kind in (None, "item_reference", "compaction_trigger", "additional_tools"):
            return None
        return follower
    return None


def _strict_schema_problem(schema: Any, context: tuple[str, ...]) -> str | None:
    """The real API's complaint about a strict function schema, or None if it is fine."""
    if not isinstance(schema, dict):
        return None
    ctx = f"In context={context!r}, "
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return f"{ctx}'additionalProperties' is required to be supplied and to be false."
        required = schema.get("required")
        missing = [k for k in properties if not isinstance(required, list) or k not in required]
        if missing:
            return (
                f"{ctx}'required' is required to be supplied and to be an array including "
                f"every key in properties. Missing '{missing[0]}'."
            )
        for key, sub in properties.items():
            problem = _strict_schema_problem(sub, (*context, "properties", key))
            if problem:
                return problem
    if isinstance(schema.get("items"), dict):
        problem = _strict_schema_problem(schema["items"], (*context, "items"))
        if problem:
            return problem
    for combinator in ("anyOf", "allOf"):
        for i, sub in enumerate(schema.get(combinator) or []):
            problem = _strict_schema_problem(sub, (*context, combinator, str(i)))
            if problem:
                return problem
    for defs in ("$defs", "definitions"):
        for name, sub in (schema.get(defs) or {}).items():
            problem = _strict_schema_problem(sub, (*context, defs, name))
            if problem:
                return problem
    return None


def _events(response: dict[str, Any], scripted: Reply) -> list[dict[str, Any]]:
    """The SSE events of a streamed response, in the real API's order and shapes."""
    events: list[dict[str, Any]] = []
    shell = {**response, "status": "in_progress", "completed_at": None, "output": [], "usage": None}
    events.append({"type": "response.created", "response": shell})
    events.append({"type": "response.in_progress", "response": shell})
    for index, (item, spec) in enumerate(zip(response["output"], scripted.items, strict=True)):
        item_id = item["id"]
        if item["type"] == "message":
            assert isinstance(spec, MessageSpec)
            added = {**item, "status": "in_progress", "content": []}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            empty_part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            events.append(
                {
                    "type": "response.content_part.added",
                    "content_index": 0,
                    "item_id": item_id,
                    "output_index": index,
                    "part": empty_part,
                }
            )
            for chunk in spec.chunks:
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "content_index": 0,
                        "delta": chunk,
                        "item_id": item_id,
                        "logprobs": [],
                        "obfuscation": secrets.token_urlsafe(6),
                        "output_index": index,
                    }
                )
            events.append(
                {
                    "type": "response.output_text.done",
                    "content_index": 0,
                    "item_id": item_id,
                    "logprobs": [],
                    "output_index": index,
                    "text": spec.text,
                }
            )
            events.append(
                {
                    "type": "response.content_part.done",
                    "content_index": 0,
                    "item_id": item_id,
                    "output_index": index,
                    "part": item["content"][0],
                }
            )
        elif item["type"] == "function_call":
            assert isinstance(spec, FunctionCallSpec)
            added = {**item, "status": "in_progress", "arguments": ""}
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            for chunk in spec.chunks:
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "delta": chunk,
                        "item_id": item_id,
                        "obfuscation": secrets.token_urlsafe(6),
                        "output_index": index,
                    }
                )
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "arguments": item["arguments"],
                    "item_id": item_id,
                    "output_index": index,
                }
            )
        else:
            # the real API's `added` carries a different encrypted_content than `done`
            added = {**item, "summary": []}
            if "encrypted_content" in item:
                added["encrypted_content"] = "gAAAAAB" + secrets.token_urlsafe(64)
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


# --------------------------------------------------------------------------- pytest fixture


@pytest.fixture
async def fake_responses() -> AsyncIterator[FakeResponsesAPI]:
    """A started fake Responses API (function scope); stopped after the test."""
    fake = FakeResponsesAPI()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.close()


# --------------------------------------------------------------------------- standalone


async def _serve(port: int, key: str) -> None:
    fake = FakeResponsesAPI(api_key=key)
    await fake.start(port)
    print(fake.url, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await fake.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake OpenAI Responses API on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key", default=DEFAULT_KEY)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.key))


if __name__ == "__main__":
    main()
