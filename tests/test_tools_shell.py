"""The shell tool with real processes: output, exit codes, caps, timeouts, cancellation."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from pingu.tools.base import ToolContext
from pingu.tools.registry import ToolOutcome, build_tools, run_tool
from pingu.tools.shell import ShellTool


async def _noop_emit(event: object) -> None:
    return None


def ctx_for(workspace: Path, timeout_s: float = 30.0) -> ToolContext:
    return ToolContext("s1", "main", workspace, _noop_emit, None, timeout_s)


async def shell(
    workspace: Path,
    command: str,
    timeout_s: int | None = None,
    *,
    tool: ShellTool | None = None,
    ctx_timeout_s: float = 30.0,
) -> ToolOutcome:
    tools = {"shell": tool} if tool else build_tools(["shell"])
    args = json.dumps({"command": command, "timeout_s": timeout_s})
    return await run_tool(tools, "shell", args, ctx_for(workspace, ctx_timeout_s))


def process_gone(pid: int) -> bool:
    """Gone or a zombie: an orphan is reaped by PID 1, which may take its time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def wait_until(condition: Callable[[], object], limit_s: float = 10.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while loop.time() < deadline:
        if condition():
            return True
        await asyncio.sleep(0.02)
    return bool(condition())


def _pid_in(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text else None


async def read_pid(path: Path) -> int:
    """The pid a command wrote to `path` (waiting for it to appear)."""
    assert await wait_until(lambda: _pid_in(path))
    pid = _pid_in(path)
    assert pid is not None
    return pid


async def test_output_and_exit_code(tmp_path: Path) -> None:
    out = await shell(tmp_path, "echo out; echo err >&2; exit 7")
    assert out == ToolOutcome("exit code: 7\nout\nerr", False)
    out = await shell(tmp_path, "true")
    assert out == ToolOutcome("exit code: 0\n(no output)", False)


async def test_runs_in_the_workspace_with_home_there(tmp_path: Path) -> None:
    (tmp_path / "marker.txt").write_text("here")
    out = await shell(tmp_path, 'cat marker.txt; echo; pwd; echo "$HOME"; touch made-by-shell')
    assert out.output == f"exit code: 0\nhere\n{tmp_path}\n{tmp_path}"
    assert (tmp_path / "made-by-shell").exists()


async def test_killed_by_signal_is_reported(tmp_path: Path) -> None:
    out = await shell(tmp_path, "kill -9 $$")
    assert out == ToolOutcome("exit code: -9 (killed by SIGKILL)\n(no output)", False)


async def test_output_cap_keeps_head_and_tail(tmp_path: Path) -> None:
    command = "printf 'HEAD'; head -c 50000 /dev/zero | tr '\\0' x; printf 'TAIL'"
    out = await shell(tmp_path, command)
    assert not out.is_error
    assert out.output.startswith("exit code: 0\nHEAD" + "x" * 100)
    assert out.output.endswith("x" * 100 + "TAIL")
    kept = 4 * 1024 + 6 * 1024
    assert f"\n[... {50008 - kept} bytes truncated ...]\n" in out.output
    assert len(out.output) < kept + 100


async def test_chatty_command_is_drained(tmp_path: Path) -> None:
    # 20 MB through the pipe: it must not block, and memory holds only the head and tail.
    out = await shell(tmp_path, "yes hello | head -c 20000000; echo; echo done")
    assert not out.is_error
    assert "bytes truncated" in out.output
    assert out.output.endswith("\ndone")


async def test_timeout_kills_children(tmp_path: Path) -> None:
    command = "sleep 300 & echo $! > grandchild.pid; echo started; sleep 300"
    out = await shell(tmp_path, command, timeout_s=1)
    assert out.is_error
    assert out.output == (
        "error: the command timed out after 1 s; it and every process it started were "
        "killed.\noutput so far:\nstarted"
    )
    grandchild = await read_pid(tmp_path / "grandchild.pid")
    assert await wait_until(lambda: process_gone(grandchild))


async def test_timeout_sigkills_what_ignores_sigterm(tmp_path: Path) -> None:
    tool = ShellTool(kill_grace_s=0.3)
    command = "trap '' TERM; sleep 300 & echo $! > stubborn.pid; wait"
    out = await shell(tmp_path, command, timeout_s=1, tool=tool)
    assert out.is_error and "timed out after 1 s" in out.output
    stubborn = await read_pid(tmp_path / "stubborn.pid")
    assert await wait_until(lambda: process_gone(stubborn))


async def test_tool_limit_caps_the_requested_timeout(tmp_path: Path) -> None:
    out = await shell(tmp_path, "sleep 300", timeout_s=3600, ctx_timeout_s=0.5)
    assert out.is_error
    assert out.output.startswith("error: the command timed out after 0.5 s")


async def test_cancellation_kills_the_process_group(tmp_path: Path) -> None:
    command = "sleep 300 & echo $! > grandchild.pid; sleep 300"
    task = asyncio.create_task(shell(tmp_path, command))
    grandchild = await read_pid(tmp_path / "grandchild.pid")
    assert not process_gone(grandchild)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until(lambda: process_gone(grandchild))


async def test_detached_background_process_does_not_hold_the_call(tmp_path: Path) -> None:
    # A background process that redirects its output keeps running after the call
    # (so an agent can start a server); one that keeps our pipe is cut off after a moment.
    command = "sleep 300 > /dev/null 2>&1 & echo $! > bg.pid; echo started"
    out = await shell(tmp_path, command)
    background = await read_pid(tmp_path / "bg.pid")
    try:
        assert out == ToolOutcome("exit code: 0\nstarted", False)
        assert not process_gone(background)
    finally:
        os.kill(background, signal.SIGKILL)

    command = "sleep 300 & echo $! > bg2.pid; echo started"
    out = await shell(tmp_path, command)
    background = await read_pid(tmp_path / "bg2.pid")
    try:
        assert out.output == (
            "exit code: 0\nstarted\n[background processes still hold the output; "
            "their further output is not shown]"
        )
    finally:
        os.kill(background, signal.SIGKILL)


async def test_secrets_are_not_in_the_child_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "OPENAI_API_KEY": "sk-test-openai-0001",
        "TELEGRAM_BOT_TOKEN": "123456:telegram-secret-0002",
        "PINGU_GATEWAY_TOKEN": "gateway-secret-0003",
        "PINGU_CONFIG": "/etc/pingu-config-0004",
        "GITHUB_TOKEN": "ghp_secret0005",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-0006",
        "ANTHROPIC_API_KEY": "anthropic-secret-0007",
        "db_password": "hunter2-0008",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS_SETTING", "kept-0009")
    out = await shell(tmp_path, "env")
    assert not out.is_error
    for name, value in secrets.items():
        assert name not in out.output
        assert value not in out.output
    assert "HARMLESS_SETTING=kept-0009" in out.output
    assert "PATH=" in out.output


async def test_bad_arguments(tmp_path: Path) -> None:
    out = await shell(tmp_path, "   ")
    assert out == ToolOutcome("error: 'command' is empty", True)
    out = await shell(tmp_path, "echo hi", timeout_s=0)
    assert out.is_error and "'timeout_s' must be at least 1" in out.output


async def test_missing_workspace_is_an_error_string(tmp_path: Path) -> None:
    out = await shell(tmp_path / "does-not-exist", "echo hi")
    assert out.is_error
    assert out.output.startswith("error: could not start the command: No such file")
