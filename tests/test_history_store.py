"""HistoryStore: sessions, turns, and the input history rebuilt from them."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from pingu.history.items import MISSING_OUTPUT_TEXT
from pingu.store import Database, DuplicateTurnError
from tests.fakes.openai_schema import check_input_item

REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [],
    "encrypted_content": "gAAAA-secret-thoughts",
    "status": None,
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "status": "completed",
    "arguments": '{"cmd":"uptime"}',
    "call_id": "call_1",
    "name": "shell",
}
CALL_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "up 3 days"}
ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Up 3 days.", "annotations": [], "logprobs": []}],
}


@pytest.fixture
async def db(tmp_path: Path):
    database = await Database.open(tmp_path / "pingu.db")
    yield database
    await database.close()


def _valid(items: list[dict]) -> None:
    for index, item in enumerate(items):
        assert check_input_item(item, f"input[{index}]") == []


async def test_tool_loop_turn_round_trips_in_order(db: Database) -> None:
    await db.history.ensure_session("telegram:1", "telegram", "1", model="gpt-x", title="t")
    responses = [
        {"id": "resp_1", "model": "gpt-x", "status": "completed", "usage": {"input_tokens": 9}},
        {"id": "resp_2", "model": "gpt-x", "status": "completed", "usage": None},
    ]
    turn_id = await db.history.save_turn(
        "telegram:1", "how long is the uptime?", [REASONING, CALL, CALL_OUTPUT, ANSWER],
        model="gpt-x", responses=responses, agent="main", inbound_ref="telegram:100",
    )  # fmt: skip
    second = await db.history.save_turn("telegram:1", "thanks", [], model="gpt-x")
    assert second > turn_id

    history = await db.history.load_input_history("telegram:1")
    assert history == [
        {"role": "user", "content": "how long is the uptime?"},
        {"id": "rs_1", "type": "reasoning", "summary": [],
         "encrypted_content": "gAAAA-secret-thoughts"},
        CALL,
        CALL_OUTPUT,
        ANSWER,
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip
    _valid(history)

    turns = await db.history.list_turns("telegram:1")
    assert [t.id for t in turns] == [turn_id, second]
    first = turns[0]
    assert first.items == [REASONING, CALL, CALL_OUTPUT, ANSWER]  # stored verbatim
    assert first.responses == responses
    assert (first.status, first.agent, first.inbound_ref, first.model) == (
        "completed", "main", "telegram:100", "gpt-x",
    )  # fmt: skip
    assert first.reply_text == "Up 3 days."
    assert first.created_at.endswith("Z") and "T" in first.created_at
    assert await db.history.count_turns("telegram:1") == 2
    assert (await db.history.turn_for_inbound("telegram:100")).id == turn_id
    assert await db.history.turn_for_inbound("telegram:101") is None

    session = await db.history.get_session("telegram:1")
    assert session is not None
    assert (session.channel, session.channel_id, session.model, session.title) == (
        "telegram", "1", "gpt-x", "t",
    )  # fmt: skip
    assert session.turn_count == 2
    assert session.updated_at >= session.created_at


async def test_stored_json_shape(db: Database) -> None:
    await db.history.save_turn("http:abc", "hi", [ANSWER], model="m", responses=[{"id": "r"}])
    conn = sqlite3.connect(db.path)
    (raw,) = conn.execute("SELECT response_json FROM turns").fetchone()
    conn.close()
    assert json.loads(raw) == {"format": 2, "items": [ANSWER], "responses": [{"id": "r"}]}


async def test_save_turn_creates_a_missing_session_and_touches_it(db: Database) -> None:
    await db.history.save_turn("http:new", "hi", [], model="m")
    session = await db.history.get_session("http:new")
    assert session is not None and session.channel == "http"
    await asyncio.sleep(0.005)
    await db.history.save_turn("http:new", "again", [], model="m")
    later = await db.history.get_session("http:new")
    assert later.updated_at > session.updated_at
    assert [s.id for s in await db.history.list_sessions()] == ["http:new"]


async def test_duplicate_inbound_ref_is_refused(db: Database) -> None:
    await db.history.save_turn("t:1", "a", [], model="m", inbound_ref="telegram:5")
    with pytest.raises(DuplicateTurnError) as info:
        await db.history.save_turn("t:1", "a", [], model="m", inbound_ref="telegram:5")
    assert info.value.inbound_ref == "telegram:5"
    assert await db.history.count_turns("t:1") == 1


async def test_bad_input_is_refused_with_a_clear_error(db: Database) -> None:
    with pytest.raises(ValueError, match="status"):
        await db.history.save_turn("t:1", "a", [], model="m", status="exploded")
    with pytest.raises(TypeError, match="item 1"):
        await db.history.save_turn("t:1", "a", [ANSWER, "not an item"], model="m")  # type: ignore[list-item]
    assert await db.history.count_turns("t:1") == 0


async def test_unknown_item_type_is_kept_verbatim(db: Database) -> None:
    future = {
        "type": "hologram_call",
        "id": "hg_1",
        "status": "completed",
        "frames": [{"n": 1, "depth": None}],
        "note": None,
    }
    await db.history.save_turn("t:1", "show me", [future, ANSWER], model="m")
    (turn,) = await db.history.list_turns("t:1")
    assert turn.items[0] == future
    history = await db.history.load_input_history("t:1")
    # nulls never go to the API; everything else does
    assert history[1] == {
        "type": "hologram_call", "id": "hg_1", "status": "completed", "frames": [{"n": 1}],
    }  # fmt: skip


async def test_cancelled_turn_is_repaired_for_the_api(db: Database) -> None:
    """A turn cut off mid-loop: a trailing reasoning item without the item it produced, and
    a call without output, would each make the API refuse the whole history."""
    second_call = {**CALL, "id": "fc_2", "call_id": "call_2"}
    dangling_reasoning = {**REASONING, "id": "rs_2"}
    await db.history.save_turn(
        "t:1", "do two things", [REASONING, CALL, second_call, CALL_OUTPUT, dangling_reasoning],
        model="m", status="cancelled", error="cancelled by user",
    )  # fmt: skip
    history = await db.history.load_input_history("t:1")
    assert [i.get("type", "user") for i in history] == [
        "user", "reasoning", "function_call", "function_call", "function_call_output",
        "function_call_output",
    ]  # fmt: skip
    assert history[-1] == {
        "type": "function_call_output", "call_id": "call_2", "output": MISSING_OUTPUT_TEXT,
    }  # fmt: skip
    _valid(history)
    (turn,) = await db.history.list_turns("t:1")
    assert (turn.status, turn.error) == ("cancelled", "cancelled by user")
    assert turn.items[-1] == dangling_reasoning  # the row itself keeps everything


async def test_sessions_are_separate(db: Database) -> None:
    await db.history.save_turn("a:1", "for a", [ANSWER], model="m")
    await db.history.save_turn("b:1", "for b", [], model="m")
    assert await db.history.load_input_history("b:1") == [{"role": "user", "content": "for b"}]
    assert await db.history.load_input_history("nobody") == []


async def test_concurrent_save_turn_all_land(db: Database) -> None:
    sessions = [f"s:{n}" for n in range(5)]

    async def writer(session_id: str, n: int) -> int:
        return await db.history.save_turn(
            session_id, f"message {n}", [{**ANSWER, "id": f"msg_{session_id}_{n}"}], model="m"
        )

    ids = await asyncio.gather(*(writer(s, n) for n in range(40) for s in sessions))
    assert len(set(ids)) == 200
    for session_id in sessions:
        turns = await db.history.list_turns(session_id)
        assert [t.user_message for t in turns] == [f"message {n}" for n in range(40)]
        history = await db.history.load_input_history(session_id)
        assert len(history) == 80
