"""Benchmark of the turn history: save_turn rate, rebuild time, database size.

    python bench/bench_history.py [--turns 10000] [--json PATH]

Fills one session with turns built from the real Responses API corpus (each turn: a user
message and the output items of one recorded response, plus a function_call_output for each
function call), timing `save_turn`; at 100, 1,000 and 10,000 turns it times
`load_input_history`. The same rows are then inserted with plain `sqlite3` (same pragmas,
one transaction per turn) as a baseline. Prints a table and writes JSON (default
bench/results/history.json). Targets on a 2-core machine: >= 2,000 turns/s, rebuild of
1,000 turns <= 30 ms, size linear in the number of turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pingu.history.items import encode_turn  # noqa: E402
from pingu.store import Database  # noqa: E402
from tests.corpus import CORPUS, recorded_output  # noqa: E402

CHECKPOINTS = (100, 1_000, 10_000)
SESSION = "telegram:648079060"


def _corpus_dir() -> Path:
    if not CORPUS.is_dir():
        raise SystemExit(f"corpus not found: {CORPUS}")
    return CORPUS


def _user_text(request: dict) -> str:
    content = request.get("input")
    if isinstance(content, str):
        return content
    for item in reversed(content or []):
        if isinstance(item, dict) and item.get("role") == "user":
            text = item.get("content")
            if isinstance(text, str):
                return text
            return "".join(p.get("text", "") for p in text if isinstance(p, dict))
    return "hello"


def corpus_turns() -> list[tuple[str, list[dict]]]:
    """(user message, items) for every successful recorded response with output."""
    turns = []
    for path in sorted(_corpus_dir().glob("*.json")):
        for interaction in json.loads(path.read_text())["interactions"]:
            if interaction["status"] != 200:
                continue
            response = interaction["response"]
            output = recorded_output(response)
            if not output:
                continue
            items: list[dict] = []
            for item in output:
                items.append(item)
                if item.get("type") == "function_call":
                    items.append(
                        {"type": "function_call_output", "call_id": item.get("call_id"),
                         "output": "ok: " + item.get("arguments", "")[:200]}
                    )  # fmt: skip
            turns.append((_user_text(interaction["request"]), items))
    return turns


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def _file_bytes(path: Path) -> int:
    return path.stat().st_size


def _db_bytes(path: Path) -> int:
    return sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    )


async def bench_pingu(path: Path, plan: list[tuple[str, list[dict]]], repeats: int) -> dict:
    db = await Database.open(path)
    checkpoints: list[dict] = []
    save_seconds = 0.0
    try:
        await db.history.ensure_session(SESSION, "telegram", "648079060", model="gpt-4.1-nano")
        for count, (user_message, items) in enumerate(plan, start=1):
            started = time.perf_counter()
            await db.history.save_turn(
                SESSION, user_message, items, model="gpt-4.1-nano",
                responses=[{"id": "resp_x", "model": "gpt-4.1-nano", "status": "completed"}],
            )  # fmt: skip
            save_seconds += time.perf_counter() - started
            if count in CHECKPOINTS or count == len(plan):
                samples = []
                for _ in range(repeats):
                    started = time.perf_counter()
                    history = await db.history.load_input_history(SESSION)
                    samples.append(time.perf_counter() - started)
                # fold the WAL into the file so that its size is the data's
                await db.read().execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
                checkpoints.append(
                    {"turns": count, "input_items": len(history),
                     "load_input_history_ms": _median_ms(samples),
                     "db_bytes": await asyncio.to_thread(_file_bytes, path)}
                )  # fmt: skip
    finally:
        await db.close()
    return {
        "save_turn_per_s": round(len(plan) / save_seconds, 1),
        "save_seconds": round(save_seconds, 3),
        "checkpoints": checkpoints,
        "db_bytes": _db_bytes(path),
    }


def bench_sqlite3(path: Path, plan: list[tuple[str, list[dict]]], repeats: int) -> dict:
    """Plain sqlite3, same schema, pragmas and rows, one transaction per turn."""
    setup = sqlite3.connect(path)
    setup.close()
    asyncio.run(_create_schema(path))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(
        "INSERT INTO sessions (id, channel, created_at, updated_at) VALUES (?, 'telegram', "
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
        (SESSION,),
    )
    responses = [{"id": "resp_x", "model": "gpt-4.1-nano", "status": "completed"}]
    started = time.perf_counter()
    for user_message, items in plan:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE sessions SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE id = ?",
            (SESSION,),
        )
        conn.execute(
            "INSERT INTO turns (session_id, user_message, response_json, model, status, "
            "created_at) VALUES (?, ?, ?, ?, 'completed', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            (SESSION, user_message, encode_turn(items, responses), "gpt-4.1-nano"),
        )
        conn.execute("COMMIT")
    seconds = time.perf_counter() - started
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        rows = conn.execute(
            "SELECT user_message, response_json FROM turns WHERE session_id = ? ORDER BY id",
            (SESSION,),
        ).fetchall()
        [orjson.loads(r[1]) for r in rows]
        samples.append(time.perf_counter() - started)
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    conn.close()
    return {
        "insert_per_s": round(len(plan) / seconds, 1),
        "read_and_parse_all_ms": _median_ms(samples),
        "db_bytes": _db_bytes(path),
    }


async def _create_schema(path: Path) -> None:
    db = await Database.open(path)
    await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "history.json")
    parser.add_argument("--repeats", type=int, default=5, help="rebuild timings per checkpoint")
    args = parser.parse_args()

    templates = corpus_turns()
    plan = [templates[i % len(templates)] for i in range(args.turns)]
    sizes = [len(encode_turn(items, [])) for _, items in templates]
    with tempfile.TemporaryDirectory(prefix="pingu-bench-") as tmp:
        pingu = asyncio.run(bench_pingu(Path(tmp) / "pingu.db", plan, args.repeats))
        baseline = bench_sqlite3(Path(tmp) / "baseline.db", plan, args.repeats)

    ratio = round(pingu["save_turn_per_s"] / baseline["insert_per_s"], 3)
    result = {
        "turns": args.turns,
        "turn_templates": len(templates),
        "mean_response_json_bytes": round(statistics.mean(sizes)),
        "pingu": pingu,
        "sqlite3_baseline": baseline,
        "save_rate_ratio_to_sqlite3": ratio,
        "machine": {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
                    "cpus": os.cpu_count()},
    }  # fmt: skip

    print(f"turns: {args.turns} (from {len(templates)} corpus responses, "
          f"mean response_json {result['mean_response_json_bytes']} B)")  # fmt: skip
    print(f"{'measure':<38}{'pingu':>14}{'sqlite3':>14}{'ratio':>10}")
    print(f"{'save_turn (turns/s)':<38}{pingu['save_turn_per_s']:>14,.0f}"
          f"{baseline['insert_per_s']:>14,.0f}{ratio:>10.2f}")  # fmt: skip
    for point in pingu["checkpoints"]:
        label = f"load_input_history @ {point['turns']:,} (ms)"
        print(f"{label:<38}{point['load_input_history_ms']:>14.2f}")
    last = pingu["checkpoints"][-1]["load_input_history_ms"]
    plain = baseline["read_and_parse_all_ms"]
    label = f"read+parse {args.turns:,} rows, plain (ms)"
    print(f"{label:<38}{last:>14.2f}{plain:>14.2f}{last / plain:>10.2f}")
    for point in pingu["checkpoints"]:
        label = f"db size @ {point['turns']:,} (bytes/turn)"
        print(f"{label:<38}{point['db_bytes'] / point['turns']:>14,.0f}")
    print(f"{'db size total (MB)':<38}{pingu['db_bytes'] / 1e6:>14.1f}"
          f"{baseline['db_bytes'] / 1e6:>14.1f}")  # fmt: skip

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {args.json}")


if __name__ == "__main__":
    main()
