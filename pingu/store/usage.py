"""Token usage (`token_usage`): `db.usage`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pingu.store._time import now_ms, to_ms

if TYPE_CHECKING:
    from pingu.store.db import Database

GroupBy = Literal["model", "agent", "day"]
_QUERIES: dict[str, str] = {
    "model": "usage_totals_by_model",
    "agent": "usage_totals_by_agent",
    "day": "usage_totals_by_day",
}


def hash_api_key(api_key: str) -> str:
    """What the database keeps of an API key: its SHA-256, hex."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class UsageRecord:
    """The tokens of one model call."""

    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int | None = None  # None: input + output
    cost_estimate: float | None = None  # USD; None when the price is unknown
    session_id: str | None = None
    agent_name: str | None = None
    execution_id: str | None = None
    api_key_hash: str | None = None  # hash_api_key(key), never the key
    created_at: int | None = None  # Unix ms; None: now


@dataclass(frozen=True)
class UsageTotal:
    key: str  # the model, the agent name, or the UTC day (YYYY-MM-DD)
    calls: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int
    cost_estimate: float | None  # None when no call of the group had a price
    unpriced_calls: int  # calls whose cost is unknown (not counted in cost_estimate)


class UsageRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._q = db.queries

    async def record(self, record: UsageRecord) -> None:
        total = record.total_tokens
        if total is None:
            total = record.input_tokens + record.output_tokens
        params = {
            "execution_id": record.execution_id,
            "session_id": record.session_id,
            "agent_name": record.agent_name,
            "provider": record.provider,
            "model": record.model,
            "api_key_hash": record.api_key_hash,
            "input_tokens": record.input_tokens,
            "cached_input_tokens": record.cached_input_tokens,
            "output_tokens": record.output_tokens,
            "reasoning_tokens": record.reasoning_tokens,
            "total_tokens": total,
            "cost_estimate": record.cost_estimate,
            "created_at": record.created_at if record.created_at is not None else now_ms(),
        }
        async with self._db.transaction() as conn:
            await conn.execute_fetchall(self._q.sql("usage_insert"), params)

    async def totals(
        self,
        session_id: str | None = None,
        since: datetime | int | None = None,
        by: GroupBy | None = None,
        *,
        group_by: GroupBy | None = None,
    ) -> list[UsageTotal]:
        """Usage summed per model, agent or UTC day (`by`, alias `group_by`; default model),
        over one session or all, since a moment (datetime, or Unix ms) or all time."""
        grouping = by or group_by or "model"
        if grouping not in _QUERIES:
            raise ValueError(f"usage can be grouped by model, agent or day, not {grouping!r}")
        params = {"session_id": session_id, "since": to_ms(since)}
        rows = await self._db.read().execute_fetchall(self._q.sql(_QUERIES[grouping]), params)
        return [
            UsageTotal(
                key=key,
                calls=calls,
                input_tokens=inp or 0,
                cached_input_tokens=cached or 0,
                output_tokens=out or 0,
                reasoning_tokens=reasoning or 0,
                total_tokens=total or 0,
                cost_estimate=cost if priced else None,
                unpriced_calls=calls - priced,
            )
            for key, calls, inp, cached, out, reasoning, total, cost, priced in rows
        ]
