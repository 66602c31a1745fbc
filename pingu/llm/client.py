"""The model client: one streaming Responses API call, with retries and readable errors.

Any server that speaks the Responses API works (OpenAI, Azure, Ollama, vLLM, LM Studio):
`base_url` and `api_key` come from `[llm.<name>]`. The openai package's own retries are
off, so the ones here (429, 5xx, connection errors and timeouts; honouring `retry-after-ms`
and `retry-after`) are the only ones, and they happen only before the first event reached
the caller, so streamed text is never repeated.

The request goes through the openai client's `post` (its auth, base_url and error
classes; the bytes go through aiohttp, see `pingu.llm.transport`) with the JSON body as
built here, and the SSE stream is read by `pingu.llm.sse` into plain dicts:
`responses.create` would transform the whole input on every call and build a pydantic
model per event, which cost more than everything else a turn does (see
bench/bench_agent.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import inspect
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import structlog

from pingu.config.model import LLMConfig
from pingu.llm.sse import SSEFormatError, SSEReader
from pingu.llm.transport import AiohttpTransport, openai_http_client

log = structlog.get_logger("pingu.llm")

MAX_RETRY_AFTER_S = 60.0
# The only events a call needs; the others (created, in_progress, added, argument deltas,
# ...) are skipped without being decoded.
WANTED_EVENTS = (
    "response.output_text.delta",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
)
_STREAM_HEADERS = {"Accept": "text/event-stream"}
# After response.completed, how long the (normally empty) rest of the stream is read so the
# connection can be reused.
DRAIN_S = 1.0

# on_retry(attempt, error kind, delay in seconds): told before each retry's pause.
RetryCallback = Callable[[int, str, float], Awaitable[None] | None]


@dataclass(frozen=True)
class StreamText:
    """A piece of the answer text, as it arrives."""

    text: str


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0  # part of output_tokens
    total_tokens: int = 0

    @classmethod
    def from_api(cls, usage: Mapping[str, Any] | None) -> Usage:
        if not usage:
            return cls()
        input_details = usage.get("input_tokens_details") or {}
        output_details = usage.get("output_tokens_details") or {}
        input_tokens = int(usage.get("input_tokens") or 0)
        output_tokens = int(usage.get("output_tokens") or 0)
        return cls(
            input_tokens=input_tokens,
            cached_input_tokens=int(input_details.get("cached_tokens") or 0),
            output_tokens=output_tokens,
            reasoning_tokens=int(output_details.get("reasoning_tokens") or 0),
            total_tokens=int(usage.get("total_tokens") or input_tokens + output_tokens),
        )


@dataclass(frozen=True)
class ModelResponse:
    """The finished call. `output` holds the output items as plain dicts (API field names,
    no None values), ready to be stored and replayed as input."""

    id: str
    model: str
    status: str  # completed, incomplete
    output: list[dict[str, Any]]
    usage: Usage
    raw: dict[str, Any]  # the whole Response object as the server sent it

    @property
    def text(self) -> str:
        return "".join(
            part.get("text", "")
            for item in self.output
            if item.get("type") == "message"
            for part in item.get("content") or ()
            if part.get("type") == "output_text"
        )

    @property
    def function_calls(self) -> list[dict[str, Any]]:
        return [item for item in self.output if item.get("type") == "function_call"]


class LLMError(Exception):
    """A failed model call, described for the user (never a traceback, never the key).

    kind: auth, quota, rate_limit, model_not_found, context_too_long, unavailable, timeout,
    bad_request."""

    def __init__(
        self, kind: str, user_message: str, retryable: bool = False, status: int | None = None
    ) -> None:
        super().__init__(user_message)
        self.kind = kind
        self.user_message = user_message
        self.retryable = retryable
        self.status = status

    def __repr__(self) -> str:
        return f"LLMError({self.kind!r}, {self.user_message!r}, status={self.status})"


class _StreamBroke(Exception):
    """The stream ended or failed before response.completed."""


def _without_nulls(value: Any) -> Any:
    """The value with every None-valued key dropped, at any depth: output items are replayed
    as input, and the API rejects some explicit nulls there."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _index(event: Mapping[str, Any], fallback: int) -> int:
    index = event.get("output_index")
    return index if isinstance(index, int) else fallback


