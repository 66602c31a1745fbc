"""The `delegate` tool: hand a task to another agent profile and return its answer.

The agent runtime does the work (a sub-agent turn with its own tools and limits) through
`ToolContext.delegate`; this tool checks the arguments and bounds what comes back.
"""

from __future__ import annotations

from typing import Any

from pingu.tools.base import ToolContext, ToolError

OUTPUT_CAP_CHARS = 50_000


class DelegateTool:
    name = "delegate"
    description = (
        "Give a task to another agent (a named agent profile) and wait for its final answer, "
        "which is returned as text. The sub-agent does not see this conversation: put "
        "everything it needs into `task`. Use it for self-contained pieces of work."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 - the Tool protocol wants a plain attribute
        "type": "object",
        "properties": {
            "agent": {"type": "string", "description": "The name of the agent profile."},
            "task": {
                "type": "string",
                "description": "The complete task description for the sub-agent.",
            },
        },
        "required": ["agent", "task"],
        "additionalProperties": False,
    }

    def __init__(self, *, output_cap_chars: int = OUTPUT_CAP_CHARS) -> None:
        self.output_cap_chars = output_cap_chars

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        agent = args["agent"].strip()
        task = args["task"].strip()
        if ctx.delegate is None:
            raise ToolError("delegation is not available here; do the task yourself")
        if not agent:
            raise ToolError("'agent' is empty; name an agent profile")
        if not task:
            raise ToolError("'task' is empty; describe what the sub-agent should do")
        text = await ctx.delegate(agent, task)
        if not text:
            return f"(agent {agent} finished without any text)"
        if len(text) > self.output_cap_chars:
            omitted = len(text) - self.output_cap_chars
            text = (
                text[: self.output_cap_chars] + f"\n[... truncated: {omitted} more characters ...]"
            )
        return text
