"""Errors of the store."""

from __future__ import annotations


class StoreError(Exception):
    """The database cannot be used as asked (too new, a failed migration, bad files)."""


class MigrationError(StoreError):
    """A migration failed; the database was left as it was before that migration."""


class DuplicateTurnError(StoreError):
    """A turn for this inbound update was already saved."""

    def __init__(self, inbound_ref: str) -> None:
        super().__init__(f"a turn for inbound update {inbound_ref!r} is already saved")
        self.inbound_ref = inbound_ref
