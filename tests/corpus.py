"""The recorded Responses API conversations of ../shared/corpus/openai-responses/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_CANDIDATES = (
    Path(__file__).resolve().parents[2] / "shared" / "corpus" / "openai-responses",
    # The checkout may sit elsewhere; on the project's machines the corpus is here.
    Path("/work/shared/corpus/openai-responses"),
)
CORPUS = next((path for path in _CANDIDATES if path.is_dir()), _CANDIDATES[0])


def sse_output(text: str) -> list[dict]:
    """The output items of a recorded SSE stream, as `response.output_item.done` gave them
    (what pingu.llm stores; the encrypted reasoning of `response.completed` may differ)."""
    final: list[dict] = []
    done: list[tuple[int, dict]] = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        try:
            event = json.loads(line[5:].strip())
        except ValueError:
            continue
        kind = event.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            final = event["response"].get("output") or []
        elif kind == "response.output_item.done":
            done.append((event.get("output_index", len(done)), event["item"]))
    return [item for _, item in sorted(done, key=lambda pair: pair[0])] or final


def recorded_output(response: Any) -> list[dict]:
    """The output items of one recorded response: a JSON object or the text of a stream."""
    if isinstance(response, str):
        return sse_output(response)
    return list(response.get("output") or [])
