"""Stored output items <-> Responses API input items.

A turn is stored losslessly: every output item of every model call, verbatim, plus every
`function_call_output` the tools produced, in order (`docs/storage.md`). Replaying them as
the `input` of the next request needs a conversion, because the API is stricter about input
than it is generous in output:

- null-valued fields are dropped, at every depth (`status: null` is answered with
  `400 Unknown parameter: 'input[1].status'`), except the few keys the input type requires
  but allows to be null (`code_interpreter_call.outputs`);
- an item of a type the openai package knows as an input item keeps exactly the keys that
  input type declares (output-only keys such as `created_by`, or `vector_store_id` in file
  search results, and web search sources other than URLs are dropped); ids and statuses
  are kept: the API needs the ids to pair a reasoning item with the item it produced;
- an item of a type not known here is kept verbatim (minus nulls), never dropped;
- a reasoning item is kept only when the item it produced follows it (a turn cut short right
  after a reasoning item would otherwise be refused: "Item 'rs_...' of type 'reasoning' was
  provided without its required following item");
- a function call left without an output (a turn that failed or was cut off mid-tool-loop)
  gets one saying so, since the API refuses a call without its output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import orjson

STORED_FORMAT = 2

# The keys each input item type declares in openai.types.responses.ResponseInputItemParam
# (openai 3.54). tests/test_history_items.py checks this table against the installed SDK.
INPUT_ITEM_KEYS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "additional_tools": frozenset(["id", "role", "tools", "type"]),
        "apply_patch_call": frozenset(["call_id", "caller", "id", "operation", "status", "type"]),
        "apply_patch_call_output": frozenset(
            ["call_id", "caller", "id", "output", "status", "type"]
        ),
        "code_interpreter_call": frozenset(
            ["code", "container_id", "id", "outputs", "status", "type"]
        ),
        "compaction": frozenset(["encrypted_content", "id", "type"]),
        "compaction_trigger": frozenset(["id", "type"]),
        "computer_call": frozenset(
            ["action", "actions", "call_id", "id", "pending_safety_checks", "status", "type"]
        ),
        "computer_call_output": frozenset(
            ["acknowledged_safety_checks", "call_id", "id", "output", "status", "type"]
        ),
        "configuration_update": frozenset(["id", "reasoning", "text", "type"]),
        "custom_tool_call": frozenset(
            ["async", "call_id", "caller", "id", "input", "name", "namespace", "type"]
        ),
        "custom_tool_call_output": frozenset(["call_id", "caller", "id", "output", "type"]),
        "file_search_call": frozenset(["id", "queries", "results", "status", "type"]),
        "function_call": frozenset(
            ["arguments", "async", "call_id", "caller", "id", "name", "namespace", "status", "type"]
        ),
        "function_call_output": frozenset(
            ["call_id", "caller", "id", "name", "namespace", "output", "status", "type"]
        ),
        "image_generation_call": frozenset(
            [
                "action",
                "background",
                "error",
                "id",
                "output_format",
                "quality",
                "result",
                "revised_prompt",
                "size",
                "status",
                "svg_usage",
                "type",
            ]
        ),
        "local_shell_call": frozenset(["action", "call_id", "id", "status", "type"]),
        "local_shell_call_output": frozenset(["id", "output", "status", "type"]),
        "mcp_approval_request": frozenset(["arguments", "id", "name", "server_label", "type"]),
        "mcp_approval_response": frozenset(
            ["approval_request_id", "approve", "id", "reason", "type"]
        ),
        "mcp_call": frozenset(
            [
                "approval_request_id",
                "arguments",
                "error",
                "id",
                "name",
                "output",
                "server_label",
                "status",
                "type",
            ]
        ),
        "mcp_list_tools": frozenset(["error", "id", "server_label", "tools", "type"]),
        "message": frozenset(["content", "id", "phase", "role", "status", "type"]),
        "program": frozenset(["call_id", "code", "fingerprint", "id", "type"]),
        "program_output": frozenset(["call_id", "id", "result", "status", "type"]),
        "reasoning": frozenset(["content", "encrypted_content", "id", "status", "summary", "type"]),
        "shell_call": frozenset(
            ["action", "call_id", "caller", "environment", "id", "status", "type"]
        ),
        "shell_call_output": frozenset(
            ["call_id", "caller", "id", "max_output_length", "output", "status", "type"]
        ),
        "tool_search_call": frozenset(
            ["arguments", "call_id", "execution", "id", "status", "type"]
        ),
        "tool_search_output": frozenset(["call_id", "execution", "id", "status", "tools", "type"]),
        "web_search_call": frozenset(["action", "id", "status", "type"]),
    }
)

# Keys the input type requires but allows to be null ("outputs: null if no outputs are
# available"): kept, as null, rather than dropped.
REQUIRED_NULLABLE_KEYS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "code_interpreter_call": frozenset(["code", "outputs"]),
        "image_generation_call": frozenset(["result"]),
    }
)

# Keys of one file_search_call result in input (output results also carry vector_store_id).
FILE_SEARCH_RESULT_KEYS = frozenset(["attributes", "file_id", "filename", "score", "text"])

# Calls whose output the client supplies, and the type of that output item.
CLIENT_CALL_OUTPUT_TYPES: Mapping[str, str] = MappingProxyType(
    {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
)

MISSING_OUTPUT_TEXT = "error: this tool call did not complete (the turn ended before it did)"

_NOT_A_FOLLOWER_ROLES = frozenset(["user", "system", "developer"])


def strip_nulls(value: Any) -> Any:
    """A copy of `value` with every null-valued key removed, at every depth."""
    # The hot path of rebuilding a long history: recurse only into containers.
    if type(value) is dict:
        return {
            k: strip_nulls(v) if type(v) in _CONTAINERS else v
            for k, v in value.items()
            if v is not None
        }
    if type(value) is list:
        # list elements keep their positions; only null-valued keys go
        return [strip_nulls(v) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS = frozenset([dict, list])


def _web_search_action(action: Any) -> Any:
    # Output actions may list sources of types the input schema does not have (e.g.
    # {"type": "api", "name": "oai-weather"}); input accepts only URL sources.
    if not isinstance(action, dict) or "sources" not in action:
        return action
    sources = [
        {"type": "url", "url": s["url"]}
        for s in action["sources"]
        if isinstance(s, dict) and s.get("type") == "url" and isinstance(s.get("url"), str)
    ]
    fixed = {k: v for k, v in action.items() if k != "sources"}
    if sources:
        fixed["sources"] = sources
    return fixed


def output_to_input(item: dict) -> dict | None:
    """The input item that replays one stored item, or None if it is not an item at all."""
    if not isinstance(item, dict):
        return None
    item_type = item.get("type")
    if item_type is None:
        # An input message in the short form ({"role": ..., "content": ...}).
        return strip_nulls(item) if "role" in item and "content" in item else None
    if not isinstance(item_type, str):
        return None
    allowed = INPUT_ITEM_KEYS.get(item_type)
    if allowed is None:
        return strip_nulls(item)  # a type not known today: verbatim
    converted = {
        k: strip_nulls(v) if type(v) in _CONTAINERS else v
        for k, v in item.items()
        if v is not None and k in allowed
    }
    for key in REQUIRED_NULLABLE_KEYS.get(item_type, ()):
        converted.setdefault(key, None)
    if item_type == "web_search_call" and "action" in converted:
        converted["action"] = _web_search_action(converted["action"])
    elif item_type == "file_search_call" and isinstance(converted.get("results"), list):
        converted["results"] = [
            {k: v for k, v in r.items() if k in FILE_SEARCH_RESULT_KEYS}
            for r in converted["results"]
            if isinstance(r, dict)
        ]
    return converted


def _follows_reasoning(item: dict) -> bool:
    """Whether `item` can be the item a reasoning item produced."""
    item_type = item.get("type")
    if item_type == "reasoning" or (isinstance(item_type, str) and item_type.endswith("_output")):
        return False
    return item.get("role") not in _NOT_A_FOLLOWER_ROLES


def turn_input_items(items: Iterable[Any]) -> list[dict]:
    """The input items replaying one turn's stored items (without its user message)."""
    converted = [c for c in (output_to_input(i) for i in items) if c is not None]
    out: list[dict] = []
    for index, item in enumerate(converted):
        if item.get("type") == "reasoning" and (
            index + 1 >= len(converted) or not _follows_reasoning(converted[index + 1])
        ):
            continue
        out.append(item)
    answered = {
        (i.get("type"), i.get("call_id")) for i in out if i.get("type", "").endswith("_output")
    }
    for item in list(out):
        output_type = CLIENT_CALL_OUTPUT_TYPES.get(item.get("type", ""))
        call_id = item.get("call_id")
        if output_type and isinstance(call_id, str) and (output_type, call_id) not in answered:
            out.append({"type": output_type, "call_id": call_id, "output": MISSING_OUTPUT_TEXT})
    return out


