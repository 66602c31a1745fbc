"""ModelClient against the fake Responses API, through the real openai package."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from pingu.config.model import LLMConfig
from pingu.llm import LLMError, ModelClient, ModelResponse, StreamText, Usage
from tests.fakes.openai_schema import check_input_item
from tests.fakes.responses_api import (
    FakeResponsesAPI,
    context_too_long,
    error,
    function_call,
    function_calls,
    hang,
    message,
    quota_exhausted,
    rate_limited,
    reasoning,
    reply,
    server_error,
    slow,
    text,
    unavailable,
    usage,
)

USER = [{"role": "user", "content": "Hello?"}]


def _client(fake: FakeResponsesAPI, **overrides: Any) -> ModelClient:
    settings = {"base_url": fake.url, "api_key": fake.api_key, "max_retries": 3, "timeout_s": 10}
    settings.update(overrides)
    # a huge backoff: a test passes quickly only if the server's retry-after was honoured
    backoff = overrides.pop("backoff_base_s", 0.01)
    settings.pop("backoff_base_s", None)
    return ModelClient(LLMConfig(**settings), backoff_base_s=backoff)


async def _collect(client: ModelClient, **kwargs: Any) -> list[StreamText | ModelResponse]:
    events: list[StreamText | ModelResponse] = []
    async with asyncio.timeout(20):
        async for event in client.stream(**{"input": USER, **kwargs}):
            events.append(event)
    return events


async def _failure(client: ModelClient, **kwargs: Any) -> tuple[LLMError, list[str]]:
    """The LLMError a call ends with, and the texts streamed before it."""
    texts: list[str] = []
    with pytest.raises(LLMError) as caught:
        async with asyncio.timeout(20):
            async for event in client.stream(**{"input": USER, **kwargs}):
                if isinstance(event, StreamText):
                    texts.append(event.text)
    return caught.value, texts


async def test_text_streams_in_order_then_the_final_response(
    fake_responses: FakeResponsesAPI,
) -> None:
    fake_responses.queue(
        text(
            "Hello, world!",
            chunks=["Hel", "lo, ", "world", "!"],
            usage=usage(input_tokens=50, cached=20, output_tokens=7, reasoning=3),
        )
    )
    client = _client(fake_responses)
    tools = [
        {
            "type": "function",
            "name": "shell",
            "description": "Run a command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    ]
    try:
        events = await _collect(client, model="gpt-4.1-mini", instructions="Be brief.", tools=tools)
    finally:
        await client.close()
    assert events[:-1] == [
        StreamText("Hel"),
        StreamText("lo, "),
        StreamText("world"),
        StreamText("!"),
    ]
    final = events[-1]
    assert isinstance(final, ModelResponse)
    served = fake_responses.served[0]
    assert (final.id, final.model, final.status) == (served["id"], "gpt-4.1-mini", "completed")
    assert final.text == "Hello, world!"
    assert final.usage == Usage(
        input_tokens=50,
        cached_input_tokens=20,
        output_tokens=7,
        reasoning_tokens=3,
        total_tokens=57,
    )
    [item] = final.output
    assert item["type"] == "message" and item["id"] == served["output"][0]["id"]
    assert item["content"][0]["text"] == "Hello, world!"
    assert final.raw["id"] == served["id"]
    body = fake_responses.bodies[0]
    assert body["model"] == "gpt-4.1-mini"
    assert body["instructions"] == "Be brief."
    assert body["input"] == USER
    assert body["tools"] == tools
    assert body["stream"] is True


async def test_output_items_are_plain_dicts_that_replay_as_input(
    fake_responses: FakeResponsesAPI,
) -> None:
    fake_responses.queue(
        reply(
            reasoning(summary=["Two lookups at once."]),
            message("Looking both up."),
            function_call("lookup", {"q": "a"}, call_id="call_a"),
            function_call("lookup", {"q": "b"}, call_id="call_b"),
        ),
        text("Both found."),
    )
    client = _client(fake_responses)
    try:
        events = await _collect(client, include=["reasoning.encrypted_content"])
        final = events[-1]
        assert isinstance(final, ModelResponse)
        assert [i["type"] for i in final.output] == [
            "reasoning",
            "message",
            "function_call",
            "function_call",
        ]
        assert [c["call_id"] for c in final.function_calls] == ["call_a", "call_b"]

        def no_nulls(value: Any) -> bool:
            if isinstance(value, dict):
                return all(v is not None and no_nulls(v) for v in value.values())
            if isinstance(value, list):
                return all(no_nulls(v) for v in value)
            return True

        assert no_nulls(final.output)
        for index, item in enumerate(final.output):
            assert check_input_item(item, f"input[{index}]") == []
        # the strict fake accepts them back, with the outputs of both calls
        outputs = [
            {"type": "function_call_output", "call_id": cid, "output": "found"}
            for cid in ("call_a", "call_b")
        ]
        events = await _collect(
            client,
            input=[*USER, *final.output, *outputs],
            include=["reasoning.encrypted_content"],
        )
        assert events[-1].text == "Both found."
    finally:
        await client.close()


async def test_reasoning_items_come_from_output_item_done(fake_responses: FakeResponsesAPI) -> None:
    # The fake's output_item.added carries a different encrypted_content than .done, like the
    # real API: only the done one is valid input for the next request.
    fake_responses.queue(reply(reasoning(encrypted_content="gAAAAAB-final-blob"), message("Hi")))
    client = _client(fake_responses)
    try:
        events = await _collect(client, include=["reasoning.encrypted_content"])
    finally:
        await client.close()
    final = events[-1]
    assert isinstance(final, ModelResponse)
    assert final.output[0]["encrypted_content"] == "gAAAAAB-final-blob"
    assert final.output[0]["id"] == fake_responses.served[0]["output"][0]["id"]


async def test_429_is_retried_honouring_retry_after(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(
        rate_limited(retry_after=0.1),
        error(429, "Slow down.", code="rate_limit_exceeded", retry_after_ms=50),
        text("finally"),
    )
    # a 60 s backoff would blow the 20 s bound: the retry-after values are what is used
    client = _client(fake_responses, backoff_base_s=60)
    try:
        events = await _collect(client)
    finally:
        await client.close()
    assert events[-1].text == "finally"
    assert [r.status for r in fake_responses.requests] == [429, 429, 200]


async def test_500_then_success(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(server_error(), unavailable(), text("recovered"))
    client = _client(fake_responses)
    try:
        events = await _collect(client)
    finally:
        await client.close()
    assert events == [StreamText("recovered"), events[-1]]
    assert events[-1].text == "recovered"
    assert len(fake_responses.requests) == 3


async def test_retries_give_up_after_max_retries(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(*(server_error(502) for _ in range(5)))
    client = _client(fake_responses, max_retries=2)
    try:
        err, _ = await _failure(client)
    finally:
        await client.close()
    assert err.kind == "unavailable" and err.status == 502 and err.retryable
    assert err.user_message == (
        "The model service is unavailable right now (HTTP 502); try again later."
    )
    assert len(fake_responses.requests) == 3
    assert fake_responses.pending == 2


async def test_connection_refused_becomes_unavailable_after_retries() -> None:
    fake = FakeResponsesAPI()
    await fake.start()
    url, key = fake.url, fake.api_key
    await fake.close()  # nothing listens on that port now
    client = ModelClient(
        LLMConfig(name="local", base_url=url, api_key=key, max_retries=2), backoff_base_s=0.01
    )
    try:
        with capture_logs() as logs:
            err, _ = await _failure(client)
    finally:
        await client.close()
    assert err.kind == "unavailable"
    assert err.user_message == (
        "Could not reach the model service of [llm.local]; check its base_url and the network, "
        "then try again."
    )
    assert [e["attempt"] for e in logs if e["event"] == "llm_retry"] == [1, 2]


async def test_bad_key_gives_an_auth_message_without_the_key(
    fake_responses: FakeResponsesAPI, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-proj-THIS-IS-SECRET-0123456789"
    client = _client(fake_responses, api_key=secret)
    caplog.set_level(logging.DEBUG)
    try:
        with capture_logs() as logs:
            err, _ = await _failure(client)
    finally:
        await client.close()
    assert err.kind == "auth" and err.status == 401 and not err.retryable
    assert err.user_message == (
        "The model service rejected the API key of [llm.openai]; check api_key (or OPENAI_API_KEY)."
    )
    assert len(fake_responses.requests) == 1  # no retry on a bad key
    for fragment in (secret, "THIS-IS-SECRET", "0123456789"):
        assert fragment not in str(err) and fragment not in repr(err)
        assert fragment not in caplog.text
        assert fragment not in repr(logs)


async def test_missing_key_is_an_auth_error_before_any_request() -> None:
    client = ModelClient(LLMConfig(api_key=None, base_url=None))
    err, _ = await _failure(client)
    assert err.kind == "auth"
    assert "api_key" in err.user_message and "OPENAI_API_KEY" in err.user_message
    await client.close()


@pytest.mark.parametrize(
    ("scripted", "kind", "expected"),
    [
        (
            quota_exhausted(),
            "quota",
            "The account behind [llm.openai] has run out of quota or credit; check its plan and "
            "billing.",
        ),
        (
            context_too_long(),
            "context_too_long",
            "The conversation is too long for the model's context window; start a new session "
            "or ask something shorter.",
        ),
        (
            error(
                400, "Invalid 'input[0].content': string too long.", code="string_above_max_length"
            ),
            "bad_request",
            "The model service rejected the request: Invalid 'input[0].content': string too long.",
        ),
    ],
)
async def test_errors_that_are_not_retried(
    fake_responses: FakeResponsesAPI, scripted: Any, kind: str, expected: str
) -> None:
    fake_responses.queue(scripted, text("never"))
    client = _client(fake_responses)
    try:
        err, _ = await _failure(client)
    finally:
        await client.close()
    assert (err.kind, err.user_message, err.retryable) == (kind, expected, False)
    assert len(fake_responses.requests) == 1


async def test_unknown_model() -> None:
    async with FakeResponsesAPI(models={"gpt-4.1-nano"}) as fake:
        client = _client(fake)
        try:
            err, _ = await _failure(client, model="gpt-9-turbo")
        finally:
            await client.close()
    assert err.kind == "model_not_found" and err.status == 404
    assert err.user_message == (
        "The model 'gpt-9-turbo' does not exist or this API key cannot use it; check model in "
        "[llm.openai]."
    )


async def test_a_request_the_api_rejects_is_a_bad_request(fake_responses: FakeResponsesAPI) -> None:
    client = _client(fake_responses)
    orphan = {"type": "function_call_output", "call_id": "call_zz", "output": "x"}
    try:
        err, _ = await _failure(client, input=[*USER, orphan])
    finally:
        await client.close()
    assert err.kind == "bad_request"
    assert err.user_message == (
        "The model service rejected the request: No tool call found for function call output "
        "with call_id call_zz."
    )


async def test_a_hanging_call_times_out_and_is_retried(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(hang(), slow(text("late"), delay_s=30), text("in time"))
    client = _client(fake_responses, timeout_s=0.3, max_retries=2)
    try:
        events = await _collect(client)
    finally:
        await client.close()
    assert events[-1].text == "in time"
    assert len(fake_responses.requests) == 3


async def test_timeout_message(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(slow(text("late"), delay_s=30))
    client = _client(fake_responses, timeout_s=0.3, max_retries=0)
    try:
        err, _ = await _failure(client)
    finally:
        await client.close()
    assert err.kind == "timeout" and err.retryable
    assert err.user_message == (
        "The model did not answer within 0.3 s; try again, or raise timeout_s in [llm.openai]."
    )


async def test_no_retry_once_text_was_yielded(fake_responses: FakeResponsesAPI) -> None:
    # created, in_progress, item.added, part.added, delta "ab", delta "cd", then the line drops
    fake_responses.queue(text("abcdef", chunks=3, disconnect_after=6), text("second try"))
    client = _client(fake_responses)
    try:
        err, texts = await _failure(client)
    finally:
        await client.close()
    assert texts == ["ab", "cd"]
    assert err.kind == "unavailable"
    assert len(fake_responses.requests) == 1
    assert fake_responses.pending == 1


async def test_stall_after_text_times_out_without_retry(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(slow(text("abcdef", chunks=3), delta_delay_s=5), text("second try"))
    client = _client(fake_responses, timeout_s=0.5)
    try:
        err, texts = await _failure(client)
    finally:
        await client.close()
    assert err.kind == "timeout"
    assert texts and "".join(texts) != "abcdef"
    assert len(fake_responses.requests) == 1


async def test_a_stream_broken_before_any_text_is_retried(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(text("lost", disconnect_after=3), text("whole"))
    client = _client(fake_responses)
    try:
        events = await _collect(client)
    finally:
        await client.close()
    assert [e.text for e in events if isinstance(e, StreamText)] == ["whole"]
    assert len(fake_responses.requests) == 2


async def test_slow_consumer_is_not_timed_out(fake_responses: FakeResponsesAPI) -> None:
    # The per-call bound guards the server's answer, not the caller's work between events.
    fake_responses.queue(function_calls(("a", {}), text="x" * 10), text("done"))
    client = _client(fake_responses, timeout_s=0.5)
    try:
        seen = []
        async for event in client.stream(input=USER):
            await asyncio.sleep(0.6)
            seen.append(event)
    finally:
        await client.close()
    assert isinstance(seen[-1], ModelResponse)
    assert len(fake_responses.requests) == 1


async def test_on_retry_is_told_each_retry_with_its_kind_and_delay(
    fake_responses: FakeResponsesAPI,
) -> None:
    fake_responses.queue(
        server_error(retry_after=0.02),
        error(429, "Slow down.", code="rate_limit_exceeded", retry_after_ms=30),
        text("third time lucky"),
    )
    told: list[tuple[int, str, float]] = []

    async def on_retry(attempt: int, kind: str, delay_s: float) -> None:
        told.append((attempt, kind, delay_s))

    client = _client(fake_responses, backoff_base_s=60)
    try:
        events = await _collect(client, on_retry=on_retry)
    finally:
        await client.close()
    assert events[-1].text == "third time lucky"
    assert told == [(1, "unavailable", 0.02), (2, "rate_limit", pytest.approx(0.03))]
    # on_retry is ours, not part of the request
    assert all("on_retry" not in body for body in fake_responses.bodies)


async def test_on_retry_is_not_called_without_a_retry_and_may_be_sync_or_broken(
    fake_responses: FakeResponsesAPI,
) -> None:
    fake_responses.queue(text("first"), server_error(), text("second"))
    told: list[int] = []
    client = _client(fake_responses)
    try:
        await _collect(client, on_retry=lambda attempt, kind, delay: told.append(attempt))
        assert told == []

        def broken(attempt: int, kind: str, delay: float) -> None:
            raise RuntimeError("bookkeeping fell over")

        with capture_logs() as logs:
            events = await _collect(client, on_retry=broken)
    finally:
        await client.close()
    assert events[-1].text == "second"  # a failing callback does not fail the call
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["llm_on_retry_failed"]


async def test_retries_exhausted_tell_on_retry_max_retries_times(
    fake_responses: FakeResponsesAPI,
) -> None:
    fake_responses.queue(*(rate_limited(retry_after=0.01) for _ in range(3)))
    told: list[int] = []
    client = _client(fake_responses, max_retries=2)
    try:
        err, _ = await _failure(client, on_retry=lambda a, k, d: told.append(a))
    finally:
        await client.close()
    assert err.kind == "rate_limit"
    assert told == [1, 2]


async def test_the_request_body_is_sent_as_built(fake_responses: FakeResponsesAPI) -> None:
    # No transform by the openai package: the JSON the server gets is exactly our input,
    # options included, non-ASCII text intact.
    history = [
        {"role": "user", "content": "Grüße, 世界 👋"},
        {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Hallo!", "annotations": []}],
        },
        {"role": "user", "content": "again"},
    ]
    fake_responses.queue(text("ok"))
    client = _client(fake_responses)
    try:
        await _collect(
            client,
            model="gpt-4.1-mini",
            input=history,
            include=["reasoning.encrypted_content"],
            store=False,
            reasoning={"effort": "low"},
        )
    finally:
        await client.close()
    [request] = fake_responses.requests
    assert request.body == {
        "model": "gpt-4.1-mini",
        "input": history,
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "reasoning": {"effort": "low"},
        "stream": True,
    }
    assert request.headers["Authorization"] == f"Bearer {fake_responses.api_key}"
    assert request.headers["Content-Type"] == "application/json"


# ------------------------------------------------------------- a compatible server's SSE
# Some servers that speak the Responses API write their streams differently from OpenAI:
# CRLF line ends, no `event:` names, errors inside the stream. A raw SSE server covers that.


class RawSSEServer:
    """Serves each request the next scripted SSE body (bytes, written in small pieces)."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.requests = 0
        self._runner: Any = None
        self.url = ""

    async def __aenter__(self) -> RawSSEServer:
        async def handle(request: web.Request) -> web.StreamResponse:
            await request.read()
            body = self.bodies[self.requests]
            self.requests += 1
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for start in range(0, len(body), 7):  # pieces that split lines and events
                await response.write(body[start : start + 7])
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_post("/v1/responses", handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


def _sse(*events: dict[str, Any], named: bool = True, newline: str = "\n") -> bytes:
    out = []
    for event in events:
        lines = [f"event: {event['type']}"] if named else []
        lines.append("data: " + json.dumps(event, ensure_ascii=False))
        out.append(newline.join(lines) + newline + newline)
    return "".join(out).encode()


def _completed(text_value: str) -> dict[str, Any]:
    item = {
        "id": "msg_1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text_value, "annotations": []}],
    }
    return {
        "type": "response.completed",
        "response": {
            "id": "resp_1",
            "model": "local-model",
            "status": "completed",
            "output": [item],
            "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
            "error": None,
        },
    }


async def test_a_crlf_stream_without_event_names_is_read() -> None:
    body = _sse(
        {"type": "response.created", "response": {"id": "resp_1", "output": []}},
        {"type": "response.output_text.delta", "delta": "Grüß "},
        {"type": "response.output_text.delta", "delta": "dich 👋"},
        _completed("Grüß dich 👋"),
        named=False,
        newline="\r\n",
    )
    async with RawSSEServer(body + b": keep-alive\r\n\r\ndata: [DONE]\r\n\r\n") as server:
        client = ModelClient(
            LLMConfig(name="local", base_url=server.url, api_key=None, model="local-model")
        )
        try:
            events = await _collect(client)
        finally:
            await client.close()
    assert events[:-1] == [StreamText("Grüß "), StreamText("dich 👋")]
    final = events[-1]
    assert isinstance(final, ModelResponse)
    assert (final.id, final.text, final.usage.total_tokens) == ("resp_1", "Grüß dich 👋", 5)
    assert final.raw["error"] is None  # raw is what the server sent


@pytest.mark.parametrize(
    ("error_event", "kind", "retried"),
    [
        # the Responses API's own shape: code and message at the top
        (
            {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down."},
            "rate_limit",
            True,
        ),
        # a compatible server's shape: under "error"
        (
            {"type": "error", "error": {"code": "context_length_exceeded", "message": "Too long"}},
            "context_too_long",
            False,
        ),
        (
            {
                "type": "response.failed",
                "response": {"id": "r", "error": {"code": "server_error", "message": "oops"}},
            },
            "unavailable",
            True,
        ),
    ],
)
async def test_errors_inside_the_stream_are_mapped(
    error_event: dict[str, Any], kind: str, retried: bool
) -> None:
    failing = _sse({"type": "response.created", "response": {"id": "r"}}, error_event)
    async with RawSSEServer(failing, _sse(_completed("fine"))) as server:
        client = ModelClient(
            LLMConfig(name="local", base_url=server.url, api_key=None, max_retries=1),
            backoff_base_s=0.01,
        )
        try:
            if retried:
                told: list[str] = []
                events = await _collect(client, on_retry=lambda a, k, d: told.append(k))
                assert events[-1].text == "fine"
                assert told == [kind]
            else:
                err, _ = await _failure(client)
                assert err.kind == kind
        finally:
            await client.close()
    assert server.requests == (2 if retried else 1)


async def test_an_unreadable_stream_is_unavailable() -> None:
    async with RawSSEServer(b"data: {not json\n\n") as server:
        client = ModelClient(LLMConfig(name="local", base_url=server.url, max_retries=0))
        try:
            err, _ = await _failure(client)
        finally:
            await client.close()
    assert err.kind == "unavailable"
    assert err.user_message == "The model service sent an answer Pingu could not read; try again."
