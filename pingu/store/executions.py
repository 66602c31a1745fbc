"""Agent runs (`agent_executions`): `db.executions`."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pingu.store._time import now_ms

if TYPE_CHECKING:
    from pingu.store.db import Database

EXECUTION_STATUSES = ("pending", "running", "completed", "failed", "retrying")
INTERRUPTED_ERROR = "interrupted by restart"


@dataclass(frozen=True)
class ExecutionRow:
    id: str
    session_id: str
    agent_name: str
    parent_id: str | None
    status: str
    input: dict[str, Any]
    output: dict[str, Any] | None
    error: str | None
    retry_count: int
    started_at: int  # Unix ms
    completed_at: int | None  # Unix ms


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _row(row: Any) -> ExecutionRow:
    (id_, session_id, agent, parent, status, input_, output, error, retries, started, done) = row
    return ExecutionRow(
        id_, session_id, agent, parent, status, _loads(input_), _loads(output), error, retries,
        started, done,
    )  # fmt: skip


class ExecutionRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._q = db.queries

    async def start(
        self,
        session_id: str,
        agent_name: str,
        input: dict[str, Any],
        parent_id: str | None = None,
    ) -> str:
        """Record a run as `running`; return its id."""
        execution_id = uuid.uuid4().hex
        params = {
            "id": execution_id,
            "session_id": session_id,
            "agent_name": agent_name,
            "parent_id": parent_id,
            "input": json.dumps(input, ensure_ascii=False),
            "started_at": now_ms(),
        }
        await self._db.write_statement(self._q.sql("executions_insert"), params)
        return execution_id

    async def finish(
        self,
        execution_id: str,
        status: str,
        output: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        if status not in EXECUTION_STATUSES:
            raise ValueError(f"execution status must be one of {EXECUTION_STATUSES}: {status!r}")
        params = {
            "id": execution_id,
            "status": status,
            "output": None if output is None else json.dumps(output, ensure_ascii=False),
            "error": error,
            "completed_at": now_ms(),
        }
        await self._db.write_statement(self._q.sql("executions_finish"), params)

    async def set_retrying(self, execution_id: str, retry_count: int) -> None:
        await self._db.write_statement(
            self._q.sql("executions_set_retrying"),
            {"id": execution_id, "retry_count": retry_count},
        )

    async def set_running(self, execution_id: str) -> None:
        """Back to running after a retried call succeeded (no-op unless retrying)."""
        await self._db.write_statement(self._q.sql("executions_set_running"), {"id": execution_id})

    async def mark_interrupted(self) -> int:
        """At startup: runs left pending/running/retrying by a previous process -> failed."""
        params = {"error": INTERRUPTED_ERROR, "completed_at": now_ms()}
        async with self._db.transaction() as conn:
            cursor = await conn.execute(self._q.sql("executions_mark_interrupted"), params)
            count = cursor.rowcount
            await cursor.close()
        return count

    async def get(self, execution_id: str) -> ExecutionRow | None:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("executions_get"), {"id": execution_id}
        )
        return _row(rows[0]) if rows else None

    async def list_for_session(self, session_id: str) -> list[ExecutionRow]:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("executions_list_for_session"), {"session_id": session_id}
        )
        return [_row(r) for r in rows]
