"""The gateway application in-process (a real aiohttp server on 127.0.0.1, a real database,
runtime and dispatcher): readiness, shutdown refusals, and the SSE encoding."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pingu.agent.events import (
    AgentMessage,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    TurnDone,
    TurnError,
)
from pingu.agent.runtime import AgentRuntime
from pingu.config.model import Config, DBConfig, GatewayConfig
from pingu.dispatcher import Dispatcher
from pingu.gateway import sse
from pingu.gateway.app import create_app
from pingu.store.db import Database


class Status:
    def __init__(self) -> None:
        self.phase = "starting"

    async def health(self) -> dict[str, Any]:
        return {"database": {"ok": True}, "channels": {"tg": {"ok": True, "polling": True}}}


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[TestClient, Status, Dispatcher]]:
    config = Config(db=DBConfig(path=tmp_path / "pingu.db"), gateway=GatewayConfig(token="t0k3n"))
    db = await Database.open(config.db.path)
    runtime = AgentRuntime(config, db)
    dispatcher = Dispatcher(runtime)
    status = Status()
    app = create_app(config=config, dispatcher=dispatcher, runtime=runtime, db=db, status=status)
    client = TestClient(TestServer(app, host="127.0.0.1", port=0))
    await client.start_server()
    try:
        yield client, status, dispatcher
    finally:
        await client.close()
        await runtime.close()
        await db.close()


AUTH = {"Authorization": "Bearer t0k3n"}
CHAT = {"session_id": "http:x", "message": "hello"}


async def test_healthz_follows_the_daemon_phase(gateway) -> None:
    client, status, _ = gateway
    r = await client.get("/healthz")
    assert r.status == 503
    assert await r.json() == {"status": "starting"}

    status.phase = "ready"
    r = await client.get("/healthz")
    assert r.status == 200
    assert await r.json() == {
        "status": "ok",
        "database": {"ok": True},
        "channels": {"tg": {"ok": True, "polling": True}},
    }

    status.phase = "stopping"
    r = await client.get("/healthz")
    assert r.status == 503
    assert await r.json() == {"status": "stopping"}


async def test_chat_is_refused_before_ready_and_while_stopping(gateway) -> None:
    client, status, dispatcher = gateway
    r = await client.post("/v1/chat", json=CHAT, headers=AUTH)
    assert r.status == 503
    assert (await r.json())["error"]["code"] == "unavailable"

    # Ready, but the dispatcher has begun draining (the daemon is about to say stopping).
    status.phase = "ready"
    await dispatcher.drain(0)
    r = await client.post("/v1/chat", json=CHAT, headers=AUTH)
    assert r.status == 503
    assert "shutting down" in (await r.json())["error"]["message"]


def test_sse_encoding_of_every_agent_event() -> None:
    cases = [
        (TextDelta("Hé\nllo"), "token", {"text": "Hé\nllo"}),
        (ToolCallStarted("c1", "shell", '{"command": "ls"}'), "tool_call", None),
        (ToolResult("c1", "shell", "a\nb", is_error=True), "tool_result", None),
        (AgentMessage("working on it"), "message", {"text": "working on it"}),
        (TurnError("model unavailable"), "error", {"message": "model unavailable"}),
        (
            TurnDone("done!", "completed", 7, {"total_tokens": 3}),
            "done",
            {"text": "done!", "status": "completed", "turn_id": 7, "usage": {"total_tokens": 3}},
        ),
    ]
    for event, name, data in cases:
        raw = sse.encode_event(event).decode()
        head, data_line, *rest = raw.split("\n")
        assert head == f"event: {name}"
        assert data_line.startswith("data: ")
        assert rest == ["", ""], "one data line, then the blank line ending the event"
        decoded = json.loads(data_line[len("data: ") :])
        if data is not None:
            assert decoded == data
        assert "kind" not in decoded
    assert json.loads(sse.encode_event(cases[2][0]).decode().split("data: ")[1]) == {
        "call_id": "c1",
        "name": "shell",
        "output": "a\nb",
        "is_error": True,
    }
