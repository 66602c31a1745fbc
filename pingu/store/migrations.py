"""Numbered schema migrations: `sql/migrations/NNN_name.sql`, applied in order.

The schema version is `PRAGMA user_version`. Each migration runs in its own transaction
together with the bump of `user_version`, so a migration that fails leaves the schema and
the version exactly as they were. A database whose version is higher than the newest
migration known here was written by a newer Pingu and is refused.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

from pingu.store.errors import MigrationError, StoreError

_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def label(self) -> str:
        return f"{self.version:03d}_{self.name}"


def load_migrations(directory: Path) -> list[Migration]:
    """The migrations in `directory`, checked to be numbered 1, 2, 3, ... without gaps."""
    if not directory.is_dir():
        raise StoreError(f"migrations directory not found: {directory}")
    migrations: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise StoreError(
                f"migration file {path} is not named NNN_name.sql (three digits, lowercase name)"
            )
        migrations.append(Migration(int(match.group(1)), match.group(2), path))
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise StoreError(
                f"migrations in {directory} must be numbered 001, 002, ... without gaps or "
                f"duplicates; found {migration.path.name} where {expected:03d} was expected"
            )
    return migrations


async def schema_version(conn: aiosqlite.Connection) -> int:
    async with conn.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row else 0


def check_not_newer(version: int, migrations: list[Migration], where: str) -> None:
    latest = len(migrations)
    if version > latest:
        raise StoreError(
            f"the database {where} is at schema version {version}, but this Pingu knows "
            f"versions up to {latest}: it was written by a newer Pingu. Upgrade Pingu, or "
            f"point [db] path at another file; the database was not changed."
        )


def pending(version: int, migrations: list[Migration]) -> list[Migration]:
    return [m for m in migrations if m.version > version]


async def apply_pending(
    conn: aiosqlite.Connection, migrations: list[Migration], where: str
) -> list[Migration]:
    """Bring the database up to the newest migration; return the migrations applied.

    `conn` must be in autocommit mode (isolation_level=None): each migration opens and
    commits its own transaction.
    """
    version = await schema_version(conn)
    check_not_newer(version, migrations, where)
    applied: list[Migration] = []
    for migration in pending(version, migrations):
        sql = await asyncio.to_thread(migration.path.read_text, encoding="utf-8")
        # One script: BEGIN, the migration, the version bump, COMMIT. executescript would
        # commit an already open transaction first, so the BEGIN has to be inside it.
        script = (
            f"BEGIN IMMEDIATE;\n{sql}\n;\nPRAGMA user_version = {migration.version};\nCOMMIT;\n"
        )
        try:
            await conn.executescript(script)
        except sqlite3.Error as exc:
            if conn.in_transaction:
                await conn.execute("ROLLBACK")
            raise MigrationError(
                f"migration {migration.path.name} failed and was rolled back; the database "
                f"{where} stays at schema version {migration.version - 1}: {exc}"
            ) from exc
        applied.append(migration)
    return applied
