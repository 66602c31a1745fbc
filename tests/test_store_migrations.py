"""Schema migrations: empty database, each older version, a failed migration, a newer one."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from pingu.store import Database, MigrationError, StoreError
from pingu.store.migrations import load_migrations
from pingu.store.paths import migrations_dir, sql_dir

MIGRATIONS = load_migrations(migrations_dir())
LATEST = len(MIGRATIONS)


def _schema(path: Path) -> tuple[int, list[tuple[str, str]]]:
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        objects = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return version, objects


def _partial_dir(tmp_path: Path, upto: int) -> Path:
    directory = tmp_path / f"migrations_{upto}"
    directory.mkdir()
    for migration in MIGRATIONS[:upto]:
        shutil.copy(migration.path, directory / migration.path.name)
    return directory


def test_sql_dir_is_the_checkout_copy_in_an_editable_install() -> None:
    assert (sql_dir() / "migrations" / "001_initial.sql").is_file()
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1))
    assert LATEST >= 3


async def test_empty_database_gets_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "pingu.db"
    db = await Database.open(path)
    await db.close()
    version, objects = _schema(path)
    assert version == LATEST
    names = {name for name, _ in objects}
    assert {"sessions", "turns", "messages", "agent_executions", "token_usage"} <= names
    assert {"inbound_updates", "channel_sessions", "idx_turns_session_id"} <= names


@pytest.mark.parametrize("upto", range(1, LATEST))
async def test_database_at_an_older_version_is_brought_up_to_date(
    tmp_path: Path, upto: int
) -> None:
    path = tmp_path / "old.db"
    old = await Database.open(path, migrations=_partial_dir(tmp_path, upto))
    await old.close()
    assert _schema(path)[0] == upto
    # a session written by the older schema survives the upgrade
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO sessions (id, channel) VALUES ('telegram:9', 'telegram')")
    conn.execute(
        "INSERT INTO turns (session_id, user_message, response_json) VALUES (?, ?, ?)",
        ("telegram:9", "hello", '{"format":2,"items":[],"responses":[]}'),
    )
    conn.commit()
    conn.close()

    db = await Database.open(path)
    try:
        turns = await db.history.list_turns("telegram:9")
        assert [(t.user_message, t.status) for t in turns] == [("hello", "completed")]
    finally:
        await db.close()
    fresh = tmp_path / "fresh.db"
    await (await Database.open(fresh)).close()
    assert _schema(path) == _schema(fresh)


async def test_failed_migration_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "pingu.db"
    directory = _partial_dir(tmp_path, LATEST)
    await (await Database.open(path, migrations=directory)).close()
    before = _schema(path)
    # creates a table, then fails: the table must not stay behind
    broken = directory / f"{LATEST + 1:03d}_broken.sql"
    broken.write_text("CREATE TABLE half_done (id INTEGER);\nALTER TABLE no_such_table ADD x;\n")

    with pytest.raises(MigrationError) as info:
        await Database.open(path, migrations=directory)
    message = str(info.value)
    assert broken.name in message and f"schema version {LATEST}" in message
    assert _schema(path) == before

    # and the database still opens with the migrations that work
    broken.unlink()
    await (await Database.open(path, migrations=directory)).close()


async def test_database_from_a_newer_pingu_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "pingu.db"
    await (await Database.open(path)).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {LATEST + 5}")
    conn.close()
    before = _schema(path)

    with pytest.raises(StoreError) as info:
        await Database.open(path)
    message = str(info.value)
    assert f"schema version {LATEST + 5}" in message
    assert f"up to {LATEST}" in message and "newer Pingu" in message
    assert _schema(path) == before


async def test_go_database_counts_as_version_1(tmp_path: Path) -> None:
    """A database the Go original wrote: the three tables, user_version 0, a whole
    Response object as response_json."""
    path = tmp_path / "go.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, channel TEXT NOT NULL, channel_id TEXT,
            title TEXT, model TEXT, summary TEXT, summary_up_to INTEGER,
            created_at DATETIME DEFAULT CURRENT_TIMESTAMP,
            updated_at DATETIME DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE turns (id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL REFERENCES sessions(id), user_message TEXT NOT NULL,
            response_json TEXT NOT NULL, model TEXT,
            created_at DATETIME DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT,
            role TEXT, content TEXT, created_at DATETIME DEFAULT CURRENT_TIMESTAMP);
        INSERT INTO sessions (id, channel) VALUES ('telegram:648079060', 'default');
        INSERT INTO turns (session_id, user_message, response_json, model) VALUES (
            'telegram:648079060', 'hi',
            '{"id":"resp_1","object":"response","model":"gpt-4.1-nano","status":"completed",
              "output":[{"id":"msg_1","type":"message","role":"assistant",
                "status":"completed","content":[{"type":"output_text","text":"Hello!",
                "annotations":[],"logprobs":null}]}],"usage":{"input_tokens":5}}',
            'gpt-4.1-nano');
        """
    )
    conn.close()

    db = await Database.open(path)
    try:
        assert _schema(path)[0] == LATEST
        history = await db.history.load_input_history("telegram:648079060")
        assert history == [
            {"role": "user", "content": "hi"},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hello!", "annotations": []}],
            },
        ]
        (turn,) = await db.history.list_turns("telegram:648079060")
        assert turn.reply_text == "Hello!"
        assert turn.responses == [
            {"id": "resp_1", "model": "gpt-4.1-nano", "status": "completed",
             "usage": {"input_tokens": 5}}
        ]  # fmt: skip
    finally:
        await db.close()


def test_badly_named_or_gapped_migrations_are_refused(tmp_path: Path) -> None:
    (tmp_path / "001_initial.sql").write_text("SELECT 1;")
    (tmp_path / "003_later.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match="without gaps"):
        load_migrations(tmp_path)
    (tmp_path / "003_later.sql").unlink()
    (tmp_path / "2_bad.sql").write_text("SELECT 1;")
    with pytest.raises(StoreError, match=r"NNN_name\.sql"):
        load_migrations(tmp_path)
