"""Benchmark: many Telegram chats at once through the real `pingu gateway` process.

    python bench/bench_telegram.py [--chats 200] [--messages 5] [--delay 0.2] [--json PATH]

Every chat sends all its messages at once; the fake model answers each after `--delay`
seconds. Since a chat's messages are answered one after another, the ideal total time is
messages x delay. Reported: the total next to that ideal and next to one-at-a-time
processing (a few strictly sequential turns measured in the same run, extrapolated to
all messages), p50/p99 from update to final reply, peak RSS (VmHWM) and idle RSS after
start (VmRSS), whether every chat's answers came in order.

The fake Telegram and the fake model run in this process, on the same machine: their CPU
time competes with the daemon's, so the numbers are an upper bound of Pingu's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.daemon import DaemonProcess, daemon_env, write_config  # noqa: E402
from tests.fakes.responses_api import FakeResponsesAPI, Reply, slow, text  # noqa: E402
from tests.fakes.telegram_api import FakeTelegram  # noqa: E402

TARGET_RATIO = 1.5
TARGET_IDLE_RSS_MB = 80.0
SEQUENTIAL_SAMPLE = 10


def proc_status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (or of one of its threads), from /proc."""
    stat = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def user_text(body: dict[str, Any]) -> str:
    for item in reversed(body["input"]):
        if item.get("role") == "user":
            content = item["content"]
            return content if isinstance(content, str) else "".join(p["text"] for p in content)
    return ""


