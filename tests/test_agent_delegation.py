"""Delegation to sub-agents: their sessions, memory, tools, records and the depth limit."""

from __future__ import annotations

from typing import Any

from pingu.agent.turn import TurnRequest
from tests.fakes.responses_api import function_calls, text, usage
from tests.test_agent_helpers import AgentEnv, Recorder, agent_env, compact

__all__ = ["agent_env"]

PROFILES = """
[agent.orchestrator]
system_prompt = "You plan and delegate."
tools = ["delegate", "message"]

[agent.coder]
system_prompt = "You write code."
tools = ["shell"]
"""


def ask(message: str, session: str = "tg:42") -> TurnRequest:
    return TurnRequest(session_id=session, user_message=message, channel="telegram")


def delegate(agent: str, task: str, call_id: str) -> tuple[str, dict[str, Any], str]:
    return ("delegate", {"agent": agent, "task": task}, call_id)


async def test_delegation_runs_the_profile_in_its_own_session_and_returns_its_text(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(
        function_calls(delegate("coder", "Compute 6*7.", "d1"), usage=usage(10, 0, 5)),
        text("42", chunks=2, usage=usage(20, 0, 1)),  # the coder answers
        text("The coder says 42.", usage=usage(30, 0, 6)),
    )
    runtime = agent_env.runtime(PROFILES)
    assert runtime.default_agent_name == "orchestrator"
    seen = Recorder()

    result = await runtime.run_turn(ask("What is 6*7?"), seen)

    assert result.text == "The coder says 42."
    # The sub-agent's answer is the tool output, not part of the user's streamed answer.
    assert seen.streamed_text == "The coder says 42."
    [tool_result] = seen.of("tool_result")
    assert (tool_result.name, tool_result.output, tool_result.is_error) == ("delegate", "42", False)
    assert result.usage["total_tokens"] == 15 + 21 + 36  # the whole turn, sub-agent included

    orchestrator_req, coder_req, final_req = fake.bodies
    assert orchestrator_req["instructions"].startswith("You plan and delegate.")
    assert "- coder: You write code." in orchestrator_req["instructions"]
    assert {t["name"] for t in orchestrator_req["tools"]} == {"delegate", "message"}
    assert coder_req["instructions"] == "You write code."
    assert {t["name"] for t in coder_req["tools"]} == {"shell"}
    assert coder_req["input"] == [{"role": "user", "content": "Compute 6*7."}]
    assert compact(final_req["input"])[-1] == ("output", "d1", "42")

    # The parent's history holds only its own items; the sub-agent has its own session.
    [parent_turn] = await agent_env.turns("tg:42")
    assert [i["type"] for i in parent_turn.items] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    [sub_turn] = await agent_env.turns("tg:42:delegate:coder")
    assert (sub_turn.user_message, sub_turn.reply_text, sub_turn.agent) == (
        "Compute 6*7.",
        "42",
        "coder",
    )
    sub_session = await agent_env.db.history.get_session("tg:42:delegate:coder")
    assert sub_session.channel == "delegate" and sub_session.channel_id == "tg:42"

    [parent_exec] = await agent_env.db.executions.list_for_session("tg:42")
    [sub_exec] = await agent_env.db.executions.list_for_session("tg:42:delegate:coder")
    assert parent_exec.parent_id is None and sub_exec.parent_id == parent_exec.id
    assert sub_exec.agent_name == "coder" and sub_exec.status == "completed"
    assert sub_exec.input["depth"] == 1

    usage_rows = await agent_env.rows(
        "SELECT execution_id, session_id, agent_name, total_tokens FROM token_usage"
    )
    assert sorted(usage_rows, key=lambda row: row[3]) == [
        (parent_exec.id, "tg:42", "orchestrator", 15),
        (sub_exec.id, "tg:42:delegate:coder", "coder", 21),
        (parent_exec.id, "tg:42", "orchestrator", 36),
    ]

    # The sub-agent workspace is its own.
    assert (agent_env.tmp_path / "state" / "workspaces" / "coder").is_dir()


async def test_a_later_delegation_to_the_same_agent_remembers_the_earlier_one(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    runtime = agent_env.runtime(PROFILES)
    fake.queue(
        function_calls(delegate("coder", "Remember the number 7.", "d1")),
        text("Noted: 7."),
        text("Done."),
    )
    await runtime.run_turn(ask("Tell the coder to remember 7."), Recorder())
    fake.queue(
        function_calls(delegate("coder", "What number did I give you?", "d2")),
        text("You gave me 7."),
        text("It was 7."),
    )
    result = await runtime.run_turn(ask("Ask the coder for the number."), Recorder())
    assert result.text == "It was 7."
    second_coder_request = fake.bodies[4]
    assert compact(second_coder_request["input"]) == [
        ("user", "Remember the number 7."),
        ("assistant", "Noted: 7."),
        ("user", "What number did I give you?"),
    ]
    # The parent's second request replays its own first turn, never the coder's items.
    parent_replay = compact(fake.bodies[3]["input"])
    assert ("user", "Remember the number 7.") not in parent_replay
    assert parent_replay[0] == ("user", "Tell the coder to remember 7.")


DEEP_PROFILES = "".join(
    f'[agent.{name}]\nsystem_prompt = "I am {name}."\ntools = ["delegate"]\n'
    for name in ("orchestrator", "a1", "a2", "a3", "a4")
)


async def test_delegation_deeper_than_three_is_refused_with_an_error_to_the_model(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(
        function_calls(delegate("a1", "go", "c0")),  # orchestrator, depth 0
        function_calls(delegate("a2", "go", "c1")),  # a1, depth 1
        function_calls(delegate("a3", "go", "c2")),  # a2, depth 2
        function_calls(delegate("a4", "go", "c3")),  # a3, depth 3: refused without a request
        text("a3 did it alone"),
        text("a2 done"),
        text("a1 done"),
        text("all done"),
    )
    runtime = agent_env.runtime(DEEP_PROFILES)
    seen = Recorder()
    result = await runtime.run_turn(ask("deep"), seen)
    assert result.text == "all done"
    assert len(fake.bodies) == 8
    a3_second = fake.bodies[4]
    assert a3_second["instructions"].startswith("I am a3.")
    refusal = a3_second["input"][-1]
    assert refusal["call_id"] == "c3"
    assert refusal["output"].startswith("error: delegation refused")
    assert "maximum delegation depth is 3" in refusal["output"]
    # Sub-agents' tool events reach the user; the refusal shows as an error.
    refused = [e for e in seen.of("tool_result") if e.call_id == "c3"]
    assert refused[0].is_error
    sessions = {s.id for s in await agent_env.db.history.list_sessions()}
    assert sessions == {
        "tg:42",
        "tg:42:delegate:a1",
        "tg:42:delegate:a1:delegate:a2",
        "tg:42:delegate:a1:delegate:a2:delegate:a3",
    }


async def test_unknown_agent_gets_an_error_listing_the_profiles(agent_env: AgentEnv) -> None:
    fake = agent_env.fake
    fake.queue(function_calls(delegate("designer", "draw", "d1")), text("No designer, sorry."))
    seen = Recorder()
    result = await agent_env.runtime(PROFILES).run_turn(ask("draw me"), seen)
    assert result.text == "No designer, sorry."
    output = fake.bodies[1]["input"][-1]["output"]
    assert output == "error: unknown agent 'designer'; available agents: coder, orchestrator"
    [refused] = seen.of("tool_result")
    assert (refused.name, refused.is_error, refused.output) == ("delegate", True, output)


async def test_a_failing_sub_agent_is_an_error_output_and_its_turn_is_saved(
    agent_env: AgentEnv,
) -> None:
    fake = agent_env.fake
    fake.queue(
        function_calls(delegate("coder", "loop", "d1")),
        function_calls(("shell", {"command": "echo x", "timeout_s": None}, "s1")),
        text("I could not get that done."),
    )
    profiles = PROFILES + "max_model_calls = 1\n"  # the coder may call the model once
    seen = Recorder()
    result = await agent_env.runtime(profiles).run_turn(ask("go"), seen)
    assert result.text == "I could not get that done."
    output = fake.bodies[2]["input"][-1]["output"]
    assert output.startswith("error: the coder agent did not finish (limited): I stopped after 1")
    assert [e.is_error for e in seen.of("tool_result") if e.name == "delegate"] == [True]
    [sub_turn] = await agent_env.turns("tg:42:delegate:coder")
    assert sub_turn.status == "limited"
