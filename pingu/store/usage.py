"""Token usage (`token_usage`): `db.usage`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pingu.store._time import now_ms, to_ms

if TYPE_CHECKING:
    from pingu.store.db import Database

GroupBy = Literal["model", "agent", "day"]
_QUERIES: dict[str, str] = {
    "model": "usage_totals_by_model",
    "agent": "usage_totals_by_agent",
    "day": "usage_totals_by_day",
}


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
    api_key_hash: str | None = None  # pingu.llm.pricing.api_key_hash(key), never the key
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
        await self._db.write_statement(self._q.sql("usage_insert"), params)

    async def totals_for_chat(self, chat_key: str) -> list[UsageTotal]:
        """Usage by model of every session of one chat: `chat_key` itself, the sessions
        `/new` started (`{chat_key}#N`) and sub-agent sessions (`...:delegate:...`)."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("usage_totals_for_chat"), _chat_ranges(chat_key)
        )
        return _totals(rows)

    async def chat_conversations(self, chat_key: str) -> int:
        """How many sessions (not counting sub-agents') a chat has had."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("usage_chat_conversations"), _chat_ranges(chat_key)
        )
        return int(rows[0][0]) if rows else 0

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
        return _totals(rows)


def _prefix_end(prefix: str) -> str:
    """The smallest string greater than every string starting with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _chat_ranges(chat_key: str) -> dict[str, str]:
    numbered, delegated = f"{chat_key}#", f"{chat_key}:delegate:"
    return {
        "chat_key": chat_key,
        "numbered": numbered,
        "numbered_end": _prefix_end(numbered),
        "delegated": delegated,
        "delegated_end": _prefix_end(delegated),
    }


def _totals(rows: Any) -> list[UsageTotal]:
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
