"""`pingu db status` and `pingu db migrate`."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiosqlite
import click

from pingu.config import config_option, load_config_or_exit
from pingu.store.db import Database
from pingu.store.errors import StoreError
from pingu.store.migrations import Migration, load_migrations, pending, schema_version
from pingu.store.paths import migrations_dir

_db_option = click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="PATH",
    help="Database file (default: [db] path of the config).",
)


def _resolve(db_path: Path | None, config_path: Path | None) -> Path:
    if db_path is not None:
        return db_path.expanduser()
    return Path(load_config_or_exit(config_path).db.path).expanduser()


async def _read_version(uri: str) -> int:
    async with aiosqlite.connect(uri, uri=True) as conn:
        return await schema_version(conn)


def _version_of(path: Path) -> int | None:
    """The schema version of an existing database, read-only; None if there is no file."""
    if not path.exists():
        return None
    return asyncio.run(_read_version(f"{path.resolve().as_uri()}?mode=ro"))


def _fail(message: str) -> None:
    click.echo(f"pingu: {message}", err=True)
    raise SystemExit(1)


def _known_migrations() -> list[Migration]:
    try:
        return load_migrations(migrations_dir())
    except (StoreError, FileNotFoundError) as exc:
        _fail(str(exc))
        raise  # unreachable: _fail exits


@click.group("db")
def db_group() -> None:
    """Show and apply database migrations."""


@db_group.command("status")
@config_option
@_db_option
def status_command(config_path: Path | None, db_path: Path | None) -> None:
    """Show the database's schema version and the migrations not yet applied."""
    path = _resolve(db_path, config_path)
    known = _known_migrations()
    try:
        version = _version_of(path)
    except sqlite3.Error as exc:
        _fail(f"cannot read the database {path}: {exc}")
        return
    click.echo(f"database:        {path}{'' if version is not None else ' (does not exist yet)'}")
    click.echo(f"schema version:  {version or 0}")
    click.echo(f"latest known:    {len(known)}")
    if version is not None and version > len(known):
        _fail(
            f"the database is at schema version {version}, newer than this Pingu knows "
            f"({len(known)}): it was written by a newer Pingu"
        )
    todo = pending(version or 0, known)
    if not todo:
        click.echo("pending:         none")
        return
    click.echo(f"pending:         {len(todo)}")
    for migration in todo:
        click.echo(f"  {migration.label}")


@db_group.command("migrate")
@config_option
@_db_option
def migrate_command(config_path: Path | None, db_path: Path | None) -> None:
    """Apply the pending migrations (the daemon also does this at startup)."""
    path = _resolve(db_path, config_path)
    known = _known_migrations()

    async def run() -> None:
        db = await Database.open(path)
        await db.close()

    try:
        before = _version_of(path) or 0
        asyncio.run(run())
        after = len(known)
    except (StoreError, sqlite3.Error) as exc:
        _fail(str(exc))
        return
    applied = pending(before, known)
    if not applied:
        click.echo(f"{path}: already at schema version {after}; nothing to apply")
        return
    for migration in applied:
        click.echo(f"applied {migration.label}")
    click.echo(f"{path}: schema version {before} -> {after}")
