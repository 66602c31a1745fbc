"""`pingu chat` for real (a subprocess talking to the fake Responses API over TCP) and
`pingu usage` over a real database."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from click.testing import CliRunner

from pingu.agent.cli import usage_command
from pingu.store import Database, UsageRecord
from tests.fakes.responses_api import FakeResponsesAPI, function_calls, text
from tests.test_agent_helpers import config_text

REPO = Path(__file__).resolve().parent.parent


def write_config(fake: FakeResponsesAPI, tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(config_text(fake, tmp_path))
    return path


async def start_chat(config: Path, *args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in ("PINGU_CONFIG", "OPENAI_API_KEY")}
    env["NO_COLOR"] = "1"
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pingu", "chat", "--config", str(config), *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=env,
    )  # fmt: skip


async def read_until(proc: asyncio.subprocess.Process, marker: str, seen: list[str]) -> str:
    """Read stdout until `marker` shows up; everything read so far is kept in `seen`."""
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while marker not in "".join(seen):
            chunk = await proc.stdout.read(4096)
            if not chunk:
                stderr = await proc.stderr.read() if proc.stderr else b""
                raise AssertionError(
                    f"chat exited before {marker!r}; stdout={''.join(seen)!r} stderr={stderr!r}"
                )
            seen.append(chunk.decode())
    return "".join(seen)


async def finish(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    try:
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_chat_streams_answers_shows_tools_and_stores_the_turns(
    fake_responses: FakeResponsesAPI, tmp_path: Path
) -> None:
    fake = fake_responses
    fake.queue(
        function_calls(("shell", {"command": "echo from-shell", "timeout_s": None}, "c1")),
        text("The shell said from-shell.", chunks=4),
        text("Second answer."),
    )
    # A run of a daemon that may be using the same database right now.
    db = await Database.open(tmp_path / "pingu.db")
    daemon_run = await db.executions.start("tg:1", "default", {"message": "busy"})
    await db.close()

    proc = await start_chat(write_config(fake, tmp_path), "--session", "cli:t")
    assert proc.stdin is not None
    proc.stdin.write(b"run echo\n\nsecond question\n")
    await proc.stdin.drain()
    proc.stdin.close()  # Ctrl-D
    code, out, err = await finish(proc)

    assert code == 0, err
    assert "⚙ shell:" in out and "echo from-shell" in out
    assert "The shell said from-shell.\n" in out
    assert "Second answer.\n" in out
    assert out.index("The shell said") < out.index("Second answer.")
    assert fake.api_key not in out + err
    assert [b["input"][-1] for b in fake.bodies][2] == {
        "role": "user",
        "content": "second question",
    }

    db = await Database.open(tmp_path / "pingu.db")
    try:
        turns = await db.history.list_turns("cli:t")
        assert [(t.user_message, t.status, t.reply_text) for t in turns] == [
            ("run echo", "completed", "The shell said from-shell."),
            ("second question", "completed", "Second answer."),
        ]
        session = await db.history.get_session("cli:t")
        assert session.channel == "cli"
        assert len(await db.executions.list_for_session("cli:t")) == 2
        # `pingu chat` does not mark other runs interrupted.
        assert (await db.executions.get(daemon_run)).status == "running"
    finally:
        await db.close()


async def test_ctrl_c_cancels_the_turn_and_the_chat_goes_on(
    fake_responses: FakeResponsesAPI, tmp_path: Path
) -> None:
    fake = fake_responses
    fake.queue(
        function_calls(("shell", {"command": "sleep 30", "timeout_s": None}, "slow")),
        text("Back again."),
    )
    proc = await start_chat(write_config(fake, tmp_path))
    assert proc.stdin is not None
    seen: list[str] = []
    try:
        proc.stdin.write(b"sleep a while\n")
        await proc.stdin.drain()
        await read_until(proc, "⚙ shell", seen)
        proc.send_signal(signal.SIGINT)
        await read_until(proc, "[cancelled]", seen)
        proc.stdin.write(b"are you there?\n")
        await proc.stdin.drain()
        await read_until(proc, "Back again.", seen)
        proc.stdin.write(b"/exit\n")
        await proc.stdin.drain()
    finally:
        code, _, err = await finish(proc)
    assert code == 0, err

    # The model's second request carries the cancelled call with its output.
    replay = fake.bodies[1]["input"]
    assert replay[-2] == {
        "type": "function_call_output",
        "call_id": "slow",
        "output": "Not run: the turn was cancelled by the user.",
    }
    db = await Database.open(tmp_path / "pingu.db")
    try:
        turns = await db.history.list_turns("cli:default")
        assert [t.status for t in turns] == ["cancelled", "completed"]
    finally:
        await db.close()


async def test_chat_with_an_unknown_agent_says_which_exist(
    fake_responses: FakeResponsesAPI, tmp_path: Path
) -> None:
    proc = await start_chat(write_config(fake_responses, tmp_path), "--agent", "ghost")
    code, _, err = await finish(proc)
    assert code == 2
    assert "unknown agent 'ghost'" in err


def test_usage_prints_totals_by_model_agent_and_day(tmp_path: Path) -> None:
    db_path = tmp_path / "pingu.db"
    day1 = int(datetime(2026, 3, 1, 12, tzinfo=UTC).timestamp() * 1000)
    day2 = int(datetime(2026, 3, 2, 12, tzinfo=UTC).timestamp() * 1000)

    async def record() -> None:
        db = await Database.open(db_path)
        try:
            for session, agent, model, cost, at in [
                ("s1", "default", "gpt-4.1-nano", 0.0012, day1),
                ("s1", "coder", "gpt-4.1-nano", 0.0008, day2),
                ("s2", "default", "mystery", None, day2),
            ]:
                await db.usage.record(
                    UsageRecord(
                        provider="openai",
                        model=model,
                        input_tokens=100,
                        output_tokens=10,
                        session_id=session,
                        agent_name=agent,
                        cost_estimate=cost,
                        created_at=at,
                    )
                )
        finally:
            await db.close()

    asyncio.run(record())
    config = tmp_path / "config.toml"
    config.write_text(f'[db]\npath = "{db_path}"\n')
    runner = CliRunner()

    result = runner.invoke(usage_command, ["--config", str(config)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "By model" in out and "By agent" in out and "By day" in out
    nano = next(line for line in out.splitlines() if line.strip().startswith("gpt-4.1-nano"))
    assert nano.split()[1:3] == ["2", "200"] and "0.0020" in nano
    mystery = next(line for line in out.splitlines() if line.strip().startswith("mystery"))
    assert mystery.split()[-1] == "?"
    assert any(line.strip().startswith("2026-03-02") for line in out.splitlines())

    only_s1 = runner.invoke(usage_command, ["--config", str(config), "--session", "s1"]).output
    assert "mystery" not in only_s1 and "coder" in only_s1

    since = runner.invoke(usage_command, ["--config", str(config), "--since", "2026-03-02"])
    day_lines = [line.strip() for line in since.output.splitlines() if line.strip()[:4] == "2026"]
    assert [line.split()[0] for line in day_lines] == ["2026-03-02"]

    bad = runner.invoke(usage_command, ["--config", str(config), "--since", "March"])
    assert bad.exit_code == 2 and "'March' does not match the format '%Y-%m-%d'" in bad.output


async def test_piped_chat_exits_1_when_its_last_turn_failed(
    fake_responses: FakeResponsesAPI, tmp_path: Path
) -> None:
    # No API key anywhere (start_chat drops OPENAI_API_KEY from the environment).
    config = tmp_path / "config.toml"
    config.write_text(config_text(fake_responses, tmp_path).replace("api_key", "# api_key"))
    proc = await start_chat(config)
    assert proc.stdin is not None
    proc.stdin.write(b"hi\n")
    proc.stdin.close()
    code, out, err = await finish(proc)
    assert code == 1, (out, err)
    assert "error:" in out

    # With the key, the same piped chat answers and exits 0.
    config.write_text(config_text(fake_responses, tmp_path))
    fake_responses.queue(text("Fine now."))
    proc = await start_chat(config)
    assert proc.stdin is not None
    proc.stdin.write(b"hi again\n")
    proc.stdin.close()
    code, out, _ = await finish(proc)
    assert code == 0 and "Fine now." in out
