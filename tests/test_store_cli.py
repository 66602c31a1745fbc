"""`pingu db status` and `pingu db migrate`, run as a user would."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from pingu.store.migrations import load_migrations
from pingu.store.paths import migrations_dir

LATEST = len(load_migrations(migrations_dir()))


def _pingu(*args: str, env_config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pingu", *args],
        capture_output=True,
        text=True,
        env={"PINGU_CONFIG": str(env_config), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def test_status_then_migrate_then_status(tmp_path: Path) -> None:
    db = tmp_path / "state" / "pingu.db"
    config = tmp_path / "config.toml"
    config.write_text(f'[db]\npath = "{db}"\n')

    status = _pingu("db", "status", env_config=config)
    assert status.returncode == 0, status.stderr
    assert str(db) in status.stdout and "does not exist yet" in status.stdout
    assert "001_initial" in status.stdout and not db.exists()

    migrate = _pingu("db", "migrate", env_config=config)
    assert migrate.returncode == 0, migrate.stderr
    assert "applied 001_initial" in migrate.stdout
    assert f"schema version 0 -> {LATEST}" in migrate.stdout

    again = _pingu("db", "migrate", env_config=config)
    assert "nothing to apply" in again.stdout

    status = _pingu("db", "status", env_config=config)
    assert (
        f"schema version:  {LATEST}" in status.stdout and "pending:         none" in status.stdout
    )


def test_db_option_overrides_config_and_newer_db_is_reported(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("PRAGMA user_version = 42")
    conn.close()
    missing_config = tmp_path / "absent.toml"
    missing_config.write_text("")

    status = _pingu("db", "status", "--db", str(other), env_config=missing_config)
    assert status.returncode == 1
    assert "schema version:  42" in status.stdout
    assert "newer Pingu" in status.stderr

    migrate = _pingu("db", "migrate", "--db", str(other), env_config=missing_config)
    assert migrate.returncode == 1
    assert "newer Pingu" in migrate.stderr and "not changed" in migrate.stderr
    conn = sqlite3.connect(other)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 42
    conn.close()
