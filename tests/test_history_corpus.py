"""Rebuilt input history against real Responses API traffic.

For every recorded conversation with several interactions where the client replayed the
output of response k in request k+1: store the turns the way Pingu does (the user message,
then every output item of every model call and every function_call_output, in order),
rebuild the input with `load_input_history`, and compare it with the input the real API
accepted in request k+1, item by item. Every rebuilt item must also validate against the
openai package's own input item types with no undeclared key and no null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pingu.history.items import output_to_input
from pingu.store import Database
from tests.corpus import CORPUS, recorded_output
from tests.fakes.openai_schema import check_input_item

# Conversations whose follow-up requests do not replay the previous output, so there is
# nothing to compare: the server keeps the history (previous_response_id, conversation)
# or the client sent a compacted history / an edited one.
NOT_REPLAYED = {
    "pydantic-ai__test_openai_conversation_id_auto_respects_pydantic_ai_conversation_id.json",
    "pydantic-ai__test_openai_conversation_id_explicit_and_auto.json",
    "pydantic-ai__test_openai_conversation_id_tool_call_continuation.json",
    "pydantic-ai__test_openai_include_raw_annotations_non_streaming.json",
    "pydantic-ai__test_openai_include_raw_annotations_streaming.json",
    "pydantic-ai__test_openai_previous_response_id.json",
    "pydantic-ai__test_openai_previous_response_id_seed_auto_chains_through_retries.json",
    "pydantic-ai__test_openai_responses_compact_messages.json",
    "pydantic-ai__test_openai_responses_compact_with_auto_previous_response_id_chain.json",
    "pydantic-ai__test_background_mode_with_tool_vcr.json",
    # the client replayed the function call with its item id as call_id
    "pydantic-ai__test_openai_responses_stream.json",
    # the follow-up is refused (400), then sent again with the reasoning rewritten as text
    "pydantic-ai__test_openai_responses_thinking_with_modified_history.json",
}


def _multi_interaction_files() -> list[str]:
    names = []
    for path in sorted(CORPUS.glob("*.json")):
        if len(json.loads(path.read_text())["interactions"]) > 1:
            names.append(path.name)
    return names


def _is_message(item: dict, *roles: str) -> bool:
    return item.get("type", "message") == "message" and item.get("role") in roles


# The recorder of some cassettes wrote typographic quotes and dashes of request bodies in
# ASCII.
_ASCII_QUOTES = str.maketrans(
    {"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2014": "--"}
)


def _text(content: Any) -> str:
    if not isinstance(content, str):
        content = "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
    return content.translate(_ASCII_QUOTES)


def _signature(item: dict) -> tuple:
    """What must match between the rebuilt and the accepted input item."""
    kind = item.get("type", "message")
    if kind == "message":
        return ("message", item.get("role"), _text(item.get("content")))
    if kind in ("function_call", "custom_tool_call"):
        args = item.get("arguments", item.get("input"))
        try:
            args = json.loads(args)  # a client may re-serialise with other spacing
        except (TypeError, ValueError):
            pass
        return (kind, item.get("call_id"), item.get("name"), json.dumps(args, sort_keys=True))
    if kind.endswith("_output"):
        return (kind, item.get("call_id"), json.dumps(item.get("output"), sort_keys=True))
    if kind == "reasoning":
        return (kind, item.get("id"), item.get("encrypted_content"))
    return (kind, item.get("id"))


def _ignorable(item: dict) -> bool:
    # Instructions are not history; pydantic-ai sends an empty assistant message for a
    # response that had no text (it never was an output item).
    if _is_message(item, "system", "developer"):
        return True
    return _is_message(item, "assistant") and _text(item.get("content")) == ""


def _same_item(replayed: dict, original: dict) -> bool:
    if replayed.get("type", "message") != original.get("type"):
        return False
    for key in ("id", "call_id"):
        if key in replayed and key in original:
            return replayed[key] == original[key]
    if original.get("type") == "message":
        return _text(replayed.get("content")) == _text(original.get("content"))
    return False


@dataclass
class Turn:
    user_message: str
    items: list[dict] = field(default_factory=list)


def _turns_for(expected: list[dict], outputs: list[list[dict]]) -> tuple[list[Turn], list[dict]]:
    """The turns Pingu would have stored to produce `expected`: the user messages, every
    output item of each response replayed in it (the whole response, in its order) and the
    tool outputs; and the output items the client left out of its replay. Raises LookupError
    if `expected` replays something that is no recorded output."""
    turns: list[Turn] = []
    dropped: list[dict] = []
    pending: list[dict] = []  # items of the response being replayed, not yet matched
    for item in expected:
        if _is_message(item, "user"):
            dropped.extend(pending)
            pending = []
            turns.append(Turn(_text(item["content"])))
            continue
        if item.get("type", "").endswith("_output"):
            turns[-1].items.append(item)
            continue
        position = next((i for i, o in enumerate(pending) if _same_item(item, o)), None)
        if position is not None:
            dropped.extend(pending[:position])
            pending = pending[position + 1 :]
            continue
        found = [(out, i) for out in outputs for i, o in enumerate(out) if _same_item(item, o)]
        if not found:
            raise LookupError(f"not a recorded output item: {_signature(item)}")
        source, position = found[0]
        dropped.extend(pending)
        dropped.extend(source[:position])
        turns[-1].items.extend(source)
        pending = list(source[position + 1 :])
    dropped.extend(pending)
    return turns, dropped


MULTI = _multi_interaction_files()


def test_corpus_is_there() -> None:
    assert len(MULTI) == 39
    assert set(MULTI) >= NOT_REPLAYED


@pytest.mark.parametrize("name", [n for n in MULTI if n not in NOT_REPLAYED])
async def test_rebuilt_history_matches_what_the_api_accepted(name: str, tmp_path: Path) -> None:
    interactions = json.loads((CORPUS / name).read_text())["interactions"]
    checked = 0
    for k in range(len(interactions) - 1):
        if interactions[k + 1]["status"] != 200:
            continue  # the API refused that request: not ground truth
        accepted = interactions[k + 1]["request"]["input"]
        expected = [i for i in accepted if not _ignorable(i)]
        outputs = [recorded_output(interactions[j]["response"]) for j in range(k + 1)]
        turns, dropped = _turns_for(expected, outputs)
        # the follow-up user message has no items yet: it is the next request's own input
        if turns and not turns[-1].items and _is_message(expected[-1], "user"):
            expected = expected[:-1]
            turns = turns[:-1]
        db = await Database.open(tmp_path / f"k{k}.db")
        try:
            for turn in turns:
                await db.history.save_turn("corpus:1", turn.user_message, turn.items, model="m")
            rebuilt = await db.history.load_input_history("corpus:1")
        finally:
            await db.close()

        # Pingu replays everything it stored; a client may have left items out (pydantic-ai
        # drops file_search_call): those are compared by presence, the rest item by item.
        left_out = [_signature(i) for i in dropped]
        replayed = [_signature(i) for i in rebuilt]
        for signature in left_out:
            assert signature in replayed
            replayed.remove(signature)
        assert replayed == [_signature(i) for i in expected]
        for index, item in enumerate(rebuilt):
            assert check_input_item(item, f"input[{index}]") == []
        checked += 1
    assert checked > 0, f"{name}: no accepted request replayed the previous output"


@pytest.mark.parametrize("name", sorted(NOT_REPLAYED))
async def test_conversations_without_replay_still_rebuild_valid_items(
    name: str, tmp_path: Path
) -> None:
    """Store each response of a server-side-history conversation as a turn: everything
    rebuilt must still be valid input, and nothing of the outputs may go missing."""
    interactions = json.loads((CORPUS / name).read_text())["interactions"]
    db = await Database.open(tmp_path / "db.sqlite")
    try:
        stored_items: list[dict] = []
        for k, interaction in enumerate(interactions):
            items = recorded_output(interaction["response"]) if interaction["status"] == 200 else []
            await db.history.save_turn("corpus:1", f"message {k}", items, model="m")
            stored_items.extend(items)
        rebuilt = await db.history.load_input_history("corpus:1")
    finally:
        await db.close()
    for index, item in enumerate(rebuilt):
        assert check_input_item(item, f"input[{index}]") == []
    replayed = [_signature(i) for i in rebuilt]
    assert replayed.count(("message", "user", "message 0")) == 1
    for item in stored_items:
        assert _signature(output_to_input(item)) in replayed
