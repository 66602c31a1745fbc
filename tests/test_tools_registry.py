"""The tool registry: schemas, argument checking and error strings from run_tool."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from pingu.agent.events import AgentEvent, AgentMessage
from pingu.config.model import BUILTIN_TOOL_NAMES
from pingu.tools.base import ToolContext, function_tool_spec
from pingu.tools.registry import ALL_TOOL_NAMES, ToolOutcome, build_tools, run_tool
from pingu.tools.schema import strict_schema_problems


def make_ctx(workspace: Path, **overrides: Any) -> tuple[ToolContext, list[AgentEvent]]:
    events: list[AgentEvent] = []

    async def emit(event: AgentEvent) -> None:
        events.append(event)

    fields: dict[str, Any] = {
        "session_id": "s1",
        "agent_name": "main",
        "workspace": workspace,
        "emit": emit,
        "delegate": None,
        "timeout_s": 30.0,
    }
    fields.update(overrides)
    return ToolContext(**fields), events


def test_all_tool_names_match_the_config_model() -> None:
    assert ALL_TOOL_NAMES == BUILTIN_TOOL_NAMES
    assert set(build_tools(ALL_TOOL_NAMES)) == set(BUILTIN_TOOL_NAMES)


def test_build_tools_selects_and_rejects_unknown() -> None:
    tools = build_tools(["shell", "file"])
    assert sorted(tools) == ["file", "shell"]
    assert tools["shell"].name == "shell"
    with pytest.raises(ValueError, match="unknown tool 'rm_rf'"):
        build_tools(["shell", "rm_rf"])


@pytest.mark.parametrize("name", BUILTIN_TOOL_NAMES)
def test_every_tool_schema_is_strict(name: str) -> None:
    tool = build_tools([name])[name]
    schema = tool.parameters
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == sorted(schema["properties"])
    assert strict_schema_problems(schema) == []
    spec = function_tool_spec(tool)
    assert spec["strict"] is True and spec["name"] == name
    assert len(tool.description) > 40  # written for the model
    json.dumps(spec)  # serialisable as sent to the API


def test_nullable_optionals() -> None:
    tools = build_tools(ALL_TOOL_NAMES)
    assert tools["shell"].parameters["properties"]["timeout_s"]["type"] == ["integer", "null"]
    assert tools["file"].parameters["properties"]["content"]["type"] == ["string", "null"]
    assert tools["file"].parameters["properties"]["action"]["enum"] == [
        "read",
        "write",
        "append",
        "list",
    ]


def test_strict_checker_finds_problems() -> None:
    loose = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "object", "properties": {}}},
        "required": ["a"],
    }
    problems = strict_schema_problems(loose)
    assert any("additionalProperties" in p for p in problems)
    assert any("required" in p for p in problems)
    assert any("parameters.b" in p for p in problems)


async def test_bad_json_quotes_the_parse_problem(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path)
    outcome = await run_tool(build_tools(["shell"]), "shell", '{"command": "ls",', ctx)
    assert outcome.is_error
    assert "not valid JSON" in outcome.output
    assert "line 1 column" in outcome.output
    assert '"command": a string' in outcome.output


async def test_unknown_tool_lists_available(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path)
    outcome = await run_tool(build_tools(["shell", "file"]), "browser", "{}", ctx)
    assert outcome == ToolOutcome(
        output="error: there is no tool named 'browser'; the available tools are: file, shell",
        is_error=True,
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"command": "ls"}', "missing required argument 'timeout_s' (an integer or null)"),
        (
            '{"command": "ls", "timeout_s": null, "cwd": "/"}',
            "unexpected argument 'cwd'; the allowed arguments are 'command', 'timeout_s'",
        ),
        ('{"command": ["ls"], "timeout_s": null}', "'command' must be a string, got an array"),
        (
            '{"command": "ls", "timeout_s": "5"}',
            "'timeout_s' must be an integer or null, got a string",
        ),
        ('{"command": "ls", "timeout_s": true}', "'timeout_s' must be an integer or null"),
        ('"ls"', "the arguments must be a JSON object, got a string"),
    ],
)
async def test_argument_errors_name_the_argument(
    tmp_path: Path, arguments: str, expected: str
) -> None:
    ctx, _ = make_ctx(tmp_path)
    outcome = await run_tool(build_tools(["shell"]), "shell", arguments, ctx)
    assert outcome.is_error
    assert outcome.output.startswith("error: invalid arguments for shell: ")
    assert expected in outcome.output


async def test_enum_violation(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path)
    args = json.dumps({"action": "delete", "path": "x", "content": None})
    outcome = await run_tool(build_tools(["file"]), "file", args, ctx)
    assert outcome.is_error
    assert "'action' must be one of 'read', 'write', 'append', 'list', got 'delete'" in (
        outcome.output
    )


async def test_integral_float_is_accepted_as_integer(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path)
    args = json.dumps({"command": "echo ok", "timeout_s": 5.0})
    outcome = await run_tool(build_tools(["shell"]), "shell", args, ctx)
    assert outcome == ToolOutcome(output="exit code: 0\nok", is_error=False)


async def test_tool_error_becomes_error_string(tmp_path: Path) -> None:
    ctx, _ = make_ctx(tmp_path)
    outcome = await run_tool(
        build_tools(["delegate"]), "delegate", '{"agent": "helper", "task": "sum 1+1"}', ctx
    )
    assert outcome == ToolOutcome(
        output="error: delegation is not available here; do the task yourself", is_error=True
    )


async def test_unexpected_exception_is_reported_and_logged(tmp_path: Path) -> None:
    async def broken_delegate(agent: str, task: str) -> str:
        raise KeyError("profile table corrupted")

    ctx, _ = make_ctx(tmp_path, delegate=broken_delegate)
    with structlog.testing.capture_logs() as logs:
        outcome = await run_tool(
            build_tools(["delegate"]), "delegate", '{"agent": "helper", "task": "x"}', ctx
        )
    assert outcome.is_error
    assert "delegate failed unexpectedly (KeyError: 'profile table corrupted')" in (outcome.output)
    assert "Traceback" not in outcome.output
    [entry] = logs
    assert entry["event"] == "tool_failed"
    assert entry["tool"] == "delegate" and entry["log_level"] == "error"
    assert isinstance(entry["exc_info"], KeyError)  # rendered as a traceback by the daemon


async def test_tool_time_limit_is_enforced(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def slow_delegate(agent: str, task: str) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    ctx, _ = make_ctx(tmp_path, delegate=slow_delegate, timeout_s=0.2)
    outcome = await run_tool(
        build_tools(["delegate"]), "delegate", '{"agent": "helper", "task": "x"}', ctx
    )
    assert started.is_set()
    assert outcome == ToolOutcome(
        output="error: delegate did not finish within the 0.2 s limit for a tool call "
        "and was stopped",
        is_error=True,
    )


async def test_cancellation_propagates(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def slow_delegate(agent: str, task: str) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    ctx, _ = make_ctx(tmp_path, delegate=slow_delegate)
    task = asyncio.create_task(
        run_tool(build_tools(["delegate"]), "delegate", '{"agent": "a", "task": "b"}', ctx)
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_message_tool_emits_agent_message(tmp_path: Path) -> None:
    ctx, events = make_ctx(tmp_path)
    outcome = await run_tool(
        build_tools(["message"]), "message", '{"text": "Working on it: step 1 of 3"}', ctx
    )
    assert outcome == ToolOutcome(output="sent", is_error=False)
    assert events == [AgentMessage("Working on it: step 1 of 3")]


async def test_message_tool_refuses_empty_text(tmp_path: Path) -> None:
    ctx, events = make_ctx(tmp_path)
    outcome = await run_tool(build_tools(["message"]), "message", '{"text": "  "}', ctx)
    assert outcome.is_error and "'text' is empty" in outcome.output
    assert events == []


async def test_delegate_returns_sub_agent_text(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []

    async def delegate(agent: str, task: str) -> str:
        calls.append((agent, task))
        return f"{agent} says: 2"

    ctx, _ = make_ctx(tmp_path, delegate=delegate)
    outcome = await run_tool(
        build_tools(["delegate"]), "delegate", '{"agent": "math", "task": "1+1?"}', ctx
    )
    assert outcome == ToolOutcome(output="math says: 2", is_error=False)
    assert calls == [("math", "1+1?")]


async def test_delegate_error_from_runtime_reaches_the_model(tmp_path: Path) -> None:
    from pingu.tools.base import ToolError

    async def delegate(agent: str, task: str) -> str:
        raise ToolError(f"unknown agent {agent!r}; the agents are: main, math")

    ctx, _ = make_ctx(tmp_path, delegate=delegate)
    outcome = await run_tool(
        build_tools(["delegate"]), "delegate", '{"agent": "nope", "task": "x"}', ctx
    )
    assert outcome == ToolOutcome(
        output="error: unknown agent 'nope'; the agents are: main, math", is_error=True
    )
