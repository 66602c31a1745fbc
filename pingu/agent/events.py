"""Events an agent run sends back to whoever asked (a channel, the HTTP API, the terminal).

The agent knows nothing of Telegram or SSE: it calls an `EventSink` with these and the
caller renders them. A sink must not raise; a slow sink slows only its own turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TextDelta:
    """A piece of the model's answer text, as it streams."""

    text: str
    kind: str = "token"


@dataclass(frozen=True)
class ToolCallStarted:
    call_id: str
    name: str
    arguments: str  # the JSON string the model sent
    kind: str = "tool_call"


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    output: str
    is_error: bool = False
    kind: str = "tool_result"


@dataclass(frozen=True)
class AgentMessage:
    """Text the agent sent with the `message` tool: deliver it to the user now."""

    text: str
    kind: str = "message"


@dataclass(frozen=True)
class TurnDone:
    """The turn ended. `text` is the complete final answer (or the short explanation of
    why it stopped); `status` is completed, failed, cancelled or limited."""

    text: str
    status: str
    turn_id: int | None
    usage: dict[str, int] = field(default_factory=dict)
    kind: str = "done"


@dataclass(frozen=True)
class TurnError:
    """A short, user-facing description of what went wrong (no traceback, no secrets)."""

    message: str
    kind: str = "error"


AgentEvent = TextDelta | ToolCallStarted | ToolResult | AgentMessage | TurnDone | TurnError
EventSink = Callable[[AgentEvent], Awaitable[None]]


async def discard_events(event: AgentEvent) -> None:
    """A sink for callers that only want the result."""