def user_input_item(text: str) -> dict:
    """The input item of a user message, in the short form clients send."""
    return {"role": "user", "content": text}


def encode_turn(items: Sequence[dict], responses: Sequence[Mapping[str, Any]]) -> str:
    """The `response_json` of a turn (format 2, see docs/storage.md)."""
    document = {"format": STORED_FORMAT, "items": list(items), "responses": list(responses)}
    try:
        return orjson.dumps(document).decode("utf-8")
    except TypeError as exc:  # orjson.JSONEncodeError
        raise ValueError(f"turn items and responses must be plain JSON data: {exc}") from exc


def decode_turn(response_json: str | None) -> tuple[list[Any], list[Any]]:
    """(items, responses) of a stored turn: Pingu's format 2, or the Go original's whole
    Response object (whose `output` is the items). Unreadable JSON gives no items; the
    row itself is left untouched."""
    if not response_json:
        return [], []
    try:
        document = orjson.loads(response_json)
    except orjson.JSONDecodeError:
        return [], []
    if not isinstance(document, dict):
        return [], []
    items = document.get("items")
    if isinstance(items, list):
        responses = document.get("responses")
        return items, responses if isinstance(responses, list) else []
    output = document.get("output")
    if isinstance(output, list):  # the Go original: a whole Response object
        meta = {k: document.get(k) for k in ("id", "model", "status", "usage") if k in document}
        return output, [meta] if meta else []
    return [], []


def reply_text(items: Iterable[Any]) -> str:
    """The text of the last assistant message among `items` ('' if there is none)."""
    text = ""
    for item in items:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        if item.get("role") != "assistant":
            continue
        content = item.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(
                part.get("text", "")
                for part in content
                if isinstance(part, dict) and part.get("type") == "output_text"
            )
    return text
