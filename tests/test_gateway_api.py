"""The HTTP gateway through the real `pingu gateway` process and the fake Responses API.

One daemon (with a bearer token) serves the whole module, to keep the module fast; each
test uses its own session ids. A second daemon without a token checks the 127.0.0.1
fallback.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pingu.config.model import Config, GatewayConfig
from pingu.gateway.app import create_app
from tests.fakes.daemon import DaemonProcess, sse_events, wait_until, write_config
from tests.fakes.responses_api import (
    FakeResponsesAPI,
    function_calls,
    hang,
    slow,
    text,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOKEN = "gw-test-token-7f3a9c"
MAX_BODY = 4096
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def fake() -> AsyncIterator[FakeResponsesAPI]:
    async with FakeResponsesAPI() as api:
        yield api


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def daemon(
    fake: FakeResponsesAPI, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[DaemonProcess]:
    tmp = tmp_path_factory.mktemp("gateway")
    config = write_config(tmp, fake, token=TOKEN, max_body_bytes=MAX_BODY)
    process = await DaemonProcess.start(config, grace=5)
    try:
        yield process
    finally:
        code = await process.terminate()
        assert code == 0, process.stderr
        # Whatever happened in this module, the log never showed a secret.
        assert TOKEN not in process.stderr
        assert fake.api_key not in process.stderr


@pytest_asyncio.fixture(loop_scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


@pytest.fixture(autouse=True)
def fresh_script(fake: FakeResponsesAPI) -> None:
    assert fake.pending == 0, "a previous test left scripted replies"


def new_session() -> str:
    return f"http:test-{uuid.uuid4().hex[:8]}"


async def chat(
    http: aiohttp.ClientSession, daemon: DaemonProcess, body: Any, **kwargs: Any
) -> tuple[int, str, list[tuple[str, Any]]]:
    async with http.post(daemon.url("/v1/chat"), json=body, headers=AUTH, **kwargs) as r:
        raw = await r.text()
        events = sse_events(raw) if r.content_type == "text/event-stream" else []
        return r.status, r.content_type, events


async def session_detail(
    http: aiohttp.ClientSession, daemon: DaemonProcess, session_id: str
) -> dict[str, Any]:
    async with http.get(daemon.url(f"/v1/sessions/{session_id}"), headers=AUTH) as r:
        assert r.status == 200, await r.text()
        return await r.json()


# -- health and auth -------------------------------------------------------------------


async def test_healthz_reports_database_and_channels_without_auth(
    http: aiohttp.ClientSession, daemon: DaemonProcess
) -> None:
    async with http.get(daemon.url("/healthz")) as r:
        assert r.status == 200
        body = await r.json()
    assert body["status"] == "ok"
    assert body["database"]["ok"] is True
    assert body["database"]["schema_version"] >= 1
    assert body["channels"] == {}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}],
)
async def test_v1_needs_the_bearer_token(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI, headers: dict
) -> None:
    model_calls = len(fake.requests)
    for method, path in [
        ("GET", "/v1/sessions"),
        ("GET", "/v1/sessions/anything"),
        ("POST", "/v1/chat"),
        ("DELETE", "/v1/sessions/x/run"),
        ("GET", "/v1/no-such-route"),
    ]:
        async with http.request(
            method, daemon.url(path), headers=headers, json={"session_id": "s", "message": "hi"}
        ) as r:
            assert r.status == 401, (method, path)
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert (await r.json())["error"]["code"] == "unauthorized"
    assert len(fake.requests) == model_calls, "an unauthenticated chat reached the model"

    async with http.get(daemon.url("/v1/sessions"), headers=AUTH) as r:
        assert r.status == 200


# -- chat ------------------------------------------------------------------------------


async def test_chat_streams_tokens_then_done_and_saves_the_turn(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI
) -> None:
    session_id = new_session()
    fake.queue(text("Hello from the fake model", chunks=["Hello ", "from the ", "fake model"]))

    status, content_type, events = await chat(
        http, daemon, {"session_id": session_id, "message": "Say hello"}
    )

    assert status == 200
    assert content_type == "text/event-stream"
    assert events[:3] == [
        ("token", {"text": "Hello "}),
        ("token", {"text": "from the "}),
        ("token", {"text": "fake model"}),
    ]
    name, done = events[-1]
    assert name == "done" and len(events) == 4
    assert done["text"] == "Hello from the fake model"
    assert done["status"] == "completed"
    assert isinstance(done["turn_id"], int)
    assert done["usage"]["total_tokens"] > 0
    # The model got the user's message.
    assert fake.bodies[-1]["input"][-1]["content"] == "Say hello"

    detail = await session_detail(http, daemon, session_id)
    assert detail["id"] == session_id
    assert detail["running"] is False
    [turn] = detail["turns"]
    assert turn["id"] == done["turn_id"]
    assert turn["user_message"] == "Say hello"
    assert turn["final_text"] == "Hello from the fake model"
    assert turn["status"] == "completed"
    assert turn["created_at"]

    async with http.get(daemon.url("/v1/sessions"), headers=AUTH) as r:
        listing = await r.json()
    assert session_id in [s["id"] for s in listing["sessions"]]


async def test_second_turn_sees_the_first(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI
) -> None:
    session_id = new_session()
    fake.queue(text("First answer"), text("Second answer"))
    await chat(http, daemon, {"session_id": session_id, "message": "one"})
    _, _, events = await chat(http, daemon, {"session_id": session_id, "message": "two"})
    assert events[-1][1]["text"] == "Second answer"
    contents = [item.get("content") for item in fake.bodies[-1]["input"]]
    assert "one" in contents and contents[-1] == "two"
    assert len((await session_detail(http, daemon, session_id))["turns"]) == 2


async def test_tool_calls_are_streamed(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI
) -> None:
    session_id = new_session()
    fake.queue(
        function_calls(("shell", {"command": "echo pingu-tool-ran", "timeout_s": None})),
        text("The command printed pingu-tool-ran."),
    )

    _, _, events = await chat(http, daemon, {"session_id": session_id, "message": "run it"})

    names = [name for name, _ in events]
    assert names.index("tool_call") < names.index("tool_result") < names.index("done")
    call = next(data for name, data in events if name == "tool_call")
    result = next(data for name, data in events if name == "tool_result")
    assert call["name"] == "shell"
    assert json.loads(call["arguments"])["command"] == "echo pingu-tool-ran"
    assert result["call_id"] == call["call_id"]
    assert result["is_error"] is False
    assert "pingu-tool-ran" in result["output"]
    assert events[-1][1]["text"] == "The command printed pingu-tool-ran."
    # The second model call got the tool's output.
    outputs = [i for i in fake.bodies[-1]["input"] if i.get("type") == "function_call_output"]
    assert outputs and "pingu-tool-ran" in outputs[-1]["output"]


async def test_client_disconnect_does_not_cancel_the_turn(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI
) -> None:
    session_id = new_session()
    fake.queue(slow(text("a slow and complete answer", chunks=5), delta_delay_s=0.15))
    async with http.post(
        daemon.url("/v1/chat"), json={"session_id": session_id, "message": "go"}, headers=AUTH
    ) as r:
        first = await r.content.readuntil(b"\n\n")
        assert first.startswith(b"event: token")
        # Leaving the block closes the connection mid-stream.

    async def saved() -> bool:
        async with http.get(daemon.url(f"/v1/sessions/{session_id}"), headers=AUTH) as r:
            return r.status == 200 and bool((await r.json())["turns"])

    await wait_until(saved)
    [turn] = (await session_detail(http, daemon, session_id))["turns"]
    assert turn["status"] == "completed"
    assert turn["final_text"] == "a slow and complete answer"


async def test_cancel_a_running_turn(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI
) -> None:
    session_id = new_session()
    fake.queue(hang())
    requests_before = len(fake.requests)
    streaming = asyncio.create_task(
        chat(http, daemon, {"session_id": session_id, "message": "take your time"})
    )

    await wait_until(lambda: len(fake.requests) > requests_before)
    async with http.delete(daemon.url(f"/v1/sessions/{session_id}/run"), headers=AUTH) as r:
        assert r.status == 200
        assert await r.json() == {"cancelled": True}

    status, _, events = await asyncio.wait_for(streaming, 10)
    assert status == 200
    assert events[-1][0] == "done"
    assert events[-1][1]["status"] == "cancelled"
    [turn] = (await session_detail(http, daemon, session_id))["turns"]
    assert turn["status"] == "cancelled"
    assert turn["user_message"] == "take your time"

    async with http.delete(daemon.url(f"/v1/sessions/{session_id}/run"), headers=AUTH) as r:
        assert r.status == 200
        assert await r.json() == {"cancelled": False}


async def test_sessions_pagination(
    http: aiohttp.ClientSession, daemon: DaemonProcess, fake: FakeResponsesAPI
) -> None:
    ids = [new_session() for _ in range(3)]
    for session_id in ids:
        fake.queue(text("ok"))
        await chat(http, daemon, {"session_id": session_id, "message": "hi"})
    async with http.get(daemon.url("/v1/sessions?limit=2"), headers=AUTH) as r:
        first = await r.json()
    async with http.get(daemon.url("/v1/sessions?limit=2&offset=2"), headers=AUTH) as r:
        second = await r.json()
    assert len(first["sessions"]) == 2 and first["has_more"] is True
    assert first["limit"] == 2 and second["offset"] == 2
    listed = [s["id"] for s in first["sessions"] + second["sessions"]]
    assert len(set(listed)) == len(listed)
    # Most recently active first: the last chat leads.
    assert [s["id"] for s in first["sessions"]] == [ids[2], ids[1]]
    assert second["sessions"][0]["id"] == ids[0]


# -- errors ----------------------------------------------------------------------------


async def expect_error(
    response: aiohttp.ClientResponse, status: int, code: str | None = None
) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    body = await response.json()
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body


async def test_unknown_session_is_404(http: aiohttp.ClientSession, daemon: DaemonProcess) -> None:
    async with http.get(daemon.url("/v1/sessions/http:nobody"), headers=AUTH) as r:
        await expect_error(r, 404, "unknown_session")
    async with http.delete(daemon.url("/v1/sessions/http:nobody/run"), headers=AUTH) as r:
        await expect_error(r, 404, "unknown_session")


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b'["a", "list"]', 400, "invalid_json"),
        (b'{"message": "no session"}', 400, "invalid_request"),
        (b'{"session_id": "s"}', 400, "invalid_request"),
        (b'{"session_id": 5, "message": "hi"}', 400, "invalid_request"),
        (b'{"session_id": "s", "message": ["hi"]}', 400, "invalid_request"),
        (b'{"session_id": "s", "message": "   "}', 400, "invalid_request"),
        (b'{"session_id": "s", "message": "hi", "agent": 3}', 400, "invalid_request"),
        (b'{"session_id": "s", "message": "hi", "extra": 1}', 400, "invalid_request"),
        (b'{"session_id": "s", "message": "hi", "agent": "nobody"}', 404, "unknown_agent"),
        (b'{"session_id": "s", "message": "' + b"x" * MAX_BODY + b'"}', 413, "body_too_large"),
        # Deeper than Python's recursion limit (a RecursionError was a 500).
        (b'{"a": ' + b"[" * 1900 + b"]" * 1900 + b"}", 400, "invalid_json"),
        # Lone surrogates: valid JSON, but no UTF-8 text can hold them (the turn failed
        # inside a 200 stream and the message was lost).
        (b'{"session_id": "s", "message": "a\\ud800"}', 400, "invalid_request"),
        (b'{"session_id": "a\\ud800", "message": "hi"}', 400, "invalid_request"),
        (b'{"session_id": "s", "message": "hi", "agent": "\\udfff"}', 400, "invalid_request"),
    ],
)
async def test_malformed_chat_requests(
    http: aiohttp.ClientSession,
    daemon: DaemonProcess,
    fake: FakeResponsesAPI,
    payload: bytes,
    status: int,
    code: str,
) -> None:
    model_calls = len(fake.requests)
    headers = {**AUTH, "Content-Type": "application/json"}
    async with http.post(daemon.url("/v1/chat"), data=payload, headers=headers) as r:
        await expect_error(r, status, code)
    assert len(fake.requests) == model_calls


async def test_oversized_body_without_content_length(
    http: aiohttp.ClientSession, daemon: DaemonProcess
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"session_id": "s", "message": "'
        for _ in range(4):
            yield b"y" * MAX_BODY
        yield b'"}'

    async with http.post(daemon.url("/v1/chat"), data=chunks(), headers=AUTH) as r:
        await expect_error(r, 413, "body_too_large")


async def test_wrong_method_and_unknown_route(
    http: aiohttp.ClientSession, daemon: DaemonProcess
) -> None:
    async with http.get(daemon.url("/v1/chat"), headers=AUTH) as r:
        await expect_error(r, 405, "method_not_allowed")
        assert "POST" in r.headers["Allow"]
    async with http.get(daemon.url("/v1/nothing-here"), headers=AUTH) as r:
        await expect_error(r, 404, "not_found")
    async with http.get(daemon.url("/v1/sessions?limit=zero"), headers=AUTH) as r:
        await expect_error(r, 400, "invalid_request")


@pytest.mark.parametrize(
    "query", ["offset=9223372036854775800", "offset=1000000001", "limit=9223372036854775807"]
)
async def test_huge_page_bounds_are_refused(
    http: aiohttp.ClientSession, daemon: DaemonProcess, query: str
) -> None:
    async with http.get(daemon.url(f"/v1/sessions?{query}"), headers=AUTH) as r:
        await expect_error(r, 400, "invalid_request")
    async with http.get(daemon.url("/v1/sessions?offset=1000000000"), headers=AUTH) as r:
        assert r.status == 200
        assert (await r.json())["sessions"] == []


# -- openapi ---------------------------------------------------------------------------


async def test_openapi_lists_every_route(
    http: aiohttp.ClientSession, daemon: DaemonProcess
) -> None:
    async with http.get(daemon.url("/openapi.json")) as r:
        assert r.status == 200
        document = json.loads(await r.text())
    assert document["openapi"].startswith("3.1")
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"

    # The routes the application really has (built in-process; nothing is started).
    app = create_app(
        config=Config(gateway=GatewayConfig(token="x")),
        dispatcher=None,  # type: ignore[arg-type]
        runtime=None,  # type: ignore[arg-type]
        db=None,
        status=None,  # type: ignore[arg-type]
    )
    routes = {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.method != "HEAD"
    }
    documented = {(path, method) for path, item in document["paths"].items() for method in item}
    assert routes == documented
    for path, item in document["paths"].items():
        for operation in item.values():
            assert operation["responses"], path
            if path.startswith("/v1/"):
                assert "401" in operation["responses"], path
    assert (
        "disconnects mid-stream the turn is NOT cancelled"
        in (document["paths"]["/v1/chat"]["post"]["description"])
    )


# -- without a token -------------------------------------------------------------------


async def test_without_a_token_it_listens_on_localhost_only(
    fake: FakeResponsesAPI, tmp_path: Path
) -> None:
    # Asked for every interface; with no token it must still bind 127.0.0.1.
    config = write_config(tmp_path, fake, addr="0.0.0.0:0")
    process = await DaemonProcess.start(config)
    try:
        assert process.http_host == "127.0.0.1"
        [listening] = process.find("http_listening")
        assert listening["auth"] == "none"
        assert listening["level"] == "warning"
        assert "127.0.0.1 only" in listening["note"]
        async with aiohttp.ClientSession() as http, http.get(process.url("/v1/sessions")) as r:
            assert r.status == 200
    finally:
        assert await process.terminate() == 0
