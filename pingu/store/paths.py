"""Where the SQL files live.

`sql/` sits at the top of the repository; a wheel carries it as `pingu/sql` (hatch
force-include). An editable install or a checkout has no `pingu/sql`, so fall back to the
checkout's top-level directory.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def sql_dir() -> Path:
    """The directory holding `migrations/` and `queries/`."""
    packaged = _PACKAGE_DIR / "sql"
    if (packaged / "migrations").is_dir():
        return packaged
    checkout = _PACKAGE_DIR.parent / "sql"
    if (checkout / "migrations").is_dir():
        return checkout
    raise FileNotFoundError(f"Pingu's SQL files are missing: looked in {packaged} and {checkout}")


def migrations_dir() -> Path:
    return sql_dir() / "migrations"


def queries_dir() -> Path:
    return sql_dir() / "queries"
