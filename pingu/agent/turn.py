"""What a caller asks of an agent run and what it gets back.

Kept apart from the runtime so that channels and the dispatcher can import these
without pulling in the model client and the tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Statuses a turn ends with (history `turns.status`, `TurnDone.status`).
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
LIMITED = "limited"


@dataclass(frozen=True)
class TurnRequest:
    """One user message for one session."""

    session_id: str
    user_message: str
    channel: str  # "telegram", "http", "cli", ...
    channel_id: str | None = None  # the chat in the channel's own terms
    agent: str | None = None  # None: the top-level agent
    inbound_ref: str | None = None  # the channel's record of the message (idempotency)


@dataclass(frozen=True)
class TurnResult:
    turn_id: int | None  # the saved turn; None only if saving it failed
    status: str  # completed, failed, cancelled or limited
    text: str  # the final answer or the short explanation of why the turn stopped
    usage: dict[str, int] = field(default_factory=dict)
