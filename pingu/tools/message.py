"""The `message` tool: send the user a message now, before the final answer."""

from __future__ import annotations

from typing import Any

from pingu.agent.events import AgentMessage
from pingu.tools.base import ToolContext, ToolError

MAX_MESSAGE_CHARS = 4000


class MessageTool:
    name = "message"
    description = (
        "Send a short message to the user right away, while you keep working (progress "
        "updates, a question that does not block you). Your final answer is delivered "
        f"anyway; do not repeat it here. At most {MAX_MESSAGE_CHARS} characters."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 - the Tool protocol wants a plain attribute
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The message text."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        text: str = args["text"]
        if not text.strip():
            raise ToolError("'text' is empty")
        if len(text) > MAX_MESSAGE_CHARS:
            raise ToolError(f"'text' is {len(text)} characters; the limit is {MAX_MESSAGE_CHARS}")
        await ctx.emit(AgentMessage(text))
        return "sent"
