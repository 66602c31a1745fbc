"""Lossless turn history: `HistoryStore` and the stored item <-> input item conversion."""

from pingu.history.items import output_to_input
from pingu.history.store import HistoryStore, SessionRow, TurnRow

__all__ = ["HistoryStore", "SessionRow", "TurnRow", "output_to_input"]
