"""output_to_input: the stored item -> input item conversion, on its own."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
from openai.types.responses import response_input_item_param

from pingu.history.items import INPUT_ITEM_KEYS, decode_turn, output_to_input, turn_input_items
from tests.corpus import CORPUS, recorded_output
from tests.fakes.openai_schema import check_input_item


def _sdk_input_keys() -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    for member in typing.get_args(response_input_item_param.ResponseInputItemParam):
        hints = typing.get_type_hints(member)
        for literal in typing.get_args(hints["type"]):
            if isinstance(literal, str):
                keys.setdefault(literal, set()).update(hints)
    return keys


def test_key_table_matches_the_installed_openai_package() -> None:
    sdk = _sdk_input_keys()
    assert set(INPUT_ITEM_KEYS) == set(sdk)
    for item_type, keys in INPUT_ITEM_KEYS.items():
        assert set(keys) == sdk[item_type], item_type


def _all_output_items() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(CORPUS.glob("*.json")):
        for k, interaction in enumerate(json.loads(path.read_text())["interactions"]):
            if interaction["status"] == 200:
                for item in recorded_output(interaction["response"]):
                    found.append((f"{path.stem}#{k}", item))
    return found


ALL_ITEMS = _all_output_items()


def test_every_output_item_of_the_corpus_becomes_a_valid_input_item() -> None:
    types = {item["type"] for _, item in ALL_ITEMS}
    assert {"message", "reasoning", "function_call", "web_search_call", "file_search_call",
            "code_interpreter_call", "image_generation_call", "mcp_call", "mcp_list_tools",
            "compaction"} <= types  # fmt: skip
    for where, item in ALL_ITEMS:
        converted = output_to_input(item)
        assert converted is not None, where
        assert check_input_item(converted, "input[0]") == [], where
        for key in ("type", "id", "call_id", "name", "arguments", "encrypted_content", "content"):
            if item.get(key) is not None:
                assert converted[key] == item[key], (where, key)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "computer_call", "id": "cu_1", "call_id": "call_c", "status": "completed",
         "pending_safety_checks": [], "action": {"type": "click", "button": "left", "x": 1,
                                                 "y": 2}},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBO",
         "revised_prompt": None},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "wiki", "name": "ask",
         "arguments": "{}", "output": "42", "error": None, "approval_request_id": None,
         "status": "completed"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA", "created_by": "sys"},
    ],
    ids=lambda item: item["type"],
)  # fmt: skip
def test_other_item_types_convert_to_valid_input(item: dict) -> None:
    converted = output_to_input(item)
    assert converted is not None
    assert check_input_item(converted, "input[0]") == []
    assert "created_by" not in converted
    assert all(v is not None for v in converted.values())


def test_nulls_are_stripped_at_every_depth_and_api_names_kept() -> None:
    item = {
        "type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}",
        "status": None, "namespace": None,
    }  # fmt: skip
    assert output_to_input(item) == {
        "type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": "{}",
    }  # fmt: skip
    message = {"role": "user", "content": [{"type": "input_text", "text": "x", "extra": None}]}
    assert output_to_input(message) == {
        "role": "user", "content": [{"type": "input_text", "text": "x"}]
    }  # fmt: skip
    assert output_to_input({"nothing": 1}) is None
    assert output_to_input("text") is None  # type: ignore[arg-type]


def test_web_search_sources_input_does_not_accept_are_dropped() -> None:
    item = {
        "type": "web_search_call", "id": "ws_1", "status": "completed",
        "action": {"type": "search", "query": "q", "sources": [
            {"type": "api", "name": "oai-weather"}, {"type": "url", "url": "https://a.example"}
        ]},
    }  # fmt: skip
    converted = output_to_input(item)
    assert converted["action"]["sources"] == [{"type": "url", "url": "https://a.example"}]
    assert check_input_item(converted, "input[0]") == []
    only_api = {**item, "action": {"type": "search", "query": "q",
                                   "sources": [{"type": "api", "name": "x"}]}}  # fmt: skip
    assert output_to_input(only_api)["action"] == {"type": "search", "query": "q"}


def test_reasoning_is_kept_only_with_the_item_it_produced() -> None:
    rs = {"type": "reasoning", "id": "rs", "summary": []}
    call = {"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c", "output": "ok"}
    assert turn_input_items([rs, call, out]) == [rs, call, out]
    assert turn_input_items([rs, {**rs, "id": "rs2"}, call, out]) == [
        {**rs, "id": "rs2"},
        call,
        out,
    ]
    assert turn_input_items([call, out, rs]) == [call, out]


def test_decode_turn_reads_both_formats_and_survives_garbage() -> None:
    assert decode_turn('{"format":2,"items":[{"type":"x"}],"responses":[]}') == (
        [{"type": "x"}], [],
    )  # fmt: skip
    assert decode_turn('{"id":"r","output":[{"type":"x"}],"status":"completed"}') == (
        [{"type": "x"}], [{"id": "r", "status": "completed"}],
    )  # fmt: skip
    assert decode_turn("not json") == ([], [])
    assert decode_turn("[1]") == ([], [])
    assert decode_turn(None) == ([], [])


def test_corpus_dir_is_found() -> None:
    assert Path(CORPUS).is_dir()
