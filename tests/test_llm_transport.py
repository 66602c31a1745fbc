"""The aiohttp transport under the openai client: concurrency, streaming, errors, closing."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import openai
import pytest
from aiohttp import web

from pingu.config.model import LLMConfig
from pingu.llm import LLMError, ModelClient, ModelResponse, StreamText, Usage
from pingu.llm.transport import AiohttpTransport, openai_http_client
from tests.fakes.responses_api import FakeResponsesAPI, Reply, hang, text

USER = [{"role": "user", "content": "Hello?"}]
SECRET = "sk-proj-TRANSPORT-SECRET-0123456789"


def _client(url: str, key: str, **overrides: Any) -> ModelClient:
    settings: dict[str, Any] = {"base_url": url, "api_key": key, "max_retries": 0}
    settings.update(overrides)
    return ModelClient(LLMConfig(**settings), backoff_base_s=0.01)


def _openai(url: str, key: str, timeout: httpx2.Timeout) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=key, base_url=url, max_retries=0, timeout=timeout, http_client=openai_http_client()
    )


async def _answer(client: ModelClient) -> list[StreamText | ModelResponse]:
    async with asyncio.timeout(20):
        return [event async for event in client.stream(input=USER)]


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


async def test_150_concurrent_streams_are_all_in_flight_at_once(
    fake_responses: FakeResponsesAPI,
) -> None:
    streams = 150  # aiohttp's default connector would hold them to 100
    in_flight = 0
    most = 0
    all_arrived = asyncio.Event()

    async def responder(body: dict[str, Any]) -> Reply:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == streams:
            all_arrived.set()
        # each answer waits until every request is in (or gives up, and the count tells)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await all_arrived.wait()
        in_flight -= 1
        return text(f"answer to {body['input'][-1]['content']}")

    fake_responses.responder = responder
    client = _client(fake_responses.url, fake_responses.api_key)
    try:
        async with asyncio.timeout(30):
            results = await asyncio.gather(
                *(
                    _collect_text(client, [{"role": "user", "content": f"q{n}"}])
                    for n in range(streams)
                )
            )
    finally:
        await client.close()
    assert most == streams
    assert results == [f"answer to q{n}" for n in range(streams)]


async def _collect_text(client: ModelClient, input_items: list[dict[str, Any]]) -> str:
    final = None
    async for event in client.stream(input=input_items):
        if isinstance(event, ModelResponse):
            final = event
    assert final is not None
    return final.text


@contextlib.asynccontextmanager
async def _gated_model() -> AsyncIterator[tuple[str, asyncio.Event, list[str]]]:
    """A model that sends its first delta, then waits for the gate before finishing."""
    gate = asyncio.Event()
    progress: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)

        async def send(event: dict[str, Any]) -> None:
            await stream.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

        await send({"type": "response.output_text.delta", "delta": "first "})
        progress.append("first sent")
        async with asyncio.timeout(10):
            await gate.wait()
        await send({"type": "response.output_text.delta", "delta": "second"})
        message = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "first second", "annotations": []}],
        }
        response = {"id": "resp_1", "model": "m", "status": "completed", "output": [message]}
        await send({"type": "response.completed", "response": response})
        progress.append("finished")
        await stream.write_eof()
        return stream

    app = web.Application()
    app.router.add_post("/v1/responses", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", gate, progress
    finally:
        gate.set()
        await runner.cleanup()


async def test_the_body_is_read_as_it_arrives() -> None:
    async with _gated_model() as (url, gate, progress):
        client = _client(url, "k")
        events: list[StreamText | ModelResponse] = []
        try:
            async with asyncio.timeout(10):
                async for event in client.stream(input=USER):
                    if not events:
                        # the model has not finished: it waits for this very moment
                        assert progress == ["first sent"]
                        gate.set()
                    events.append(event)
        finally:
            await client.close()
    assert events[0] == StreamText("first ")
    assert isinstance(events[-1], ModelResponse) and events[-1].text == "first second"
    assert progress == ["first sent", "finished"]


async def test_a_read_timeout_is_an_api_timeout_error(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(hang())
    client = _openai(fake_responses.url, fake_responses.api_key, httpx2.Timeout(0.3))
    try:
        with pytest.raises(openai.APITimeoutError) as caught:
            await client.responses.create(model="gpt-test", input="hi")
    finally:
        await client.close()
    assert isinstance(caught.value.__cause__, httpx2.ReadTimeout)


@contextlib.contextmanager
def _unaccepting_listener() -> Iterator[int]:
    """A port whose accept queue is full: a new connection is never established."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_a_connect_timeout_is_an_api_timeout_error() -> None:
    with _unaccepting_listener() as port:
        client = _openai(
            f"http://127.0.0.1:{port}/v1", "k", httpx2.Timeout(5.0, connect=0.3, pool=0.0)
        )
        try:
            with pytest.raises(openai.APITimeoutError) as caught:
                await client.responses.create(model="gpt-test", input="hi")
        finally:
            await client.close()
    assert isinstance(caught.value.__cause__, httpx2.ConnectTimeout)


