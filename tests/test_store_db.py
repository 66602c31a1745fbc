"""The Database: pragmas, the single writer, transactions, and the small repositories."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pingu.llm.pricing import api_key_hash
from pingu.store import Database, DuplicateTurnError, StoreError, UsageRecord


@pytest.fixture
async def db(tmp_path: Path):
    database = await Database.open(tmp_path / "pingu.db")
    yield database
    await database.close()


async def _pragma(conn, name: str):
    rows = await conn.execute_fetchall(f"PRAGMA {name}")
    return rows[0][0]


async def test_pragmas_on_both_connections(db: Database) -> None:
    async with db.transaction() as writer:
        assert await _pragma(writer, "foreign_keys") == 1
        assert await _pragma(writer, "busy_timeout") == 5000
        assert await _pragma(writer, "synchronous") == 1  # NORMAL
    reader = db.read()
    assert await _pragma(reader, "journal_mode") == "wal"
    assert await _pragma(reader, "foreign_keys") == 1
    assert await _pragma(reader, "busy_timeout") == 5000
    assert (db.path.parent / "pingu.db-wal").exists()


async def test_transaction_rolls_back_on_error(db: Database) -> None:
    await db.history.ensure_session("s:1", "s")
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await conn.execute_fetchall("UPDATE sessions SET title = 'changed' WHERE id = 's:1'")
            raise RuntimeError("boom")
    session = await db.history.get_session("s:1")
    assert session is not None and session.title is None
    # the writer is usable again
    async with db.transaction() as conn:
        await conn.execute_fetchall("UPDATE sessions SET title = 'ok' WHERE id = 's:1'")
    assert (await db.history.get_session("s:1")).title == "ok"


async def test_foreign_keys_are_enforced(db: Database) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        async with db.transaction() as conn:
            await conn.execute_fetchall(
                "INSERT INTO agent_executions (id, session_id, agent_name, parent_id, status, "
                "input, started_at) VALUES ('e1', 's', 'main', 'nobody', 'running', '{}', 0)"
            )


async def test_cancelled_writer_leaves_no_open_transaction(db: Database) -> None:
    entered = asyncio.Event()

    async def slow_write() -> None:
        async with db.transaction() as conn:
            await conn.execute_fetchall("INSERT INTO sessions (id, channel) VALUES ('c:1', 'c')")
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(slow_write())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await db.history.get_session("c:1") is None
    await db.history.ensure_session("c:2", "c")
    assert await db.history.get_session("c:2") is not None


async def test_closed_database_refuses_work(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "x.db")
    await database.close()
    await database.close()  # idempotent
    with pytest.raises(StoreError):
        async with database.transaction():
            pass


async def test_executions_lifecycle(db: Database) -> None:
    parent = await db.executions.start("telegram:1", "main", {"message": "hi"}, None)
    child = await db.executions.start("telegram:1:delegate:sys", "sys", {"task": "x"}, parent)
    row = await db.executions.get(child)
    assert row is not None
    assert (row.status, row.parent_id, row.input, row.completed_at) == (
        "running", parent, {"task": "x"}, None,
    )  # fmt: skip
    await db.executions.set_retrying(child, 2)
    assert (await db.executions.get(child)).retry_count == 2
    await db.executions.finish(parent, "completed", {"text": "done"}, None)
    row = await db.executions.get(parent)
    assert row.status == "completed" and row.output == {"text": "done"}
    assert row.completed_at >= row.started_at

    # a restart: whatever was still running is failed
    assert await db.executions.mark_interrupted() == 1
    row = await db.executions.get(child)
    assert (row.status, row.error) == ("failed", "interrupted by restart")
    assert [r.id for r in await db.executions.list_for_session("telegram:1")] == [parent]
    with pytest.raises(ValueError):
        await db.executions.finish(parent, "exploded")
    assert await db.executions.get("missing") is None


async def test_usage_totals(db: Database) -> None:
    day1 = int(datetime(2026, 1, 1, 12, tzinfo=UTC).timestamp() * 1000)
    day2 = int(datetime(2026, 1, 2, 12, tzinfo=UTC).timestamp() * 1000)
    key_hash = api_key_hash("sk-secret")
    records = [
        UsageRecord("openai", "gpt-a", 100, 10, cached_input_tokens=40, session_id="s:1",
                    agent_name="main", cost_estimate=0.5, api_key_hash=key_hash,
                    created_at=day1),
        UsageRecord("openai", "gpt-a", 200, 20, reasoning_tokens=5, session_id="s:2",
                    agent_name="sys", cost_estimate=None, created_at=day2),
        UsageRecord("openai", "gpt-b", 1, 2, total_tokens=3, session_id="s:1",
                    agent_name="main", cost_estimate=0.25, created_at=day2),
    ]  # fmt: skip
    for record in records:
        await db.usage.record(record)

    by_model = {t.key: t for t in await db.usage.totals()}
    assert set(by_model) == {"gpt-a", "gpt-b"}
    a = by_model["gpt-a"]
    assert (a.calls, a.input_tokens, a.cached_input_tokens, a.output_tokens) == (2, 300, 40, 30)
    assert (a.reasoning_tokens, a.total_tokens, a.cost_estimate, a.unpriced_calls) == (
        5, 330, 0.5, 1,
    )  # fmt: skip

    by_agent = {t.key: t.total_tokens for t in await db.usage.totals(by="agent")}
    assert by_agent == {"main": 113, "sys": 220}
    by_day = {t.key: t.calls for t in await db.usage.totals(group_by="day")}
    assert by_day == {"2026-01-01": 1, "2026-01-02": 2}

    session = await db.usage.totals(session_id="s:1", by="model")
    assert [(t.key, t.calls) for t in session] == [("gpt-a", 1), ("gpt-b", 1)]
    since = await db.usage.totals(since=datetime(2026, 1, 2, tzinfo=UTC))
    assert [(t.key, t.calls) for t in since] == [("gpt-a", 1), ("gpt-b", 1)]
    assert [t.cost_estimate for t in since] == [None, 0.25]
    with pytest.raises(ValueError):
        await db.usage.totals(by="week")  # type: ignore[arg-type]

    # the key itself is nowhere in the database
    raw = (db.path).read_bytes() + (db.path.parent / "pingu.db-wal").read_bytes()
    assert b"sk-secret" not in raw


async def test_inbound_ledger(db: Database) -> None:
    assert await db.inbound.accept("telegram", 11, "telegram:5", {"update_id": 11}) is True
    assert await db.inbound.accept("telegram", 11, "telegram:5", {"update_id": 11}) is False
    assert await db.inbound.accept("telegram", 10, "telegram:5", {"update_id": 10}) is True
    assert await db.inbound.accept("other", 10, "other:1", {}) is True
    assert await db.inbound.max_update_id("telegram") == 11
    assert await db.inbound.max_update_id("nothing") is None

    await db.inbound.set_reply_message("telegram", 11, 777)
    await db.inbound.set_chunks_sent("telegram", 11, 2)
    assert await db.inbound.add_attempt("telegram", 11) == 1
    assert await db.inbound.add_attempt("telegram", 11) == 2
    row = await db.inbound.get("telegram", 11)
    assert row is not None
    assert (row.reply_message_id, row.chunks_sent, row.attempts, row.status) == (
        777, 2, 2, "pending",
    )  # fmt: skip
    assert row.payload == {"update_id": 11} and row.ref == "telegram:11"

    assert [r.update_id for r in await db.inbound.unfinished("telegram")] == [10, 11]
    await db.inbound.mark_done("telegram", 10)
    await db.inbound.mark_done("telegram", 11, "ignored")
    assert await db.inbound.unfinished("telegram") == []
    assert [r.update_id for r in await db.inbound.unfinished("other")] == [10]
    with pytest.raises(ValueError):
        await db.inbound.mark_done("telegram", 11, "pending")


async def test_channel_sessions(db: Database) -> None:
    assert await db.inbound.current_session("telegram:5") == "telegram:5"
    assert await db.inbound.start_new_session("telegram:5") == "telegram:5#2"
    assert await db.inbound.current_session("telegram:5") == "telegram:5#2"
    assert await db.inbound.start_new_session("telegram:5") == "telegram:5#3"
    assert await db.inbound.current_session("telegram:6") == "telegram:6"


async def test_concurrent_writes_are_each_durable_when_they_return(db: Database) -> None:
    reader = db.read()

    async def save(n: int) -> None:
        turn_id = await db.history.save_turn(f"s:{n % 7}", f"message {n}", [], model="m")
        # Group commit: by the time save_turn returns, its batch has committed.
        rows = await reader.execute_fetchall(
            "SELECT user_message FROM turns WHERE id = ?", (turn_id,)
        )
        assert [tuple(r) for r in rows] == [(f"message {n}",)]

    await asyncio.gather(*(save(n) for n in range(300)))
    [(count,)] = await reader.execute_fetchall("SELECT count(*) FROM turns")
    assert count == 300


async def test_a_failing_write_fails_alone_and_its_batch_commits(db: Database) -> None:
    await db.history.save_turn("s:1", "first", [], model="m", inbound_ref="telegram:1")
    results = await asyncio.gather(
        db.history.save_turn("s:1", "before", [], model="m"),
        db.history.save_turn("s:1", "again", [], model="m", inbound_ref="telegram:1"),
        db.history.save_turn("s:1", "after", [], model="m"),
        return_exceptions=True,
    )
    assert isinstance(results[1], DuplicateTurnError)
    assert all(isinstance(r, int) for r in (results[0], results[2]))
    turns = await db.history.list_turns("s:1")
    assert [t.user_message for t in turns] == ["first", "before", "after"]


async def test_close_writes_what_was_queued(tmp_path: Path) -> None:
    database = await Database.open(tmp_path / "pingu.db")
    pending = [
        asyncio.create_task(database.history.save_turn("s:1", f"m{n}", [], model="m"))
        for n in range(20)
    ]
    await asyncio.sleep(0)  # queued, not yet written
    await database.close()
    assert all(task.done() and not task.exception() for task in pending)
    reopened = await Database.open(tmp_path / "pingu.db")
    try:
        assert await reopened.history.count_turns("s:1") == 20
    finally:
        await reopened.close()


async def test_a_cancelled_writer_task_leaves_no_caller_waiting(db: Database) -> None:
    for steps in (1, 2, 3, 5, 8):  # cancelled before, while and after it takes its batch
        tasks = [
            asyncio.create_task(db.history.save_turn("s:1", f"m{n}", [], model="m"))
            for n in range(10)
        ]
        for _ in range(steps):
            await asyncio.sleep(0)
        assert db._flusher is not None
        db._flusher.cancel()
        async with asyncio.timeout(10):
            results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, int | StoreError) for r in results), results
    # Whatever was reported written is in the database.
    written = sum(isinstance(r, int) for r in results)
    assert written <= await db.history.count_turns("s:1")


async def test_new_session_is_started_once_per_update(db: Database) -> None:
    """A /new resumed after a crash (its reply not yet confirmed) must not move the chat
    again, even after a later /new moved it further."""
    for update_id in (20, 21):
        assert await db.inbound.accept("telegram", update_id, "telegram:7", {"update_id": 1})
    first = await db.inbound.start_new_session("telegram:7", channel="telegram", update_id=20)
    assert first == "telegram:7#2"
    again = await db.inbound.start_new_session("telegram:7", channel="telegram", update_id=20)
    assert again == "telegram:7#2"
    assert await db.inbound.current_session("telegram:7") == "telegram:7#2"
    later = await db.inbound.start_new_session("telegram:7", channel="telegram", update_id=21)
    assert later == "telegram:7#3"
    assert (
        await db.inbound.start_new_session("telegram:7", channel="telegram", update_id=20)
        == "telegram:7#2"
    )
    assert await db.inbound.current_session("telegram:7") == "telegram:7#3"


async def test_a_payload_with_a_lone_surrogate_is_stored(db: Database) -> None:
    payload = {"update_id": 30, "message": {"text": "bad \ud800 text, fine é"}}
    assert await db.inbound.accept_many("telegram", [(30, "telegram:8", payload)]) == {30}
    row = await db.inbound.get("telegram", 30)
    assert row is not None and row.payload == payload


async def test_an_unrecordable_update_gets_a_closed_minimal_row(db: Database) -> None:
    await db.inbound.accept_unrecordable("telegram", 40, "telegram:9", "IntegrityError")
    await db.inbound.accept_unrecordable("telegram", 40, "telegram:9", "IntegrityError")
    row = await db.inbound.get("telegram", 40)
    assert row is not None and row.status == "ignored"
    assert row.payload == {"update_id": 40, "unrecordable": "IntegrityError"}
    assert await db.inbound.max_update_id("telegram") == 40
    assert await db.inbound.unfinished("telegram") == []
