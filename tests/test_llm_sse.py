"""The SSE reader of the model client: line ends, pieces, comments, skipping, errors."""

from __future__ import annotations

import json

import pytest

from pingu.llm.client import WANTED_EVENTS
from pingu.llm.sse import SSEFormatError, SSEReader

DELTA = {"type": "response.output_text.delta", "delta": "Grüß 👋\nzwei"}
CREATED = {"type": "response.created", "response": {"id": "resp_1"}}
DONE = {"type": "response.completed", "response": {"id": "resp_1", "output": []}}


def stream(*events: dict, newline: str = "\n", named: bool = True) -> bytes:
    out = []
    for event in events:
        lines = [f"event: {event['type']}"] if named else []
        lines.append("data: " + json.dumps(event, ensure_ascii=False))
        out.append(newline.join(lines) + newline * 2)
    return "".join(out).encode()


def read(data: bytes, piece: int) -> list[dict]:
    reader = SSEReader(WANTED_EVENTS)
    events: list[dict] = []
    for start in range(0, len(data), piece):
        events.extend(reader.feed(data[start : start + piece]))
    events.extend(reader.finish())
    return events


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
@pytest.mark.parametrize("named", [True, False])
@pytest.mark.parametrize("piece", [1, 2, 5, 1 << 20])
def test_events_survive_any_split_and_line_end(newline: str, named: bool, piece: int) -> None:
    # Pieces of 1 byte split CRLF pairs and the UTF-8 bytes of ü and 👋.
    data = stream(CREATED, DELTA, DONE, newline=newline, named=named)
    assert read(data, piece) == [DELTA, DONE]


def test_unwanted_named_events_are_not_decoded() -> None:
    # Broken JSON in an event nobody needs costs nothing and breaks nothing.
    data = b"event: response.in_progress\ndata: {broken\n\n" + stream(DELTA)
    assert read(data, 1 << 20) == [DELTA]


def test_comments_multiline_data_done_and_a_missing_final_blank_line() -> None:
    data = (
        b": keep-alive\n\n"
        b"event: response.output_text.delta\n"
        b'data: {"type": "response.output_text.delta",\n'
        b'data:  "delta": "x"}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"type": "response.output_text.delta", "delta": "after done"}\n\n'
    )
    assert read(data, 3) == [{"type": "response.output_text.delta", "delta": "x"}]
    # A last event without its blank line is still read when the stream ends.
    unterminated = stream(DELTA) + b"data: " + json.dumps(DONE).encode()
    assert read(unterminated, 4) == [DELTA, DONE]


def test_error_events_in_any_spelling() -> None:
    api = {"type": "error", "code": "rate_limit_exceeded", "message": "slow"}
    nested = {"error": {"code": "server_error", "message": "boom"}}
    data = stream(api) + b"data: " + json.dumps(nested).encode() + b"\n\n"
    assert read(data, 1 << 20) == [api, {**nested, "type": "error"}]


@pytest.mark.parametrize("data", [b"data: {not json\n\n", b"data: [1, 2]\n\n"])
def test_data_that_is_not_a_json_object_is_a_format_error(data: bytes) -> None:
    with pytest.raises(SSEFormatError):
        read(data, 1 << 20)
