"""Sessions and their turns, and the input history rebuilt from them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pingu.history.items import (
    decode_turn,
    encode_turn,
    reply_text,
    turn_input_items,
    user_input_item,
)
from pingu.store.errors import DuplicateTurnError

if TYPE_CHECKING:
    from pingu.store.db import Database

TURN_STATUSES = ("completed", "failed", "cancelled", "limited")


@dataclass(frozen=True)
class SessionRow:
    id: str
    channel: str
    channel_id: str | None
    title: str | None
    model: str | None
    summary: str | None
    summary_up_to: int | None
    created_at: str
    updated_at: str
    turn_count: int = 0


@dataclass(frozen=True)
class TurnRow:
    id: int
    session_id: str
    user_message: str
    items: list[Any] = field(repr=False)
    responses: list[Any] = field(repr=False)
    model: str | None
    status: str
    error: str | None
    agent: str | None
    inbound_ref: str | None
    created_at: str

    @property
    def reply_text(self) -> str:
        """The text of the turn's last assistant message."""
        return reply_text(self.items)


def _session(row: sqlite3.Row | tuple) -> SessionRow:
    return SessionRow(*row)


def _turn(row: sqlite3.Row | tuple) -> TurnRow:
    (turn_id, session_id, user_message, response_json, model, status, error, agent, ref, at) = row
    items, responses = decode_turn(response_json)
    return TurnRow(
        id=turn_id,
        session_id=session_id,
        user_message=user_message,
        items=items,
        responses=responses,
        model=model,
        status=status,
        error=error,
        agent=agent,
        inbound_ref=ref,
        created_at=str(at),
    )


class HistoryStore:
    """Turn history on a `Database`: `db.history`."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._q = db.queries

    async def ensure_session(
        self,
        session_id: str,
        channel: str,
        channel_id: str | None = None,
        *,
        model: str | None = None,
        title: str | None = None,
    ) -> None:
        """Create the session, or touch its updated_at."""
        params = {
            "id": session_id,
            "channel": channel,
            "channel_id": channel_id,
            "title": title,
            "model": model,
        }
        async with self._db.transaction() as conn:
            await conn.execute_fetchall(self._q.sql("history_ensure_session"), params)

    async def save_turn(
        self,
        session_id: str,
        user_message: str,
        items: Sequence[Mapping[str, Any]],
        *,
        model: str | None,
        responses: Iterable[Mapping[str, Any]] = (),
        status: str = "completed",
        error: str | None = None,
        inbound_ref: str | None = None,
        agent: str | None = None,
    ) -> int:
        """Store one turn in one transaction and touch its session (created, with the
        channel taken from the id's prefix before ':', if it does not exist); return the
        turn id.

        `items`: every output item of every model call of the turn and every
        `function_call_output`, in order, as plain dicts with API field names.
        `responses`: per model call `{id, model, status, usage}`.
        Raises `DuplicateTurnError` if a turn with this `inbound_ref` exists.
        """
        if not isinstance(user_message, str):
            raise TypeError(f"user_message must be a str, not {type(user_message).__name__}")
        if status not in TURN_STATUSES:
            raise ValueError(f"turn status must be one of {', '.join(TURN_STATUSES)}: {status!r}")
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise TypeError(f"turn item {index} must be a dict, not {type(item).__name__}")
        response_json = encode_turn([dict(i) for i in items], [dict(r) for r in responses])
        turn = {
            "session_id": session_id,
            "user_message": user_message,
            "response_json": response_json,
            "model": model,
            "status": status,
            "error": error,
            "agent": agent,
            "inbound_ref": inbound_ref,
        }
        try:
            # One INSERT, one transaction: a trigger creates or touches the session.
            return await self._db.write_statement(self._q.sql("history_insert_turn"), turn)
        except sqlite3.IntegrityError as exc:
            if inbound_ref is not None and "inbound_ref" in str(exc):
                raise DuplicateTurnError(inbound_ref) from exc
            raise

    async def load_input_history(self, session_id: str) -> list[dict]:
        """The Responses API input items for the next request of this session: for each
        turn in order, the user message, then its stored items converted to input items."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("history_input_rows"), {"session_id": session_id}
        )
        history: list[dict] = []
        for user_message, response_json, _status in rows:
            history.append(user_input_item(user_message))
            items, _ = decode_turn(response_json)
            history.extend(turn_input_items(items))
        return history

    async def get_session(self, session_id: str) -> SessionRow | None:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("history_get_session"), {"id": session_id}
        )
        return _session(rows[0]) if rows else None

    async def list_sessions(self, limit: int = 1000) -> list[SessionRow]:
        """Sessions, most recently active first."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("history_list_sessions"), {"limit": limit}
        )
        return [_session(r) for r in rows]

    async def list_turns(self, session_id: str) -> list[TurnRow]:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("history_list_turns"), {"session_id": session_id}
        )
        return [_turn(r) for r in rows]

    async def count_turns(self, session_id: str) -> int:
        rows = await self._db.read().execute_fetchall(
            self._q.sql("history_count_turns"), {"session_id": session_id}
        )
        return int(rows[0][0])

    async def turn_for_inbound(self, inbound_ref: str) -> TurnRow | None:
        """The turn an inbound update caused, if it was saved."""
        rows = await self._db.read().execute_fetchall(
            self._q.sql("history_turn_for_inbound"), {"inbound_ref": inbound_ref}
        )
        return _turn(rows[0]) if rows else None
