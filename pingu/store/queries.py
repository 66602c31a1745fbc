"""The named SQL of `sql/queries/*.sql`, loaded with aiosql.

Repositories take the SQL text by name and run it themselves on the writer connection
(inside `Database.transaction()`) or the read connection, one round trip to the SQLite
thread per statement: aiosql's own query functions close a cursor per call, which costs a
second round trip, and the writer must control its transactions explicitly.
"""

from __future__ import annotations

from pathlib import Path

import aiosql

from pingu.store.errors import StoreError


class NamedQueries:
    def __init__(self, directory: Path) -> None:
        self._queries = aiosql.from_path(directory, "aiosqlite", mandatory_parameters=False)
        self._sql: dict[str, str] = {
            name: getattr(self._queries, name).sql
            for name in self._queries.available_queries
            if not name.endswith("_cursor")  # aiosql's generated cursor variants
        }

    def sql(self, name: str) -> str:
        try:
            return self._sql[name]
        except KeyError:
            raise StoreError(f"named query {name!r} not found in sql/queries") from None

    @property
    def names(self) -> list[str]:
        return sorted(self._sql)
