"""Server-Sent Events encoding of agent events for `POST /v1/chat`.

One agent event is one SSE event: the event name is the event's `kind` and the data is
one line of JSON with the event's fields:

    event: token        data: {"text": "..."}
    event: tool_call    data: {"call_id": "...", "name": "...", "arguments": "{...}"}
    event: tool_result  data: {"call_id": "...", "name": "...", "output": "...", "is_error": false}
    event: message      data: {"text": "..."}            (the agent's `message` tool)
    event: error        data: {"message": "..."}
    event: done         data: {"text": "...", "status": "completed", "turn_id": 3, "usage": {...}}

`done` is always the last event of a stream.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pingu.agent.events import AgentEvent

# A comment line: ignored by SSE clients, keeps idle proxies from closing the stream
# while a slow tool runs.
KEEPALIVE = b": keep-alive\n\n"


def event_payload(event: AgentEvent) -> tuple[str, dict[str, Any]]:
    """The SSE event name and data object of an agent event."""
    data = dataclasses.asdict(event)
    name = data.pop("kind")
    return name, data


def encode(name: str, data: dict[str, Any]) -> bytes:
    # json.dumps never emits a raw newline, so the data is always a single `data:` line.
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def encode_event(event: AgentEvent) -> bytes:
    return encode(*event_payload(event))
