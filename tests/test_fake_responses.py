"""The fake Responses API must accept what the real API accepted and reject what it rejected.

Ground truth: the recorded conversations in ../shared/corpus/openai-responses/, replayed
through the real openai client.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.corpus import CORPUS
from tests.fakes.openai_schema import check_input_item
from tests.fakes.responses_api import (
    FakeResponsesAPI,
    function_call,
    function_calls,
    reasoning,
    reply,
    text,
    usage,
)

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"corpus not found at {CORPUS}")


def _corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []


def _read(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["interactions"]


def _load(name: str) -> list[dict[str, Any]]:
    return _read(CORPUS / name)


def _recorded_response(interaction: dict[str, Any]) -> dict[str, Any] | None:
    response = interaction["response"]
    if isinstance(response, dict):
        return response if "id" in response else None
    for block in response.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and '"response.completed"' in line:
                return json.loads(line[6:])["response"]
    return None


def _client(fake: FakeResponsesAPI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.url, api_key=fake.api_key, max_retries=0)


async def _send(client: openai.AsyncOpenAI, body: dict[str, Any]) -> Any:
    """POST a raw body through the real client; returns the final Response."""
    if body.get("stream"):
        stream = await client.post(
            "/responses",
            body=body,
            cast_to=openai.types.responses.Response,
            stream=True,
            stream_cls=openai.AsyncStream[openai.types.responses.ResponseStreamEvent],
        )
        final = None
        async for event in stream:
            if event.type == "response.completed":
                final = event.response
        return final
    return await client.post("/responses", body=body, cast_to=openai.types.responses.Response)


@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: p.stem[:80])
async def test_corpus_request_is_treated_as_the_real_api_did(path: Path) -> None:
    # allow_nulls: the real service tolerated `"status": null` in two recorded requests
    async with FakeResponsesAPI(allow_nulls=True) as fake:
        client = _client(fake)
        interactions = _read(path)
        recorded_ids = {(_recorded_response(i) or {}).get("id") for i in interactions}
        for interaction in interactions:
            previous = interaction["request"].get("previous_response_id")
            if previous and previous not in recorded_ids:
                # made before the recording started: the real API knew it, so must the fake
                fake.remember({"id": previous, "output": []}, [])
        try:
            for interaction in interactions:
                body = interaction["request"]
                if interaction["status"] == 200:
                    fake.queue(text("ok"))
                    final = await _send(client, body)
                    assert final is not None and final.status == "completed"
                    recorded = _recorded_response(interaction)
                    if recorded is not None:
                        # later requests may chain on it with previous_response_id
                        items = body.get("input", [])
                        if isinstance(items, str):
                            items = [{"role": "user", "content": items}]
                        fake.remember(recorded, items)
                else:
                    with pytest.raises(openai.APIStatusError) as caught:
                        await _send(client, body)
                    assert caught.value.status_code == interaction["status"]
                    expected = interaction["response"]["error"]
                    assert caught.value.body["message"] == expected["message"]
                    assert caught.value.body["param"] == expected["param"]
                    assert caught.value.body["code"] == expected["code"]
        finally:
            await client.close()


def test_check_input_item_accepts_every_item_the_real_api_accepted() -> None:
    checked = 0
    for path in _corpus_files():
        for interaction in json.loads(path.read_text())["interactions"]:
            items = interaction["request"].get("input")
            if interaction["status"] != 200 or not isinstance(items, list):
                continue
            for index, item in enumerate(items):
                assert check_input_item(item, f"input[{index}]", allow_nulls=True) == [], (
                    path.name,
                    index,
                )
                checked += 1
    assert checked > 300


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (
            {"role": "user", "content": "hi", "status": None},
            "Unknown parameter: 'input[0].status'.",
        ),
        ({"role": "user", "content": "hi", "foo": 1}, "Unknown parameter: 'input[0].foo'."),
        (
            {"type": "function_call", "call_id": "c", "name": "f"},
            "Missing required parameter: 'input[0].arguments'.",
        ),
        (
            {"role": "tool", "content": "x"},
            "Invalid value: 'tool'. Supported values are: 'user', 'assistant', 'system', and "
            "'developer'.",
        ),
        (
            {"role": "user", "content": [{"type": "input_text", "text": "x", "cache": 1}]},
            "Unknown parameter: 'input[0].content[0].cache'.",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": 5},
            "Invalid type for 'input[0].output': expected one of a string or an array, but got "
            "an integer instead.",
        ),
    ],
)
def test_check_input_item_reports_what_the_api_rejects(item: dict, expected: str) -> None:
    assert check_input_item(item, "input[0]")[0] == expected


# ----------------------------------------------------------------- mutations of real requests


def _tool_use_followup() -> dict[str, Any]:
    """A real accepted request: user, function_call, function_call_output."""
    body = copy.deepcopy(_load("llm__test_responses_tool_use.json")[1]["request"])
    assert [i.get("type") for i in body["input"]][1:] == ["function_call", "function_call_output"]
    return body


def _reasoning_followup() -> dict[str, Any]:
    """A real accepted request: user, reasoning, function_call, function_call_output."""
    interactions = _load("llm__test_responses_round_trips_encrypted_reasoning.json")
    body = copy.deepcopy(interactions[1]["request"])
    assert body["input"][1]["type"] == "reasoning"
    return body


async def _rejection(fake: FakeResponsesAPI, body: dict[str, Any]) -> openai.APIStatusError:
    client = _client(fake)
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            await _send(client, body)
    finally:
        await client.close()
    return caught.value


async def test_unmodified_requests_are_accepted(fake_responses: FakeResponsesAPI) -> None:
    client = _client(fake_responses)
    try:
        for body in (_tool_use_followup(), _reasoning_followup()):
            final = await _send(client, body)
            assert final.output_text == "ok"
    finally:
        await client.close()


async def test_null_status_is_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    body["input"][1]["status"] = None
    err = await _rejection(fake_responses, body)
    assert err.status_code == 400
    assert err.body == {
        "message": "Unknown parameter: 'input[1].status'.",
        "type": "invalid_request_error",
        "param": "input[1].status",
        "code": "unknown_parameter",
    }
    assert fake_responses.requests[-1].status == 400


async def test_unknown_key_is_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    body["input"][2]["is_error"] = False
    err = await _rejection(fake_responses, body)
    assert err.body["message"] == "Unknown parameter: 'input[2].is_error'."


async def test_unknown_top_level_parameter_is_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    body["max_tokens"] = 100
    err = await _rejection(fake_responses, body)
    assert (err.body["message"], err.body["param"]) == (
        "Unknown parameter: 'max_tokens'.",
        "max_tokens",
    )


async def test_missing_model_and_input_are_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    del body["model"]
    assert (await _rejection(fake_responses, body)).body["message"] == (
        "Missing required parameter: 'model'."
    )
    body = _tool_use_followup()
    del body["input"]
    assert (await _rejection(fake_responses, body)).body["message"] == (
        "Missing required parameter: 'input'."
    )


async def test_orphan_function_call_output_is_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    call_id = body["input"][1]["call_id"]
    del body["input"][1]
    err = await _rejection(fake_responses, body)
    assert err.body["message"] == (
        f"No tool call found for function call output with call_id {call_id}."
    )


async def test_function_call_without_output_is_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    call_id = body["input"][1]["call_id"]
    del body["input"][2]
    err = await _rejection(fake_responses, body)
    assert err.body["message"] == f"No tool output found for function call {call_id}."


async def test_reasoning_item_left_last_is_rejected(fake_responses: FakeResponsesAPI) -> None:
    body = _reasoning_followup()
    reasoning_id = body["input"][1]["id"]
    body["input"] = body["input"][:2]
    err = await _rejection(fake_responses, body)
    assert err.body["message"] == (
        f"Item '{reasoning_id}' of type 'reasoning' was provided without its required "
        "following item."
    )
    assert err.body["param"] == "input"


async def test_strict_tool_schema_must_be_closed(fake_responses: FakeResponsesAPI) -> None:
    body = _tool_use_followup()
    tool = body["tools"][0]
    tool["strict"] = True
    err = await _rejection(fake_responses, body)
    assert err.body["code"] == "invalid_function_parameters"
    assert err.body["message"] == (
        f"Invalid schema for function '{tool['name']}': In context=(), 'additionalProperties' "
        "is required to be supplied and to be false."
    )
    tool["parameters"]["additionalProperties"] = False
    tool["parameters"]["required"] = tool["parameters"]["required"][:1]
    err = await _rejection(fake_responses, body)
    assert (
        "'required' is required to be supplied and to be an array including every key"
        in (err.body["message"])
    )
    tool["parameters"]["required"] = list(tool["parameters"]["properties"])
    client = _client(fake_responses)
    try:
        assert (await _send(client, body)).output_text == "ok"
    finally:
        await client.close()


async def test_wrong_key_gets_401_with_the_key_masked(fake_responses: FakeResponsesAPI) -> None:
    client = openai.AsyncOpenAI(
        base_url=fake_responses.url, api_key="sk-wrong-0123456789-secret", max_retries=0
    )
    try:
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.responses.create(model="gpt-4.1-nano", input="hi")
    finally:
        await client.close()
    assert caught.value.body["code"] == "invalid_api_key"
    assert "0123456789-secret" not in caught.value.body["message"]
    assert caught.value.body["message"].startswith("Incorrect API key provided: sk-*")


async def test_unknown_model_gets_404() -> None:
    async with FakeResponsesAPI(models={"gpt-4.1-nano"}) as fake:
        err = await _rejection(fake, {"model": "gpt-9", "input": "hi"})
    assert err.status_code == 404
    assert err.body["code"] == "model_not_found"
    assert (
        err.body["message"] == "The model `gpt-9` does not exist or you do not have access to it."
    )


async def test_previous_response_id_resolves_calls_the_fake_served(
    fake_responses: FakeResponsesAPI,
) -> None:
    fake_responses.queue(function_calls(("lookup", {"q": "x"}, "call_abc")), text("done"))
    client = _client(fake_responses)
    try:
        first = await client.responses.create(model="gpt-4.1-nano", input="look it up")
        second = await client.responses.create(
            model="gpt-4.1-nano",
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_abc", "output": "42"}],
        )
        assert second.output_text == "done"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-4.1-nano", previous_response_id="resp_nope", input="hi"
            )
        assert caught.value.body["code"] == "previous_response_not_found"
    finally:
        await client.close()


# ----------------------------------------------------------------- streaming through the client


async def test_stream_parses_with_the_real_client(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.queue(
        reply(
            reasoning(summary=["thinking"]),
            function_call("shell", {"command": "ls"}, call_id="call_1"),
            function_call("file", {"path": "a.txt"}, call_id="call_2"),
            usage=usage(input_tokens=100, cached=40, output_tokens=30, reasoning=12),
        ),
        text("Hello, world!", chunks=["Hel", "lo, ", "world!"]),
    )
    client = _client(fake_responses)
    try:
        events = []
        stream = await client.responses.create(
            model="gpt-5-mini",
            input="hi",
            stream=True,
            include=["reasoning.encrypted_content"],
        )
        async for event in stream:
            events.append(event)
        types = [e.type for e in events]
        assert types[:2] == ["response.created", "response.in_progress"]
        assert types[-1] == "response.completed"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        final = events[-1].response
        assert [i.type for i in final.output] == ["reasoning", "function_call", "function_call"]
        assert [i.call_id for i in final.output[1:]] == ["call_1", "call_2"]
        assert json.loads(final.output[1].arguments) == {"command": "ls"}
        assert final.usage.input_tokens_details.cached_tokens == 40
        assert final.usage.output_tokens_details.reasoning_tokens == 12
        added = next(e for e in events if e.type == "response.output_item.added")
        done = next(e for e in events if e.type == "response.output_item.done")
        assert added.item.type == done.item.type == "reasoning"
        assert added.item.encrypted_content != done.item.encrypted_content
        assert done.item.encrypted_content == final.output[0].encrypted_content
        arg_deltas = "".join(
            e.delta
            for e in events
            if e.type == "response.function_call_arguments.delta"
            and e.item_id == final.output[1].id
        )
        assert arg_deltas == final.output[1].arguments

        stream = await client.responses.create(model="gpt-5-mini", input="hi", stream=True)
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        assert deltas == ["Hel", "lo, ", "world!"]
    finally:
        await client.close()


async def test_responder_sees_the_request(fake_responses: FakeResponsesAPI) -> None:
    fake_responses.responder = lambda body: text(f"you said {body['input']}")
    client = _client(fake_responses)
    try:
        response = await client.responses.create(model="gpt-4.1-nano", input="ping")
    finally:
        await client.close()
    assert response.output_text == "you said ping"
    assert fake_responses.bodies == [{"model": "gpt-4.1-nano", "input": "ping"}]
    assert fake_responses.requests[0].headers["Authorization"] == f"Bearer {fake_responses.api_key}"
