"""The contract between the agent loop and its tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pingu.agent.events import EventSink


class ToolError(Exception):
    """A failure the model should read and can act on (bad path, timeout, ...).

    The loop turns it into the tool's output text; it never ends the turn."""


# delegate(agent_name, task) -> the sub-agent's final text
DelegateFn = Callable[[str, str], Awaitable[str]]


@dataclass(frozen=True)
class ToolContext:
    session_id: str
    agent_name: str
    workspace: Path  # the agent's workspace directory (exists)
    emit: EventSink  # send events to the user (the `message` tool uses it)
    delegate: DelegateFn | None  # None where delegation is not available
    timeout_s: float  # the per-tool bound from the agent's limits


class Tool(Protocol):
    name: str
    description: str
    # A strict JSON schema: type object, every property listed in `required`,
    # additionalProperties false (optional values are typed ["x", "null"]).
    parameters: dict[str, Any]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Do the work and return the text the model reads. Raise ToolError for
        failures the model should see; anything else is a bug, reported as one."""
        ...


def function_tool_spec(tool: Tool) -> dict[str, Any]:
    """The Responses API `tools` entry for a tool."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": True,
    }
