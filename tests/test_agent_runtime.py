"""The agent loop against the fake Responses API, the real openai client, real tools and a
real database: what the user sees, what is stored, and what the model was sent."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest
import structlog

from pingu.agent.turn import TurnRequest
from pingu.dispatcher import Dispatcher
from tests.fakes.responses_api import (
    context_too_long,
    function_call,
    function_calls,
    hang,
    message,
    rate_limited,
    reasoning,
    reply,
    server_error,
    text,
    usage,
)
from tests.test_agent_helpers import AgentEnv, Recorder, agent_env, compact

__all__ = ["agent_env"]  # the fixture, imported for pytest


def ask(message_text: str, session: str = "cli:test", **kwargs) -> TurnRequest:
    return TurnRequest(session_id=session, user_message=message_text, channel="cli", **kwargs)


def sh(command: str) -> dict:
    return {"command": command, "timeout_s": None}


async def test_plain_answer_streams_text_and_is_saved_with_usage_and_cost(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(text("Hello there, friend", chunks=3, usage=usage(1000, 200, 50)))
    runtime = agent_env.runtime()
    seen = Recorder()

    result = await runtime.run_turn(ask("hi"), seen)

    assert seen.kinds() == ["token", "token", "token", "done"]
    assert seen.streamed_text == "Hello there, friend"
    done = seen.of("done")[0]
    assert (done.text, done.status, done.turn_id) == ("Hello there, friend", "completed", 1)
    assert done.usage["input_tokens"] == 1000 and done.usage["output_tokens"] == 50
    assert result.text == "Hello there, friend" and result.status == "completed"

    body = fake.bodies[0]
    assert body["input"] == [{"role": "user", "content": "hi"}]
    assert body["instructions"].startswith("You are Pingu")
    assert body["stream"] is True
    tool_names = {t["name"] for t in body["tools"]}
    assert tool_names == {"message", "shell", "file", "web_fetch"}  # no profiles: no delegate

    [turn] = await agent_env.turns("cli:test")
    assert (turn.user_message, turn.status, turn.agent, turn.reply_text) == (
        "hi",
        "completed",
        "default",
        "Hello there, friend",
    )
    [execution] = await agent_env.db.executions.list_for_session("cli:test")
    assert execution.status == "completed" and execution.agent_name == "default"
    assert execution.input["message"] == "hi"
    assert execution.output["text"] == "Hello there, friend"
    assert execution.completed_at is not None

    rows = await agent_env.rows(
        "SELECT execution_id, session_id, agent_name, provider, model, api_key_hash,"
        " input_tokens, cached_input_tokens, output_tokens, total_tokens, cost_estimate"
        " FROM token_usage"
    )
    assert len(rows) == 1
    (exec_id, session, agent, provider, model, key_hash, inp, cached, out, total, cost) = rows[0]
    assert (exec_id, session, agent, provider, model) == (
        execution.id,
        "cli:test",
        "default",
        "openai",
        "gpt-4.1-nano",
    )
    assert key_hash == hashlib.sha256(fake.api_key.encode()).hexdigest()
    assert (inp, cached, out, total) == (1000, 200, 50, 1050)
    # gpt-4.1-nano: $0.10/M input, $0.025/M cached input, $0.40/M output
    assert cost == pytest.approx((800 * 0.10 + 200 * 0.025 + 50 * 0.40) / 1e6)
    # The key itself is nowhere in the database (nor its WAL).
    for path in agent_env.tmp_path.glob("pingu.db*"):
        assert fake.api_key.encode() not in path.read_bytes()


async def test_parallel_tool_calls_run_concurrently_and_outputs_follow_call_order(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    # `a` can only finish once `b` has run: sequential execution would hit the tool timeout.
    wait_for_b = "while [ ! -f flag ]; do sleep 0.01; done; echo a-done"
    fake.queue(
        function_calls(
            ("shell", sh(wait_for_b), "call_a"),
            ("shell", sh("touch flag; echo b-done"), "call_b"),
            text="Let me check.",
        ),
        text("Both ran."),
    )
    runtime = agent_env.runtime("[limits]\ntool_timeout_s = 10\n")
    seen = Recorder()

    result = await runtime.run_turn(ask("run both"), seen)

    assert result.text == "Both ran." and result.status == "completed"
    started = [e.call_id for e in seen.of("tool_call")]
    finished = [e.call_id for e in seen.of("tool_result")]
    assert started == ["call_a", "call_b"]
    assert finished == ["call_b", "call_a"]  # b finished first: they ran at the same time
    assert "a-done" in seen.of("tool_result")[1].output
    assert seen.streamed_text == "Let me check.Both ran."

    # Request 2 replays request 1's output, then the outputs in call order.
    second = compact(fake.bodies[1]["input"])
    assert second[0] == ("user", "run both")
    assert second[1] == ("assistant", "Let me check.")
    assert second[2:4] == [("call", "shell", "call_a"), ("call", "shell", "call_b")]
    assert [(kind, call_id) for kind, call_id, _ in second[4:]] == [
        ("output", "call_a"),
        ("output", "call_b"),
    ]
    assert "a-done" in second[4][2] and "b-done" in second[5][2]
    # The workspace is the agent's own directory under the state dir.
    assert (agent_env.tmp_path / "state" / "workspaces" / "default" / "flag").exists()

    # A later turn's request carries the earlier turn's items, in order.
    fake.queue(text("Still here."))
    await runtime.run_turn(ask("and now?"), Recorder())
    third = compact(fake.bodies[2]["input"])
    assert third[:6] == second
    assert third[6:] == [("assistant", "Both ran."), ("user", "and now?")]
    [turn1, turn2] = await agent_env.turns("cli:test")
    assert [i["type"] for i in turn1.items] == [
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    assert turn2.reply_text == "Still here."


async def test_reasoning_items_are_replayed_with_their_calls(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(
        reply(reasoning(summary=["thinking"]), function_call("shell", sh("echo hi"), call_id="c1")),
        reply(message("done")),
    )
    runtime = agent_env.runtime()
    result = await runtime.run_turn(ask("go"), Recorder())
    assert result.text == "done"
    types = [i.get("type") for i in fake.bodies[1]["input"][1:]]
    assert types == ["reasoning", "function_call", "function_call_output"]


async def test_message_tool_reaches_the_user_before_the_answer(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(function_calls(("message", {"text": "Working on it…"})), text("Finished."))
    seen = Recorder()
    await agent_env.runtime().run_turn(ask("long job"), seen)
    assert [e.text for e in seen.of("message")] == ["Working on it…"]
    assert seen.kinds().index("message") < seen.kinds().index("token")
    assert seen.of("done")[0].text == "Finished."


async def test_model_call_bound_ends_the_turn_with_an_explanation(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(
        function_calls(("shell", sh("echo 1"), "c1")),
        function_calls(("shell", sh("echo 2"), "c2")),
    )
    runtime = agent_env.runtime("[limits]\nmax_model_calls = 2\n")
    seen = Recorder()

    result = await runtime.run_turn(ask("loop forever"), seen)

    assert result.status == "limited"
    assert result.text.startswith("I stopped after 2 model calls without finishing.")
    assert seen.of("done")[0].status == "limited"
    assert len(fake.bodies) == 2
    assert [e.call_id for e in seen.of("tool_call")] == ["c1"]  # c2 was never run
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "limited" and "2 model calls" in turn.error
    outputs = {i["call_id"]: i["output"] for i in turn.items if i["type"] == "function_call_output"}
    assert "1" in outputs["c1"]
    assert outputs["c2"].startswith("Not run")
    [execution] = await agent_env.db.executions.list_for_session("cli:test")
    assert execution.status == "failed" and "2 model calls" in execution.error

    # History stays valid for the (strict) API: the next turn is accepted.
    fake.queue(text("ok then"))
    assert (await runtime.run_turn(ask("continue"), Recorder())).text == "ok then"


async def test_tool_call_bound_runs_what_fits_and_refuses_the_rest(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(
        function_calls(
            ("shell", sh("echo one"), "c1"),
            ("shell", sh("echo two"), "c2"),
            ("shell", sh("echo three"), "c3"),
        )
    )
    runtime = agent_env.runtime("[limits]\nmax_tool_calls = 2\n")
    seen = Recorder()
    result = await runtime.run_turn(ask("three things"), seen)
    assert result.status == "limited"
    assert result.text.startswith("I stopped after 2 tool calls without finishing.")
    assert [e.call_id for e in seen.of("tool_result")] == ["c1", "c2"]
    [turn] = await agent_env.turns("cli:test")
    outputs = [
        (i["call_id"], i["output"]) for i in turn.items if i["type"] == "function_call_output"
    ]
    assert [c for c, _ in outputs] == ["c1", "c2", "c3"]
    assert "one" in outputs[0][1] and "two" in outputs[1][1]
    assert outputs[2][1] == "Not run: the turn reached its limit of tool calls."
    fake.queue(text("fine"))
    assert (await runtime.run_turn(ask("next"), Recorder())).status == "completed"


async def test_tool_time_bound_is_reported_to_the_model_which_carries_on(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(function_calls(("shell", sh("sleep 30"), "slow")), text("That took too long."))
    runtime = agent_env.runtime("[limits]\ntool_timeout_s = 1\n")
    seen = Recorder()
    result = await runtime.run_turn(ask("sleep"), seen)
    assert result.status == "completed" and result.text == "That took too long."
    [tool_result] = seen.of("tool_result")
    assert tool_result.is_error and "timed out after 1 s" in tool_result.output
    output = fake.bodies[1]["input"][-1]
    assert output["type"] == "function_call_output" and "timed out" in output["output"]


async def test_turn_time_bound_stops_a_running_tool_and_keeps_history_valid(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(function_calls(("shell", sh("sleep 30"), "slow")))
    runtime = agent_env.runtime("[limits]\nturn_timeout_s = 0.5\n")
    seen = Recorder()
    result = await runtime.run_turn(ask("sleep"), seen)
    assert result.status == "limited"
    assert result.text.startswith("I stopped after 0.5 s without finishing")
    assert seen.of("done")[0].text == result.text
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "limited"
    [output] = [i for i in turn.items if i["type"] == "function_call_output"]
    assert output["output"] == "Not run: the turn hit its time limit of 0.5 s."
    fake.queue(text("ok"))
    runtime2 = agent_env.runtime()
    assert (await runtime2.run_turn(ask("again"), Recorder())).text == "ok"


async def test_turn_time_bound_also_covers_a_model_that_never_answers(
    agent_env: AgentEnv,
) -> None:
    agent_env.fake.queue(hang())
    runtime = agent_env.runtime("[limits]\nturn_timeout_s = 0.3\n")
    result = await runtime.run_turn(ask("hello?"), Recorder())
    assert result.status == "limited"
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "limited" and turn.items == []


async def _wait_for(predicate, what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def test_cancel_mid_tool_kills_it_saves_the_turn_and_keeps_finished_outputs(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(
        function_calls(
            ("shell", sh("echo quick"), "quick"),
            ("shell", sh("echo $$ > slow.pid; exec sleep 30"), "slow"),
        )
    )
    runtime = agent_env.runtime()
    seen = Recorder()
    task = asyncio.create_task(runtime.run_turn(ask("do it"), seen))
    pid_file = agent_env.tmp_path / "state" / "workspaces" / "default" / "slow.pid"
    await _wait_for(lambda: seen.of("tool_result") and pid_file.exists(), "the tools to start")
    await _wait_for(lambda: pid_file.read_text().strip(), "the pid")
    pid = int(pid_file.read_text())
    assert _alive(pid)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    # The running tool was killed (SIGKILL to its process group; give the kernel a moment).
    await _wait_for(lambda: not _alive(pid), "the tool's process to die")
    done = seen.of("done")[0]
    assert (done.status, done.text) == ("cancelled", "Cancelled.")
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "cancelled" and turn.error == "cancelled by the user"
    outputs = [
        (i["call_id"], i["output"]) for i in turn.items if i["type"] == "function_call_output"
    ]
    assert outputs[0][0] == "quick" and "quick" in outputs[0][1]
    assert outputs[1] == ("slow", "Not run: the turn was cancelled by the user.")
    [execution] = await agent_env.db.executions.list_for_session("cli:test")
    assert execution.status == "failed" and execution.error == "cancelled by the user"

    fake.queue(text("ok"))
    assert (await runtime.run_turn(ask("again"), Recorder())).text == "ok"
    replay = compact(fake.bodies[1]["input"])
    assert replay[3:5] == [("output", "quick", outputs[0][1]), ("output", "slow", outputs[1][1])]


async def test_cancel_while_the_model_streams_saves_a_cancelled_turn(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(text("a b c d e f g h i j", chunks=10, delta_delay_s=0.5))
    runtime = agent_env.runtime()
    seen = Recorder()
    task = asyncio.create_task(runtime.run_turn(ask("talk"), seen))
    await _wait_for(lambda: seen.of("token"), "the first delta")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "cancelled"
    # What the user saw is kept, so the next turn's model knows what it had said.
    [kept] = turn.items
    assert kept["role"] == "assistant" and kept["content"].startswith("a ")
    assert "".join(e.text for e in seen.of("token")).startswith(kept["content"])
    fake.queue(text("continuing"))
    assert (await runtime.run_turn(ask("go on"), Recorder())).text == "continuing"
    replayed = fake.requests[-1].body["input"]
    assert replayed[-3:] == [
        {"role": "user", "content": "talk"},
        {"role": "assistant", "content": kept["content"]},
        {"role": "user", "content": "go on"},
    ]


async def test_dispatcher_cancel_reaches_the_real_runtime(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(function_calls(("shell", sh("sleep 30"), "slow")), text("second answer"))
    dispatcher = Dispatcher(agent_env.runtime())
    seen = Recorder()
    first = await dispatcher.submit(ask("slow one"), seen)
    second = await dispatcher.submit(ask("next one"), Recorder())
    await _wait_for(lambda: seen.of("tool_call"), "the tool to start")
    assert dispatcher.cancel("cli:test")
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await second).text == "second answer"
    turns = await agent_env.turns("cli:test")
    assert [t.status for t in turns] == ["cancelled", "completed"]


async def test_model_error_is_shown_and_the_failed_turn_is_saved_consistently(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(function_calls(("shell", sh("echo one"), "c1")), context_too_long())
    runtime = agent_env.runtime()
    seen = Recorder()
    result = await runtime.run_turn(ask("big"), seen)
    assert result.status == "failed"
    [error] = seen.of("error")
    assert error.message == result.text and error.message
    assert fake.api_key not in error.message
    assert seen.kinds()[-2:] == ["error", "done"]
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "failed" and turn.error.startswith("context_too_long")
    assert [i["type"] for i in turn.items] == ["function_call", "function_call_output"]
    fake.queue(text("recovered"))
    assert (await runtime.run_turn(ask("smaller"), Recorder())).text == "recovered"


async def test_a_server_error_is_retried_and_the_user_sees_only_the_answer(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(server_error(), text("after a retry"))
    seen = Recorder()
    result = await agent_env.runtime().run_turn(ask("hi"), seen)
    assert result.text == "after a retry" and seen.of("error") == []
    assert [r.status for r in fake.requests] == [500, 200]
    assert len(await agent_env.rows("SELECT id FROM token_usage")) == 1
    # The execution row records the retry.
    [execution] = await agent_env.db.executions.list_for_session("cli:test")
    assert (execution.status, execution.retry_count) == ("completed", 1)


async def test_retries_are_counted_while_the_turn_runs_and_across_its_model_calls(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(
        server_error(),
        function_calls(("message", {"text": "working on it"}, "m1")),
        rate_limited(retry_after=0.01),
        text("done"),
    )
    db = agent_env.db
    seen: list[tuple[str, int]] = []

    async def sink(event) -> None:
        if event.kind in ("tool_result", "token"):
            [row] = await db.executions.list_for_session("cli:test")
            seen.append((row.status, row.retry_count))

    result = await agent_env.runtime().run_turn(ask("go"), sink)
    assert result.text == "done"
    # Written as the retries happen, not at the end; a call that succeeded after its
    # retries puts the run back to running.
    assert seen == [("running", 1), ("running", 2)]
    [execution] = await db.executions.list_for_session("cli:test")
    assert (execution.status, execution.retry_count) == ("completed", 2)


async def test_retries_to_exhaustion_fail_the_execution_with_the_count(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(*(rate_limited(retry_after=0.01) for _ in range(3)), text("never"))
    seen = Recorder()
    result = await agent_env.runtime().run_turn(ask("hi"), seen)  # max_retries = 2
    assert result.status == "failed"
    assert seen.of("error")[0].message == (
        "The model service is rate-limiting requests; try again in a moment."
    )
    assert len(fake.requests) == 3
    [execution] = await agent_env.db.executions.list_for_session("cli:test")
    assert (execution.status, execution.retry_count) == ("failed", 2)
    assert execution.error.startswith("rate_limit:")


async def test_pricing_override_and_unknown_model_warning_once(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    runtime = agent_env.runtime(
        f'[llm.custom]\nmodel = "my-model"\nbase_url = "{fake.url}"\napi_key = "{fake.api_key}"\n'
        '[pricing."my-priced"]\ninput = 1.0\noutput = 2.0\n'
        '[agent.priced]\nsystem_prompt = "p"\nllm = "custom"\n'
    )
    fake.queue(
        text("a", usage=usage(100, 0, 10), model="my-priced"),
        text("b", usage=usage(100, 0, 10), model="mystery-model"),
        text("c", usage=usage(100, 0, 10), model="mystery-model"),
    )
    with structlog.testing.capture_logs() as logs:
        for i in range(3):
            await runtime.run_turn(ask(f"q{i}", agent="priced"), Recorder())
    rows = await agent_env.rows("SELECT model, cost_estimate FROM token_usage ORDER BY id")
    assert rows == [
        ("my-priced", pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6)),
        ("mystery-model", None),
        ("mystery-model", None),
    ]
    warnings = [e for e in logs if e["event"] == "unknown_model_price"]
    assert [w["model"] for w in warnings] == ["mystery-model"]
    turn_logs = [e for e in logs if e["event"] == "turn"]
    assert len(turn_logs) == 3 and turn_logs[0]["agent"] == "priced"
    assert {"session", "duration_ms", "tokens", "status"} <= set(turn_logs[0])
    assert all(fake.api_key not in repr(e) for e in logs)


async def test_workspaces_are_private_and_a_name_that_escapes_is_refused(
    agent_env: AgentEnv,
) -> None:
    agent_env.fake.queue(text("hi"))
    runtime = agent_env.runtime('[agent.".."]\nsystem_prompt = "x"\n')
    assert (await runtime.run_turn(ask("hi"), Recorder())).status == "completed"
    workspace = runtime.config.workspaces / "default"
    assert workspace.is_dir() and (workspace.stat().st_mode & 0o777) == 0o700

    seen = Recorder()
    result = await runtime.run_turn(ask("hi", session="cli:escape", agent=".."), seen)
    assert result.status == "failed"
    assert seen.of("error")[0].message == result.text
    assert "cannot be used as a workspace directory name" in result.text
    assert len(agent_env.fake.requests) == 1  # the refused turn never reached the model
    [turn] = await agent_env.turns("cli:escape")
    assert turn.status == "failed"


async def test_unknown_agent_is_an_error_to_the_user(agent_env: AgentEnv) -> None:
    seen = Recorder()
    result = await agent_env.runtime().run_turn(ask("hi", agent="ghost"), seen)
    assert result.status == "failed"
    assert "unknown agent 'ghost'" in seen.of("error")[0].message
    assert agent_env.fake.requests == []


async def test_cancel_before_the_model_is_called_still_records_the_turn(
    agent_env: AgentEnv,
) -> None:
    runtime = agent_env.runtime()
    task = asyncio.create_task(runtime.run_turn(ask("never mind"), Recorder()))
    await asyncio.sleep(0)  # the turn has started setting up
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [turn] = await agent_env.turns("cli:test")
    assert (turn.user_message, turn.status, turn.items) == ("never mind", "cancelled", [])
    [execution] = await agent_env.db.executions.list_for_session("cli:test")
    assert execution.status == "failed"
    assert agent_env.fake.requests == []


async def test_a_broken_sink_does_not_break_the_turn(agent_env: AgentEnv) -> None:
    agent_env.fake.queue(text("still answered", chunks=2))

    async def broken(event) -> None:
        raise RuntimeError("the channel fell over")

    result = await agent_env.runtime().run_turn(ask("hi"), broken)
    assert (result.status, result.text) == ("completed", "still answered")
    [turn] = await agent_env.turns("cli:test")
    assert turn.status == "completed"