async def test_refused_and_broken_connections_never_show_the_key() -> None:
    fake = FakeResponsesAPI(api_key=SECRET)
    await fake.start()
    url = fake.url
    fake.queue(text("abcdef", chunks=3, disconnect_after=4))
    client = _openai(url, SECRET, httpx2.Timeout(5.0))
    try:
        # the answer breaks off mid-body
        response = await client.post(
            "/responses",
            cast_to=httpx2.Response,
            body={"model": "gpt-test", "input": "hi", "stream": True},
            stream=True,
        )
        with pytest.raises(httpx2.RemoteProtocolError) as broken:
            async for _ in response.aiter_bytes():
                pass
        await response.aclose()
        await fake.close()  # nothing listens on that port now
        with pytest.raises(openai.APIConnectionError) as refused:
            await client.responses.create(model="gpt-test", input="hi")
    finally:
        await client.close()
        await fake.close()
    assert isinstance(refused.value.__cause__, httpx2.ConnectError)
    for failure in (broken.value, refused.value):
        for exc in _chain(failure):
            assert SECRET not in str(exc) and SECRET not in repr(exc)
            assert "authorization" not in str(exc).lower()


async def test_model_client_errors_through_the_transport(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(text("lost", disconnect_after=3), hang())
    client = _client(fake_responses.url, fake_responses.api_key, timeout_s=0.3)
    try:
        with pytest.raises(LLMError) as broken:
            await _answer(client)
        with pytest.raises(LLMError) as stalled:
            await _answer(client)
    finally:
        await client.close()
    assert broken.value.kind == "unavailable"
    assert stalled.value.kind == "timeout"


async def test_close_closes_the_session(fake_responses: FakeResponsesAPI) -> None:
    transport = AiohttpTransport()
    client = ModelClient(
        LLMConfig(base_url=fake_responses.url, api_key=fake_responses.api_key),
        transport=transport,
    )
    events = await _answer(client)
    assert isinstance(events[-1], ModelResponse)
    session = transport._session
    assert session is not None and not session.closed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await client.close()
        del client
        gc.collect()
    assert session.closed
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_proxies_come_from_the_environment(
    fake_responses: FakeResponsesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.StreamResponse:
        # A forward proxy gets the absolute URL; this one answers itself, as a model would.
        seen.append(str(request.url))
        await request.read()
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        response = {"id": "resp_p", "model": "m", "status": "completed", "output": []}
        event = {"type": "response.completed", "response": response}
        await stream.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await stream.write_eof()
        return stream

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    proxy_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = _client(fake_responses.url, fake_responses.api_key)
        try:
            via_proxy = await _answer(client)
        finally:
            await client.close()
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        client = _client(fake_responses.url, fake_responses.api_key)
        try:
            fake_responses.queue(text("direct"))
            direct = await _answer(client)
        finally:
            await client.close()
    finally:
        await runner.cleanup()
    assert seen == [f"{fake_responses.url}/responses"]
    assert via_proxy[-1] == ModelResponse(
        "resp_p", "m", "completed", [], Usage(), via_proxy[-1].raw
    )  # type: ignore[union-attr]
    assert direct[-1].text == "direct"  # type: ignore[union-attr]
    assert len(fake_responses.requests) == 1  # only the direct call reached the model