def _error_body(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The code and message of an `error` event: top-level in the Responses API, under
    "error" as some compatible servers send it."""
    nested = event.get("error")
    return nested if isinstance(nested, dict) else event


class ModelClient:
    """One per `[llm.<name>]`; safe to share between concurrent turns."""

    def __init__(
        self,
        llm: LLMConfig,
        *,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 8.0,
        transport: AiohttpTransport | None = None,
    ) -> None:
        self.llm = llm
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._secrets = [s for s in (llm.api_key,) if s]
        # A local server (Ollama, vLLM) needs no key, but the openai package insists on one.
        key = llm.api_key or ("no-key" if llm.base_url else None)
        self._client: openai.AsyncOpenAI | None = None
        if key:
            self._client = openai.AsyncOpenAI(
                api_key=key,
                base_url=llm.base_url,
                max_retries=0,  # ours are the only retries
                timeout=llm.timeout_s,
                # aiohttp underneath: httpx2's own transport (httpcore2) cost more CPU per
                # call than the rest of a turn once hundreds of streams run at once.
                http_client=openai_http_client(transport),
            )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def stream(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        input: Iterable[dict[str, Any]],  # the API's name
        tools: Iterable[dict[str, Any]] | None = None,
        on_retry: RetryCallback | None = None,
        **options: Any,
    ) -> AsyncIterator[StreamText | ModelResponse]:
        """Yield StreamText as the answer arrives, then one ModelResponse.

        `options` go into the request body as they are (e.g. reasoning, include, store):
        they must be JSON values. `on_retry(attempt, kind, delay_s)` (sync or async) is
        called before each retry's pause, attempt counting from 1; a failure inside it is
        logged, not raised. Raises LLMError."""
        if self._client is None:
            raise LLMError(
                "auth",
                f"No API key is configured for [llm.{self.llm.name}]: set api_key there or "
                "OPENAI_API_KEY.",
            )
        params: dict[str, Any] = {"model": model or self.llm.model, "input": list(input)}
        if instructions:
            params["instructions"] = instructions
        tool_list = list(tools or ())
        if tool_list:
            params["tools"] = tool_list
        params.update(options)
        params["stream"] = True

        attempt = 0
        while True:
            yielded = False
            try:
                async for event in self._one_call(params):
                    yielded = True
                    yield event
                return
            except Exception as exc:
                error, retry_after = self._map_error(exc, params["model"])
                if yielded or not error.retryable or attempt >= self.llm.max_retries:
                    log.warning(
                        "llm_call_failed",
                        llm=self.llm.name,
                        model=params["model"],
                        kind=error.kind,
                        status=error.status,
                        attempts=attempt + 1,
                        detail=self._detail(exc),
                    )
                    raise error from None
                delay = self._backoff(attempt, retry_after)
                attempt += 1
                log.info(
                    "llm_retry",
                    llm=self.llm.name,
                    model=params["model"],
                    kind=error.kind,
                    status=error.status,
                    attempt=attempt,
                    delay_s=round(delay, 3),
                )
                if on_retry is not None:
                    await self._tell_retry(on_retry, attempt, error.kind, delay)
                await asyncio.sleep(delay)

    async def _tell_retry(
        self, on_retry: RetryCallback, attempt: int, kind: str, delay: float
    ) -> None:
        # Bookkeeping must not turn a retry into a failure.
        try:
            outcome = on_retry(attempt, kind, delay)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:
            log.error("llm_on_retry_failed", llm=self.llm.name, error=self._redact(repr(exc)))

    async def _one_call(self, params: dict[str, Any]) -> AsyncIterator[StreamText | ModelResponse]:
        assert self._client is not None
        # The body goes out as we built it: `responses.create` would run the openai
        # package's transform over the whole input and tools (a cost that grows with the
        # history) and parse every event into a pydantic model. The client's `post` still
        # gives us its auth, base_url, headers and error classes.
        body = json.dumps(params, ensure_ascii=False, separators=(",", ":")).encode()
        # The bound covers this whole call, but is applied around each await, never across a
        # yield: the caller's own work between events must not be cancelled by it.
        deadline = asyncio.get_running_loop().time() + self.llm.timeout_s
        async with asyncio.timeout_at(deadline):
            response: httpx2.Response = await self._client.post(
                "/responses",
                cast_to=httpx2.Response,
                content=body,
                options={"security": {"bearer_auth": True}, "headers": _STREAM_HEADERS},
                stream=True,
            )
        reader = SSEReader(WANTED_EVENTS)
        done_items: dict[int, dict[str, Any]] = {}
        final: dict[str, Any] | None = None
        try:
            chunks = response.aiter_bytes()
            ended = False
            while final is None and not ended and not reader.done:
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await anext(chunks)
                    events = reader.feed(chunk)
                except StopAsyncIteration:
                    ended = True
                    events = reader.finish()
                except httpx2.TimeoutException as exc:
                    raise TimeoutError("the model's answer stalled") from exc
                except httpx2.TransportError as exc:
                    raise _StreamBroke(f"the stream broke off: {type(exc).__name__}") from exc
                for event in events:
                    kind = event.get("type")
                    if kind == "response.output_text.delta":
                        delta = event.get("delta")
                        if delta:
                            yield StreamText(delta)
                    elif kind == "response.output_item.done":
                        item = event.get("item")
                        if isinstance(item, dict):
                            done_items[_index(event, len(done_items))] = _without_nulls(item)
                    elif kind in ("response.completed", "response.incomplete"):
                        final = event.get("response")
                        if not isinstance(final, dict):
                            raise SSEFormatError(f"{kind} carries no response object")
                        break
                    elif kind == "response.failed":
                        raise _failed_response(event.get("response") or {})
                    elif kind == "error":
                        raise _error_event(_error_body(event))
            if final is not None and not ended:
                # Read the (empty) rest, so the connection goes back to the pool for reuse.
                drain_until = min(deadline, asyncio.get_running_loop().time() + DRAIN_S)
                with contextlib.suppress(TimeoutError, httpx2.HTTPError):
                    async with asyncio.timeout_at(drain_until):
                        async for _ in chunks:
                            pass
        finally:
            await response.aclose()
        if final is None:
            raise _StreamBroke("the stream ended before response.completed")
        yield self._assemble(final, done_items)

    @staticmethod
    def _assemble(final: dict[str, Any], done_items: dict[int, dict[str, Any]]) -> ModelResponse:
        # The completed event carries every output item; reasoning items are taken from
        # output_item.done (their encrypted_content is final there). Some compatible servers
        # send an empty output in response.completed: the done items are the answer then.
        by_id = {item.get("id"): item for item in done_items.values() if item.get("id")}
        completed = [
            _without_nulls(item) for item in final.get("output") or () if isinstance(item, dict)
        ]
        if not completed:
            output = [done_items[i] for i in sorted(done_items)]
        else:
            output = []
            for item in completed:
                done = by_id.get(item.get("id"))
                output.append(done if done and item.get("type") == "reasoning" else item)
        return ModelResponse(
            id=final.get("id") or "",
            model=final.get("model") or "",
            status=final.get("status") or "completed",
            output=output,
            usage=Usage.from_api(final.get("usage")),
            raw=final,
        )

    # ---------------------------------------------------------------- errors and retries
    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_AFTER_S)
        ceiling = min(self._backoff_cap_s, self._backoff_base_s * 2**attempt)
        return ceiling * random.uniform(0.5, 1.0)

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def _detail(self, exc: BaseException) -> str:
        """A one-line description for the log (the key redacted)."""
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            message = body.get("message") or ""
            return self._redact(f"HTTP {exc.status_code} {body.get('code') or ''} {message}")[:500]
        return self._redact(f"{type(exc).__name__}: {exc}")[:500]

    def _map_error(self, exc: BaseException, model: str) -> tuple[LLMError, float | None]:
        """The user-facing error for a failed call, and the server's retry-after if any."""
        name = f"[llm.{self.llm.name}]"
        if isinstance(exc, LLMError):
            return exc, None
        if isinstance(exc, TimeoutError | openai.APITimeoutError):
            return LLMError(
                "timeout",
                f"The model did not answer within {self.llm.timeout_s:g} s; try again, or raise "
                f"timeout_s in {name}.",
                retryable=True,
            ), None
        if isinstance(exc, openai.APIConnectionError):
            return LLMError(
                "unavailable",
                f"Could not reach the model service of {name}; check its base_url and the "
                "network, then try again.",
                retryable=True,
            ), None
        if isinstance(exc, _StreamBroke):
            return LLMError(
                "unavailable",
                "The model service broke off its answer; try again.",
                retryable=True,
            ), None
        if isinstance(exc, _StreamStatusError):
            status, code, message, retry_after = exc.status, exc.code, str(exc), None
        elif isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            body = exc.body if isinstance(exc.body, dict) else {}
            code = str(body.get("code") or body.get("type") or "")
            message = str(body.get("message") or "")
            retry_after = _retry_after(exc.response.headers)
        else:
            return LLMError(
                "unavailable",
                "The model service sent an answer Pingu could not read; try again.",
                retryable=True,
            ), None
        if status == 401:
            return LLMError(
                "auth",
                f"The model service rejected the API key of {name}; check api_key (or "
                "OPENAI_API_KEY).",
                status=status,
            ), None
        if status == 403:
            return LLMError(
                "auth",
                f"The API key of {name} is not allowed to use the model '{model}'.",
                status=status,
            ), None
        if code == "insufficient_quota" or (status == 429 and "quota" in message.lower()):
            return LLMError(
                "quota",
                f"The account behind {name} has run out of quota or credit; check its plan and "
                "billing.",
                status=status,
            ), None
        if status == 429:
            return LLMError(
                "rate_limit",
                "The model service is rate-limiting requests; try again in a moment.",
                retryable=True,
                status=status,
            ), retry_after
        if code == "model_not_found" or (status == 404 and "model" in message.lower()):
            return LLMError(
                "model_not_found",
                f"The model '{model}' does not exist or this API key cannot use it; check "
                f"model in {name}.",
                status=status,
            ), None
        if (
            code == "context_length_exceeded"
            or "context window" in message.lower()
            or ("maximum context length" in message.lower())
        ):
            return LLMError(
                "context_too_long",
                "The conversation is too long for the model's context window; start a new "
                "session or ask something shorter.",
                status=status,
            ), None
        if status in (408, 409) or status >= 500:
            return LLMError(
                "unavailable",
                f"The model service is unavailable right now (HTTP {status}); try again later.",
                retryable=True,
                status=status,
            ), retry_after
        if status == 404:
            return LLMError(
                "bad_request",
                f"The model service of {name} has no Responses API at its base_url (HTTP 404).",
                status=status,
            ), None
        reason = self._redact(message)[:300] or f"HTTP {status}"
        return LLMError(
            "bad_request", f"The model service rejected the request: {reason}", status=status
        ), None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from `retry-after-ms` or `retry-after` (seconds or an HTTP date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _failed_response(response: dict[str, Any]) -> Exception:
    error = response.get("error") or {}
    return _error_event(error)


def _error_event(error: Mapping[str, Any]) -> Exception:
    """An error delivered inside the stream, as the exception the HTTP status would give."""
    code = str(error.get("code") or "")
    message = str(error.get("message") or "")
    if code in ("rate_limit_exceeded", "insufficient_quota"):
        status = 429
    elif code in ("context_length_exceeded", "invalid_prompt"):
        status = 400
    elif code == "model_not_found":
        status = 404
    else:
        return _StreamBroke(f"{code}: {message}")
    return _StreamStatusError(status, code, message)


class _StreamStatusError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
