"""The inbound update ledger and each chat's current session: `db.inbound`.

A channel records an update before it acts on it (`accept`), notes what it has sent
(`set_reply_message`, `set_chunks_sent`) and closes it (`mark_done`); after a restart,
`unfinished` lists what still has to be finished, in update order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pingu.store._time import now_ms

if TYPE_CHECKING:
    from pingu.store.db import Database

FINAL_STATUSES = ("done", "failed", "ignored")
_NUMBERED = re.compile(r"^(?P<base>.*)#(?P<n>\d+)$")


@dataclass(frozen=True)
class InboundRow:
    channel: str
    update_id: int
    chat_key: str
    payload: dict[str, Any]
    status: str  # pending, done, failed, ignored
    reply_message_id: int | None
    chunks_sent: int
    attempts: int
    created_at: int  # Unix ms
    updated_at: int  # Unix ms

    @property
    def ref(self) -> str:
        """The turn's `inbound_ref`: '{channel}:{update_id}'."""
        return f"{self.channel}:{self.update_id}"


def _row(row: Any) -> InboundRow:
    channel, update_id, chat_key, payload, status, reply, chunks, attempts, created, updated = row
    return InboundRow(
        channel, update_id, chat_key, json.loads(payload), status, reply, chunks, attempts,
        created, updated,
    )  # fmt: skip


class InboundRepository:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._q = db.queries

    async def _write(self, name: str, params: dict[str, Any]) -> None:
        # One statement is atomic on its own: one round trip to the writer thread
        # instead of BEGIN, the statement, closing its cursor and COMMIT.
        await self._db.write_statement(self._q.sql(name), params)

    async def accept(
        self, channel: str, update_id: int, chat_key: str, payload: dict[str, Any]
    ) -> bool:
        """Record a new update as pending; False if it was already recorded."""
        return update_id in await self._accept_rows([(update_id, chat_key, payload)], channel)

    async def accept_many(
        self, channel: str, updates: Sequence[tuple[int, str, dict[str, Any]]]
    ) -> set[int]:
        """Record a batch of `(update_id, chat_key, payload)` as pending in one
        transaction; return the update_ids that were new (not recorded before)."""
        if not updates:
            return set()
        return await self._accept_rows(updates, channel)

    async def _accept_rows(
        self, updates: Sequence[tuple[int, str, dict[str, Any]]], channel: str
    ) -> set[int]:
        batch = [
            # The payload goes in as JSON text. ASCII-only: a lone surrogate ("\ud800",
            # valid in JSON, not in UTF-8) stays an escape instead of failing SQLite's
            # UTF-8 bind, which made the whole batch unstorable.
            {"update_id": u, "chat_key": k, "payload": json.dumps(p, ensure_ascii=True)}
            for u, k, p in updates
        ]
        params = {
            "channel": channel,
            "batch": json.dumps(batch, ensure_ascii=False),
            "now": now_ms(),
        }
        rows = await self._db.write_returning(self._q.sql("inbound_accept_batch"), params)
        return {int(row[0]) for row in rows}

    async def accept_unrecordable(
        self, channel: str, update_id: int, chat_key: str, reason: str
    ) -> None:
        """Record an update whose payload cannot be stored as closed ('ignored'), with a
        minimal payload, so that it counts as recorded (`max_update_id`) and is never
        handled. Raises if even that cannot be written (the database is failing)."""
        payload = json.dumps({"update_id": update_id, "unrecordable": reason}, ensure_ascii=True)
        params = {
            "channel": channel,
            "update_id": update_id,
            "chat_key": chat_key.encode("utf-8", "replace").decode("utf-8"),
            "payload": payload,
            "now": now_ms(),
        }
        await self._write("inbound_accept_unrecordable", params)

    async def set_reply_message(self, channel: str, update_id: int, message_id: int) -> None:
        params = {
            "channel": channel,
            "update_id": update_id,
            "message_id": message_id,
            "now": now_ms(),
        }
        await self._write("inbound_set_reply_message", params)

    async def set_chunks_sent(self, channel: str, update_id: int, chunks_sent: int) -> None:
        params = {
            "channel": channel,
            "update_id": update_id,
            "chunks_sent": chunks_sent,
            "now": now_ms(),
        }
        await self._write("inbound_set_chunks_sent", params)

    async def add_attempt(self, channel: str, update_id: int) -> int:
        """Count one more attempt at handling the update; return the new count."""
        params = {"channel": channel, "update_id": update_id, "now": now_ms()}
        async with self._db.transaction() as conn:
            rows = await conn.execute_fetchall(self._q.sql("inbound_add_attempt"), params)
        return int(rows[0][0]) if rows else 0

    async def mark_done(self, channel: str, update_id: int, status: str = "done") -> None:
        if status not in FINAL_STATUSES:
            raise ValueError(f"an update ends as one of {FINAL_STATUSES}, not {status!r}")
        params = {"channel": channel, "update_id": update_id, "status": status, "now": now_ms()}
        await self._write("inbound_mark_done", params)

    async def get(self, channel: str, update_id: int) -> InboundRow | None:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("inbound_get"), {"channel": channel, "update_id": update_id}
        )
        return _row(rows[0]) if rows else None

    async def unfinished(self, channel: str) -> list[InboundRow]:
        """Updates still pending, in update_id order."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("inbound_unfinished"), {"channel": channel}
        )
        return [_row(r) for r in rows]

    async def max_update_id(self, channel: str) -> int | None:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("inbound_max_update_id"), {"channel": channel}
        )
        return rows[0][0] if rows else None

    async def current_session(self, chat_key: str) -> str:
        """The session a chat talks to now: the chat_key itself until `/new` was used."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("inbound_current_session"), {"chat_key": chat_key}
        )
        return rows[0][0] if rows else chat_key

    async def start_new_session(
        self, chat_key: str, *, channel: str | None = None, update_id: int | None = None
    ) -> str:
        """Point the chat at a fresh session ('{chat_key}#2', '#3', ...); return its id.
        The old session and its turns stay.

        With the `/new` update's `channel` and `update_id`, the new session is recorded in
        its ledger row in the same transaction, and a second call for the same update
        (resumed after a crash) returns that session without moving the chat again."""
        ledger = {"channel": channel, "update_id": update_id}
        async with self._db.transaction() as conn:
            if update_id is not None:
                done = await conn.execute_fetchall(self._q.sql("inbound_new_session"), ledger)
                if done and done[0][0]:
                    return str(done[0][0])
            rows = await conn.execute_fetchall(
                self._q.sql("inbound_current_session"), {"chat_key": chat_key}
            )
            current = rows[0][0] if rows else chat_key
            match = _NUMBERED.match(current)
            number = int(match.group("n")) + 1 if match and current != chat_key else 2
            session_id = f"{chat_key}#{number}"
            await conn.execute_fetchall(
                self._q.sql("inbound_set_current_session"),
                {"chat_key": chat_key, "session_id": session_id, "now": now_ms()},
            )
            if update_id is not None:
                await conn.execute_fetchall(
                    self._q.sql("inbound_set_new_session"),
                    {**ledger, "session_id": session_id, "now": now_ms()},
                )
        return session_id