class ReplyClock:
    """When each expected final answer first became visible in the fake Telegram."""

    def __init__(self, tg: FakeTelegram) -> None:
        self._tg = tg
        self._seen = 0
        self.pushed_at: dict[str, float] = {}  # expected answer -> push time
        self.answered_at: dict[str, float] = {}

    def expect(self, answer: str) -> None:
        self.pushed_at[answer] = time.monotonic()

    def scan(self) -> bool:
        calls = self._tg.sent
        now = time.monotonic()
        for call in calls[self._seen :]:
            if call.ok and call.method.lower() in ("sendmessage", "editmessagetext"):
                answer = call.params.get("text")
                if answer in self.pushed_at and answer not in self.answered_at:
                    self.answered_at[answer] = now
        self._seen = len(calls)
        return len(self.answered_at) >= len(self.pushed_at)

    def latencies(self, answers: list[str]) -> list[float]:
        return [self.answered_at[a] - self.pushed_at[a] for a in answers]


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tg = await FakeTelegram().start()
    model = FakeResponsesAPI()
    await model.start()

    def respond(body: dict[str, Any]) -> Reply:
        return slow(text(f"Answer to: {user_text(body)}"), delay_s=args.delay)

    model.responder = respond
    chats = [10_000 + n for n in range(args.chats)]
    sequential_chat = 9_999
    with tempfile.TemporaryDirectory(prefix="pingu-bench-") as tmp:
        users = ", ".join(str(c) for c in [*chats, sequential_chat])
        extra = (
            '[channel.tg]\ntype = "telegram"\n[channel.tg.settings]\n'
            f'bot_token = "{tg.token}"\napi_base_url = "{tg.url}"\n'
            f"allowed_users = [{users}]\npoll_timeout_s = 10\n"
        )
        config = write_config(Path(tmp), model, log_level=args.log_level, extra=extra)
        daemon = await DaemonProcess.start(config, env=daemon_env())
        try:
            await tg.wait_for(lambda: tg.is_polling, timeout=30)
            await asyncio.sleep(1.0)
            idle_rss = proc_status_mb(daemon.pid, "VmRSS")

            # Strictly one at a time: each message waits for the previous answer.
            clock = ReplyClock(tg)
            sequential: list[float] = []
            for n in range(SEQUENTIAL_SAMPLE):
                answer = f"Answer to: seq {n}"
                clock.expect(answer)
                tg.push_text(sequential_chat, sequential_chat, f"seq {n}")
                await tg.wait_for(clock.scan, timeout=60)
                sequential.extend(clock.latencies([answer]))
            await tg.wait_until_idle(quiet_s=0.5, timeout=30)

            # All chats at once.
            clock = ReplyClock(tg)
            expected: dict[int, list[str]] = {}
            calls_before = len(tg.sent)
            started = time.monotonic()
            daemon_cpu = cpu_seconds(daemon.pid)
            # The event loop's thread, as opposed to aiosqlite's and asyncio's workers.
            loop_cpu = cpu_seconds(daemon.pid, daemon.pid)
            own_cpu = resource.getrusage(resource.RUSAGE_SELF)
            for chat in chats:
                expected[chat] = []
                for n in range(args.messages):
                    answer = f"Answer to: chat {chat} message {n}"
                    clock.expect(answer)
                    expected[chat].append(answer)
                    tg.push_text(chat, chat, f"chat {chat} message {n}")
            await tg.wait_for(clock.scan, timeout=600)
            total = max(clock.answered_at.values()) - started
            daemon_cpu = cpu_seconds(daemon.pid) - daemon_cpu
            loop_cpu = cpu_seconds(daemon.pid, daemon.pid) - loop_cpu
            own = resource.getrusage(resource.RUSAGE_SELF)
            fakes_cpu = own.ru_utime + own.ru_stime - own_cpu.ru_utime - own_cpu.ru_stime
            await tg.wait_until_idle(quiet_s=0.5, timeout=60)
            peak_rss = proc_status_mb(daemon.pid, "VmHWM")
            # What the daemon asked of the Bot API for these messages (getUpdates aside).
            api_calls = Counter(
                call.method for call in tg.sent[calls_before:] if call.method != "getUpdates"
            )
            in_order = all(tg.chat_texts(chat) == expected[chat] for chat in chats)
            exit_code = await daemon.terminate()
        finally:
            await daemon.kill()
            await tg.stop()
            await model.close()

    latencies = clock.latencies([a for answers in expected.values() for a in answers])
    messages = args.chats * args.messages
    ideal = args.messages * args.delay
    per_turn_sequential = statistics.mean(sequential)
    one_at_a_time = per_turn_sequential * messages
    return {
        "chats": args.chats,
        "messages_per_chat": args.messages,
        "model_delay_s": args.delay,
        "total_s": round(total, 3),
        "ideal_s": round(ideal, 3),
        "ratio_to_ideal": round(total / ideal, 2),
        "target_ratio": TARGET_RATIO,
        "one_at_a_time_s": round(one_at_a_time, 1),
        "one_at_a_time_note": (
            f"extrapolated: mean of {SEQUENTIAL_SAMPLE} strictly sequential turns "
            f"({per_turn_sequential * 1000:.0f} ms) x {messages} messages"
        ),
        "speedup_vs_one_at_a_time": round(one_at_a_time / total, 1),
        "latency_p50_s": round(percentile(latencies, 50), 3),
        "latency_p99_s": round(percentile(latencies, 99), 3),
        "order_kept_in_every_chat": in_order,
        "daemon_cpu_s": round(daemon_cpu, 2),
        "daemon_cpu_event_loop_thread_s": round(loop_cpu, 2),
        "fakes_cpu_s": round(fakes_cpu, 2),
        "idle_rss_mb": round(idle_rss, 1),
        "target_idle_rss_mb": TARGET_IDLE_RSS_MB,
        "peak_rss_mb": round(peak_rss, 1),
        "daemon_exit_code": exit_code,
        "bot_api_calls": dict(sorted(api_calls.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.2, help="fake model delay, seconds")
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "telegram.json")
    args = parser.parse_args()
    result = asyncio.run(run(args))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    verdict = []
    verdict.append(
        f"total {'within' if result['ratio_to_ideal'] <= TARGET_RATIO else 'ABOVE'} "
        f"{TARGET_RATIO}x of ideal"
    )
    verdict.append(f"order {'kept' if result['order_kept_in_every_chat'] else 'BROKEN'}")
    verdict.append(
        f"idle RSS {'under' if result['idle_rss_mb'] < TARGET_IDLE_RSS_MB else 'ABOVE'} "
        f"{TARGET_IDLE_RSS_MB:.0f} MB"
    )
    print("; ".join(verdict))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
