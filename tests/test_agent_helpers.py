"""Shared setup for the agent tests: a real config (from TOML text) pointing at the fake
Responses API, a real database in tmp_path, a real runtime. No tests live here."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pingu.agent.events import AgentEvent
from pingu.agent.runtime import AgentRuntime
from pingu.config.loader import load_config_text
from pingu.config.model import Config
from pingu.llm import ModelClient
from pingu.store import Database
from tests.fakes.responses_api import FakeResponsesAPI


def config_text(fake: FakeResponsesAPI, tmp_path: Path, extra: str = "") -> str:
    return (
        f'[llm.openai]\nbase_url = "{fake.url}"\napi_key = "{fake.api_key}"\n'
        'model = "gpt-4.1-nano"\nmax_retries = 2\n'
        f'[db]\npath = "{tmp_path / "pingu.db"}"\n'
        f'[state]\ndir = "{tmp_path / "state"}"\n' + extra
    )


def make_config(fake: FakeResponsesAPI, tmp_path: Path, extra: str = "") -> Config:
    return load_config_text(config_text(fake, tmp_path, extra), file=None, env={})


def quick_retry_client(llm: Any) -> ModelClient:
    return ModelClient(llm, backoff_base_s=0.01, backoff_cap_s=0.05)


@dataclass
class Recorder:
    """An event sink that keeps everything it is sent."""

    events: list[AgentEvent] = field(default_factory=list)

    async def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.kind == kind]

    @property
    def streamed_text(self) -> str:
        return "".join(e.text for e in self.of("token"))


@dataclass
class AgentEnv:
    fake: FakeResponsesAPI
    tmp_path: Path
    db: Database
    runtimes: list[AgentRuntime] = field(default_factory=list)

    def runtime(self, extra: str = "", **kwargs: Any) -> AgentRuntime:
        kwargs.setdefault("client_factory", quick_retry_client)
        runtime = AgentRuntime(make_config(self.fake, self.tmp_path, extra), self.db, **kwargs)
        self.runtimes.append(runtime)
        return runtime

    async def rows(self, sql: str, *params: Any) -> list[tuple]:
        return list(await self.db.read().execute_fetchall(sql, params))

    async def turns(self, session_id: str) -> list[Any]:
        return await self.db.history.list_turns(session_id)


@pytest.fixture
async def agent_env(fake_responses: FakeResponsesAPI, tmp_path: Path) -> AsyncIterator[AgentEnv]:
    db = await Database.open(tmp_path / "pingu.db")
    env = AgentEnv(fake_responses, tmp_path, db)
    try:
        yield env
    finally:
        for runtime in env.runtimes:
            await runtime.close()
        await db.close()


def input_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["input"]


def compact(items: list[dict[str, Any]]) -> list[tuple]:
    """Items as (type or role, name/call_id, content) for readable order assertions."""
    out: list[tuple] = []
    for item in items:
        kind = item.get("type") or "message"
        if kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                content = "".join(c.get("text", "") for c in content)
            out.append((item.get("role"), content))
        elif kind == "function_call":
            out.append(("call", item["name"], item["call_id"]))
        elif kind == "function_call_output":
            out.append(("output", item["call_id"], item["output"]))
        else:
            out.append((kind,))
    return out


def args(call: dict[str, Any]) -> dict[str, Any]:
    return json.loads(call["arguments"])


MakeRuntime = Callable[..., AgentRuntime]
