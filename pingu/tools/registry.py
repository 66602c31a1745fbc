"""Building the tool set of an agent and running one tool call safely.

`run_tool` is the only way the agent loop calls a tool: whatever the model sends (bad
JSON, an unknown tool, arguments that do not fit the schema) and however the tool fails,
the model gets an error string it can act on and the turn goes on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import structlog

from pingu.tools.base import Tool, ToolContext, ToolError
from pingu.tools.delegate import DelegateTool
from pingu.tools.file import FileTool
from pingu.tools.message import MessageTool
from pingu.tools.schema import ArgumentError, describe, validate_arguments
from pingu.tools.shell import ShellTool
from pingu.tools.web_fetch import WebFetchTool

log = structlog.get_logger("pingu.tools")

_FACTORIES: dict[str, Callable[[], Tool]] = {
    "message": MessageTool,
    "shell": ShellTool,
    "file": FileTool,
    "web_fetch": WebFetchTool,
    "delegate": DelegateTool,
}
ALL_TOOL_NAMES: tuple[str, ...] = tuple(_FACTORIES)

# A tool that bounds its own time (and then cleans up, e.g. kills a process group) may set
# `timeout_grace_s`: run_tool waits that much longer than ctx.timeout_s before stopping it,
# so the tool's own, more informative timeout report wins.
_DEFAULT_GRACE_S = 0.0
_MAX_ERROR_DETAIL_CHARS = 300


@dataclass(frozen=True)
class ToolOutcome:
    output: str  # what the model reads as the function_call_output
    is_error: bool


def build_tools(names: Iterable[str]) -> dict[str, Tool]:
    """Fresh instances of the named built-in tools, by name. Raises ValueError for an
    unknown name."""
    tools: dict[str, Tool] = {}
    for name in names:
        factory = _FACTORIES.get(name)
        if factory is None:
            known = ", ".join(ALL_TOOL_NAMES)
            raise ValueError(f"unknown tool {name!r}; the built-in tools are {known}")
        tools.setdefault(name, factory())
    return tools


def _signature(tool: Tool) -> str:
    properties = tool.parameters.get("properties", {})
    fields = ", ".join(f'"{key}": {describe(spec)}' for key, spec in properties.items())
    return "{" + fields + "}"


def _error(text: str) -> ToolOutcome:
    return ToolOutcome(output=f"error: {text}", is_error=True)


async def run_tool(
    tools: Mapping[str, Tool], name: str, arguments_json: str, ctx: ToolContext
) -> ToolOutcome:
    """Run one tool call. Never raises, except CancelledError (the turn is being cancelled;
    the tool has cleaned up, e.g. killed its processes, before it propagates)."""
    tool = tools.get(name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        return _error(f"there is no tool named {name!r}; the available tools are: {available}")

    try:
        arguments = json.loads(arguments_json) if arguments_json.strip() else {}
    except json.JSONDecodeError as exc:
        return _error(
            f"the arguments for {name} are not valid JSON ({exc.msg} at line {exc.lineno} "
            f"column {exc.colno}); send one JSON object like {_signature(tool)}"
        )
    try:
        arguments = validate_arguments(tool.parameters, arguments)
    except ArgumentError as exc:
        return _error(f"invalid arguments for {name}: {exc}. Expected {_signature(tool)}")

    grace_s = float(getattr(tool, "timeout_grace_s", _DEFAULT_GRACE_S))
    try:
        async with asyncio.timeout(ctx.timeout_s + grace_s) as deadline:
            output = await tool.run(arguments, ctx)
    except ToolError as exc:
        return _error(str(exc) or "the tool failed")
    except TimeoutError:
        if deadline.expired():
            return _error(
                f"{name} did not finish within the {ctx.timeout_s:g} s limit for a tool call "
                "and was stopped"
            )
        return _unexpected(name, ctx, TimeoutError("timed out"))
    except Exception as exc:
        return _unexpected(name, ctx, exc)
    if not isinstance(output, str):
        return _unexpected(name, ctx, TypeError(f"returned {type(output).__name__}, not str"))
    return ToolOutcome(output=output, is_error=False)


def _unexpected(name: str, ctx: ToolContext, exc: BaseException) -> ToolOutcome:
    log.error(
        "tool_failed",
        tool=name,
        session_id=ctx.session_id,
        agent=ctx.agent_name,
        error_type=type(exc).__name__,
        exc_info=exc,
    )
    detail = str(exc)
    if len(detail) > _MAX_ERROR_DETAIL_CHARS:
        detail = detail[:_MAX_ERROR_DETAIL_CHARS] + "..."
    text = type(exc).__name__ + (f": {detail}" if detail else "")
    return _error(
        f"{name} failed unexpectedly ({text}). This is a fault in the tool, not in your "
        "arguments; try another way or tell the user"
    )
