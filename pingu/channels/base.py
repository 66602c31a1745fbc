"""What the daemon expects of a channel (Telegram today; anything that brings messages in)."""

from __future__ import annotations

from typing import Any, Protocol


class Channel(Protocol):
    name: str

    async def start(self) -> None:
        """Connect, resume unfinished work, then begin taking messages."""
        ...

    async def stop_receiving(self) -> None:
        """Take no new messages. Turns already accepted keep running and their replies
        are still delivered."""
        ...

    async def close(self) -> None:
        """After the dispatcher has drained: finish deliveries, release connections."""
        ...

    def status(self) -> dict[str, Any]:
        """A small JSON-able summary for /healthz."""
        ...
