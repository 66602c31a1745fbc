"""Clock helpers for the Unix-ms columns."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def to_ms(moment: datetime | int | None) -> int | None:
    """A datetime (naive means UTC) or an int already in Unix ms, as Unix ms."""
    if moment is None:
        return None
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    if isinstance(moment, int) and not isinstance(moment, bool):
        return moment
    raise TypeError(f"expected a datetime or Unix ms, not {type(moment).__name__}")
