"""The SQLite database: one writer connection, one read connection, migrations at open."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

from pingu.store.errors import StoreError
from pingu.store.migrations import Migration, apply_pending, load_migrations
from pingu.store.paths import migrations_dir, queries_dir
from pingu.store.queries import NamedQueries

BUSY_TIMEOUT_MS = 5000


async def _connect(path: Path) -> aiosqlite.Connection:
    # isolation_level=None: no implicit BEGIN; transactions are opened explicitly.
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        await conn.execute_fetchall(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await conn.execute_fetchall("PRAGMA foreign_keys = ON")
        rows = await conn.execute_fetchall("PRAGMA journal_mode = WAL")
        if not rows or str(rows[0][0]).lower() != "wal":
            raise StoreError(f"cannot switch {path} to WAL journal mode")
        await conn.execute_fetchall("PRAGMA synchronous = NORMAL")
    except BaseException:
        await conn.close()
        raise
    return conn


def _prepare(
    path: Path, migrations: Path | None, queries: Path | None
) -> tuple[Path, list[Migration], NamedQueries]:
    """The file-system work of opening, done off the event loop."""
    path = path.expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory for the database {path}: {exc}") from exc
    return (
        path,
        load_migrations(migrations or migrations_dir()),
        NamedQueries(queries or queries_dir()),
    )


@dataclass(frozen=True)
class _PendingWrite:
    sql: str
    params: Mapping[str, Any]
    future: asyncio.Future[int]


class Database:
    """Open with `await Database.open(path)`; close with `await db.close()`.

    Writes go only through `async with db.transaction() as conn:` (one writer, serialised by
    a lock, one transaction per block), or `write_statement` for a single statement. Reads
    may use `db.read()`, a second connection that WAL lets read while the writer writes.
    """

    def __init__(
        self,
        path: Path,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        queries: NamedQueries,
    ) -> None:
        from pingu.history.store import HistoryStore
        from pingu.store.executions import ExecutionRepository
        from pingu.store.inbound import InboundRepository
        from pingu.store.usage import UsageRepository

        self.path = path
        self.queries = queries
        self._writer = writer
        self._reader = reader
        self._write_lock = asyncio.Lock()
        self._pending_writes: list[_PendingWrite] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closed = False
        self.history = HistoryStore(self)
        self.executions = ExecutionRepository(self)
        self.usage = UsageRepository(self)
        self.inbound = InboundRepository(self)

    @classmethod
    async def open(
        cls, path: Path | str, *, migrations: Path | None = None, queries: Path | None = None
    ) -> Database:
        """Open (creating parent directories and the file), set the pragmas, migrate.

        Raises `StoreError` for a database written by a newer Pingu, and `MigrationError`
        (a `StoreError`) when a migration fails; the database is then left as it was.
        """
        path, known, named = await asyncio.to_thread(_prepare, Path(path), migrations, queries)
        try:
            writer = await _connect(path)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the database {path}: {exc}") from exc
        try:
            await apply_pending(writer, known, str(path))
            reader = await _connect(path)
        except BaseException:
            await writer.close()
            raise
        return cls(path, writer, reader, named)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """The writer connection inside one transaction: committed on success, rolled back
        on any exception (including cancellation)."""
        async with self._write_lock:
            if self._closed:
                raise StoreError("the database is closed")
            conn = self._writer
            try:
                await conn.execute_fetchall("BEGIN IMMEDIATE")
                yield conn
                # Shielded: once the turn is written, a cancellation must not cut the commit.
                await asyncio.shield(conn.execute_fetchall("COMMIT"))
            except BaseException:
                await asyncio.shield(self._rollback())
                raise

    async def write_statement(self, sql: str, params: Mapping[str, Any]) -> int:
        """Run one write statement, durable when this returns; the last inserted rowid.

        Group commit: statements that arrive while the writer is busy are sent together,
        pipelined into one transaction (one BEGIN ... COMMIT instead of one commit and two
        event-loop round trips each). A statement that fails is undone alone (SQLite's
        statement-level atomicity) and raises here; the others still commit."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending_writes.append(_PendingWrite(sql, params, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_writes(), name="db-group-commit")
            self._flusher.add_done_callback(self._flusher_done)
        return await future

    async def _flush_writes(self) -> None:
        while self._pending_writes:
            async with self._write_lock:
                batch = [w for w in self._pending_writes if not w.future.done()]
                self._pending_writes.clear()
                if not batch:
                    continue
                if self._closed:
                    for write in batch:
                        write.future.set_exception(StoreError("the database is closed"))
                    continue
                await self._write_batch(batch)

    def _flusher_done(self, task: asyncio.Task[None]) -> None:
        # Cancelled (event-loop teardown), perhaps before it ever ran: the writes it had
        # not taken must not leave their callers waiting. A newer flusher owns them, if any.
        if task.cancelled() and task is self._flusher:
            for write in self._pending_writes:
                if not write.future.done():
                    write.future.set_exception(StoreError("the database writer stopped"))
            self._pending_writes.clear()

    async def _write_batch(self, batch: list[_PendingWrite]) -> None:
        # Its own task, shielded: if the flusher is cancelled (event-loop teardown) the
        # batch still finishes, so no caller waits forever and none is told that a write
        # which committed failed.
        work = asyncio.ensure_future(self._run_batch(batch))
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            await asyncio.wait([work])
            raise

    async def _run_batch(self, batch: list[_PendingWrite]) -> None:
        conn = self._writer
        inserts = (conn.execute_insert(w.sql, w.params) for w in batch)
        try:
            if len(batch) == 1:  # alone: autocommit, one round trip
                results = await asyncio.gather(*inserts, return_exceptions=True)
            else:
                await conn.execute_fetchall("BEGIN IMMEDIATE")
                # Queued in order on the connection's thread without waiting for each other.
                results = await asyncio.gather(*inserts, return_exceptions=True)
                await conn.execute_fetchall("COMMIT")
        except BaseException as exc:
            if len(batch) > 1:
                await asyncio.shield(self._rollback())
            error = exc if isinstance(exc, Exception) else StoreError("the write was cancelled")
            for write in batch:
                if not write.future.done():
                    write.future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        for write, result in zip(batch, results, strict=True):
            if write.future.done():  # the caller gave up waiting; the write still happened
                continue
            if isinstance(result, BaseException):
                write.future.set_exception(result)
            else:
                write.future.set_result(int(result[0]) if result else 0)

    async def write_returning(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Like `write_statement`, for a statement with RETURNING: its rows."""
        async with self._write_lock:
            if self._closed:
                raise StoreError("the database is closed")
            return list(await self._writer.execute_fetchall(sql, params))

    async def _rollback(self) -> None:
        # The statements queue in order on the connection's thread, so an interrupted BEGIN
        # or COMMIT has finished (or failed) before this runs.
        with contextlib.suppress(sqlite3.OperationalError):  # no transaction is active
            await self._writer.execute_fetchall("ROLLBACK")

    def read(self) -> aiosqlite.Connection:
        """The read connection (autocommit; each statement sees the last commit)."""
        if self._closed:
            raise StoreError("the database is closed")
        return self._reader

    async def close(self) -> None:
        if self._closed:
            return
        if self._flusher is not None:  # what callers were promised is written first
            await asyncio.wait([self._flusher])
        async with self._write_lock:
            self._closed = True
            await self._reader.close()
            await self._writer.close()
