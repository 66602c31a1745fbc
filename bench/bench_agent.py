"""Benchmark of the agent runtime's own overhead per turn.

    python bench/bench_agent.py [--turns 1000] [--history N] [--json PATH]

A fake Responses API on 127.0.0.1 (tests/fakes/responses_api.py, answering at once) serves
two kinds of turn through the real runtime, the real openai client and a real SQLite
database: a plain answer (1 model call) and a turn with 3 parallel `message` tool calls
(2 model calls). Each turn is in a fresh session, so the numbers do not grow with history.
`--history N` pre-fills each of those sessions (outside the timed part) with N earlier turns,
alternately a plain answer and a 3-tool-call turn, so every request carries a long input:
it shows what the per-call cost does as a conversation grows.

The same request bodies are then sent again as bare HTTP calls (aiohttp, the SSE stream read
to its end), in the same process and event loop, as the baseline: the time the fake server
and the transport need. Overhead = turn time - the bare time of that turn's calls: the
openai client's parsing, the loop, the tools, the event sink and the database writes.
The pingu.llm model client alone on the same requests is timed too, to show how the
overhead splits between the openai package and the agent loop itself.
Prints p50/p99 and the ratio, writes JSON (default bench/results/agent.json).
Target: p50 overhead under 5 ms per model call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import structlog

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pingu.agent.events import AgentEvent  # noqa: E402
from pingu.agent.runtime import AgentRuntime  # noqa: E402
from pingu.agent.turn import TurnRequest  # noqa: E402
from pingu.config.loader import load_config_text  # noqa: E402
from pingu.llm import ModelClient  # noqa: E402
from pingu.store import Database  # noqa: E402
from tests.fakes.responses_api import FakeResponsesAPI, Reply, function_calls, text  # noqa: E402

TARGET_MS_PER_CALL = 5.0
WARMUP_TURNS = 20
WARMUP_TURNS_WITH_HISTORY = 3  # a turn with a long history is slow: warm up less
TOOLS_PROMPT = "use three tools"


def responder(body: dict[str, Any]) -> Reply:
    last = body["input"][-1]
    if last.get("type") == "function_call_output":
        return text("All three sent.", chunks=3)
    if last.get("content") == TOOLS_PROMPT:
        return function_calls(
            ("message", {"text": "one"}), ("message", {"text": "two"}), ("message", {"text": "3"})
        )
    return text("Hello! How can I help you today?", chunks=8)


async def _sink(event: AgentEvent) -> None:
    return None


HISTORY_ANSWER = (
    "Sure. Here is a short overview of what I found, with the details you asked for: the "
    "configuration lives in one TOML file, secrets come from the environment, and every "
    "conversation is kept in SQLite so it survives a restart. Ask if you want more."
)


def _history_turn(index: int) -> tuple[str, list[dict[str, Any]]]:
    """One earlier turn as the runtime stores it: the user message and its items."""

    def item_id(prefix: str) -> str:
        return f"{prefix}_{secrets.token_hex(24)}"

    answer = {
        "id": item_id("msg"),
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [
            {"type": "output_text", "annotations": [], "logprobs": [], "text": HISTORY_ANSWER}
        ],
    }
    if index % 2 == 0:
        return f"Question number {index}: how is Pingu configured?", [answer]
    calls = [
        {
            "id": item_id("fc"),
            "type": "function_call",
            "status": "completed",
            "arguments": json.dumps({"text": f"progress {index}.{n}"}),
            "call_id": f"call_{secrets.token_urlsafe(18)}",
            "name": "message",
        }
        for n in range(3)
    ]
    outputs = [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sent"}
        for call in calls
    ]
    return f"Request number {index}: report your progress three times.", [
        *calls,
        *outputs,
        answer,
    ]


async def _prefill(db: Database, session_id: str, turns: int) -> None:
    for index in range(turns):
        user_message, items = _history_turn(index)
        await db.history.save_turn(
            session_id, user_message, items, model="gpt-4.1-mini", agent="bench"
        )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _bare_call(http: aiohttp.ClientSession, url: str, key: str, body: dict) -> float:
    started = time.perf_counter()
    async with http.post(
        f"{url}/responses", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as response:
        response.raise_for_status()
        async for _ in response.content.iter_any():
            pass
    return time.perf_counter() - started


async def _client_call(client: ModelClient, body: dict) -> float:
    started = time.perf_counter()
    async for _ in client.stream(
        model=body["model"],
        instructions=body.get("instructions"),
        input=body["input"],
        tools=body.get("tools"),
    ):
        pass
    return time.perf_counter() - started


async def run(turns: int, history: int = 0) -> dict[str, Any]:
    fake = FakeResponsesAPI()
    fake.responder = responder
    await fake.start()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config_text(
            f'[llm.openai]\nbase_url = "{fake.url}"\napi_key = "{fake.api_key}"\n'
            f'[db]\npath = "{tmp}/pingu.db"\n[state]\ndir = "{tmp}/state"\n'
            '[agent.bench]\nsystem_prompt = "You are a benchmark."\ntools = ["message"]\n',
            file=None,
            env={},
        )
        db = await Database.open(config.db.path)
        runtime = AgentRuntime(config, db)
        results: dict[str, Any] = {}
        try:
            async with aiohttp.ClientSession() as http:
                for name, prompt, calls in (
                    ("plain answer", "hello", 1),
                    ("3 tool calls", TOOLS_PROMPT, 2),
                ):
                    client = ModelClient(config.llm_for(None))
                    try:
                        results[name] = await _scenario(
                            runtime, client, fake, http, name, prompt, calls, turns, history
                        )
                    finally:
                        await client.close()
        finally:
            await runtime.close()
            await db.close()
            await fake.close()
    return results


async def _scenario(
    runtime: AgentRuntime,
    client: ModelClient,
    fake: FakeResponsesAPI,
    http: aiohttp.ClientSession,
    name: str,
    prompt: str,
    calls: int,
    turns: int,
    history: int,
) -> dict[str, Any]:
    turn_s: list[float] = []
    bodies: list[list[dict]] = []
    warmup = WARMUP_TURNS_WITH_HISTORY if history else WARMUP_TURNS
    for i in range(warmup + turns):
        first_request = len(fake.requests)
        session_id = f"bench:{name}:{i}"
        if history:
            await _prefill(runtime.db, session_id, history)
        request = TurnRequest(
            session_id=session_id, user_message=prompt, channel="bench", agent="bench"
        )
        started = time.perf_counter()
        result = await runtime.run_turn(request, _sink)
        elapsed = time.perf_counter() - started
        if result.status != "completed":
            raise SystemExit(f"{name}: turn {i} ended {result.status}: {result.text}")
        made = [r.body for r in fake.requests[first_request:]]
        if len(made) != calls:
            raise SystemExit(f"{name}: expected {calls} model calls per turn, got {len(made)}")
        if i >= warmup:
            turn_s.append(elapsed)
            bodies.append(made)
    # The baseline: the same requests, bare, after the turns (same process, same loop).
    # The model client alone on the same requests, each right after its bare twin (so a
    # change of load on the machine hits both alike): how much of the overhead is the
    # openai package and pingu.llm rather than the agent loop and its database writes.
    bare_s: list[float] = []
    client_s: list[float] = []
    for turn_bodies in bodies:
        bare_total = client_total = 0.0
        for body in turn_bodies:
            bare_total += await _bare_call(http, fake.url, fake.api_key, body)
            client_total += await _client_call(client, body)
        bare_s.append(bare_total)
        client_s.append(client_total)
    overhead = [t - b for t, b in zip(turn_s, bare_s, strict=True)]
    loop_only = [t - c for t, c in zip(turn_s, client_s, strict=True)]
    client_only = [c - b for c, b in zip(client_s, bare_s, strict=True)]

    def ms(values: list[float], q: float) -> float:
        return round(_percentile(values, q) * 1000, 3)

    return {
        "turns": turns,
        "history_turns": history,
        "model_calls_per_turn": calls,
        "turn_ms": {"p50": ms(turn_s, 0.5), "p99": ms(turn_s, 0.99)},
        "bare_http_ms": {"p50": ms(bare_s, 0.5), "p99": ms(bare_s, 0.99)},
        "model_client_ms": {"p50": ms(client_s, 0.5), "p99": ms(client_s, 0.99)},
        "overhead_ms": {"p50": ms(overhead, 0.5), "p99": ms(overhead, 0.99)},
        "loop_overhead_beyond_client_ms": {"p50": ms(loop_only, 0.5), "p99": ms(loop_only, 0.99)},
        "client_overhead_per_call_ms": {
            "p50": round(ms(client_only, 0.5) / calls, 3),
            "p99": round(ms(client_only, 0.99) / calls, 3),
        },
        "overhead_per_call_ms": {
            "p50": round(ms(overhead, 0.5) / calls, 3),
            "p99": round(ms(overhead, 0.99) / calls, 3),
        },
        "turn_to_bare_ratio_p50": round(_percentile(turn_s, 0.5) / _percentile(bare_s, 0.5), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument(
        "--history", type=int, default=0, help="earlier turns pre-filled in every session"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "agent.json")
    args = parser.parse_args()
    # Keep the per-turn log line out of the measurement and the terminal.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    scenarios = asyncio.run(run(args.turns, args.history))

    header = (
        f"{'scenario':<14} {'calls':>5} {'turn p50':>9} {'turn p99':>9} {'bare p50':>9} "
        f"{'bare p99':>9} {'ovh p50':>8} {'ovh p99':>8} {'ovh/call p50':>13} {'turn/bare':>9} "
        f"{'client p50':>10} {'loop p50':>9} {'client-bare/call p50':>21}"
    )
    print(
        f"agent runtime overhead, {args.turns} turns per scenario, "
        f"{args.history} earlier turns in each session (ms)"
    )
    print(header)
    for name, r in scenarios.items():
        print(
            f"{name:<14} {r['model_calls_per_turn']:>5} {r['turn_ms']['p50']:>9.2f} "
            f"{r['turn_ms']['p99']:>9.2f} {r['bare_http_ms']['p50']:>9.2f} "
            f"{r['bare_http_ms']['p99']:>9.2f} {r['overhead_ms']['p50']:>8.2f} "
            f"{r['overhead_ms']['p99']:>8.2f} {r['overhead_per_call_ms']['p50']:>13.2f} "
            f"{r['turn_to_bare_ratio_p50']:>8.2f}x "
            f"{r['model_client_ms']['p50']:>10.2f} "
            f"{r['loop_overhead_beyond_client_ms']['p50']:>9.2f} "
            f"{r['client_overhead_per_call_ms']['p50']:>21.2f}"
        )
    print(
        "ovh = turn - bare HTTP; client = pingu.llm.ModelClient alone on the same requests; "
        "loop = turn - client (the agent loop, tools, events and database writes); "
        "client-bare = the model client's own cost per call"
    )
    worst = max(r["overhead_per_call_ms"]["p50"] for r in scenarios.values())
    verdict = "met" if worst < TARGET_MS_PER_CALL else "NOT met"
    print(f"target p50 overhead < {TARGET_MS_PER_CALL} ms per model call: {verdict} ({worst} ms)")

    result = {
        "benchmark": "agent",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "target_ms_per_call": TARGET_MS_PER_CALL,
        "target_met": worst < TARGET_MS_PER_CALL,
        "history_turns": args.history,
        "scenarios": scenarios,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
