"""The SQLite store: `Database` (migrations, one writer) and its repositories."""

from pingu.store.db import Database
from pingu.store.errors import DuplicateTurnError, MigrationError, StoreError
from pingu.store.executions import ExecutionRow
from pingu.store.inbound import InboundRow
from pingu.store.usage import UsageRecord, UsageTotal

__all__ = [
    "Database",
    "DuplicateTurnError",
    "ExecutionRow",
    "InboundRow",
    "MigrationError",
    "StoreError",
    "UsageRecord",
    "UsageTotal",
]
