"""A small server-sent-events reader for the Responses API stream.

The openai package builds a pydantic model for every event of a stream; Pingu needs five
kinds of event out of about twenty, as plain dicts. This reader splits the byte stream into
events (LF, CRLF or CR line ends, as the SSE spec allows), and decodes the JSON of an event
only when its `event:` name says it is wanted (or when there is no name to go by).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any


class SSEFormatError(ValueError):
    """An event's data is not the JSON object the Responses API sends."""


class SSEReader:
    """Feed it chunks of bytes; get back the decoded events that are wanted."""

    def __init__(self, wanted: Collection[str]) -> None:
        self._wanted = frozenset(wanted)
        self._partial = bytearray()  # an incomplete last line
        self._event: str | None = None
        self._data: list[str] = []
        self.done = False  # a `data: [DONE]` was seen (sent by some compatible servers)

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        if b"\n" not in chunk and b"\r" not in chunk:
            self._partial += chunk  # a long line arriving in pieces: no quadratic copying
            return []
        if self._partial:
            chunk = bytes(self._partial) + chunk
        if b"\r" in chunk:
            # A CR at the very end may be the first half of a CRLF: keep it for the next chunk.
            keep_cr = chunk.endswith(b"\r")
            if keep_cr:
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if keep_cr:
                chunk += b"\r"
        lines = chunk.split(b"\n")
        self._partial = bytearray(lines.pop())
        events: list[dict[str, Any]] = []
        for line in lines:
            self._line(line, events)
        return events

    def finish(self) -> list[dict[str, Any]]:
        """The stream ended: what a last unterminated event held (the spec drops it, but a
        final `response.completed` without its blank line is still worth having)."""
        events: list[dict[str, Any]] = []
        partial, self._partial = bytes(self._partial).rstrip(b"\r"), bytearray()
        if partial:
            self._line(partial, events)
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[dict[str, Any]]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == 0x3A:  # ":" a comment, e.g. a keep-alive
            return
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", errors="replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", errors="replace")
        # id and retry mean nothing for a one-shot response stream

    def _dispatch(self, events: list[dict[str, Any]]) -> None:
        name, data = self._event, self._data
        self._event, self._data = None, []
        if not data or self.done:
            return
        # The Responses API names every event after its data's "type": an unwanted one is
        # skipped without decoding its JSON. Other names (a server's own) are decoded.
        if name and name.startswith("response.") and name not in self._wanted:
            return
        text = data[0] if len(data) == 1 else "\n".join(data)
        if text.startswith("[DONE]"):
            self.done = True
            return
        try:
            event = json.loads(text)
        except ValueError as exc:
            raise SSEFormatError(f"an event's data is not JSON: {exc}") from None
        if not isinstance(event, dict):
            raise SSEFormatError("an event's data is not a JSON object")
        kind = event.get("type")
        if kind in self._wanted:
            events.append(event)
        elif name == "error" or kind == "error" or isinstance(event.get("error"), dict):
            # an error, however the server chose to spell it
            events.append({**event, "type": "error"})
