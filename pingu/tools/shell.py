"""The `shell` tool: run a command with `sh -c` in the agent's workspace.

The command runs in a new session (its own process group) so that on timeout or
cancellation every process it started is killed, not just the shell. Output is read as it
comes, keeping a head and a tail, so a chatty command can neither block on a full pipe nor
fill memory. The child does not inherit Pingu's secrets.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pingu.tools.base import ToolContext, ToolError

DEFAULT_TIMEOUT_S = 60
OUTPUT_HEAD_BYTES = 4 * 1024
OUTPUT_TAIL_BYTES = 6 * 1024
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL
DRAIN_AFTER_EXIT_S = 1.0  # how long to wait for output from background processes

_SECRET_ENV_NAMES = frozenset({"OPENAI_API_KEY", "TELEGRAM_BOT_TOKEN", "PINGU_GATEWAY_TOKEN"})
_SECRET_ENV_MARKERS = ("API_KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_secret_env_name(name: str) -> bool:
    upper = name.upper()
    return (
        upper in _SECRET_ENV_NAMES
        or upper.startswith("PINGU_")
        or any(marker in upper for marker in _SECRET_ENV_MARKERS)
    )


def child_environment(base: Mapping[str, str], workspace: Path) -> dict[str, str]:
    """The environment of a shell command: Pingu's own without anything secret-looking,
    with HOME set to the workspace so that dotfiles and caches the command writes stay
    there and `~` means the workspace."""
    env = {k: v for k, v in base.items() if not is_secret_env_name(k)}
    env["HOME"] = str(workspace)
    env["PWD"] = str(workspace)
    return env


class OutputCapture:
    """Keeps the first `head` and the last `tail` bytes of a stream and counts the rest."""

    def __init__(self, head: int = OUTPUT_HEAD_BYTES, tail: int = OUTPUT_TAIL_BYTES) -> None:
        self._head_cap = head
        self._tail_cap = tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    def text(self) -> str:
        dropped = self.total - len(self._head) - len(self._tail)
        if dropped <= 0:
            return (self._head + self._tail).decode("utf-8", errors="replace")
        return (
            self._head.decode("utf-8", errors="replace")
            + f"\n[... {dropped} bytes truncated ...]\n"
            + self._tail.decode("utf-8", errors="replace")
        )


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Zombies do not count: orphaned
    grandchildren may stay zombies for a while if PID 1 is slow to reap them."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no procfs: trust kill(0)
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


async def terminate_group(proc: asyncio.subprocess.Process, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the process group, give it `grace_s` to exit, then SIGKILL what is left."""
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while loop.time() < deadline:
        if proc.returncode is not None and not await asyncio.to_thread(_group_alive, pgid):
            break
        await asyncio.sleep(0.05)
    else:
        _signal_group(pgid, signal.SIGKILL)
    await proc.wait()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"exit code: {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"exit code: {code}"
    return f"exit code: {code}"


class ShellTool:
    name = "shell"
    description = (
        "Run a shell command with `sh -c` in your workspace directory (HOME is the workspace) "
        "and return its exit code and combined stdout/stderr. Output beyond about 10 KB is "
        "cut in the middle with a note, so filter long output (grep, head, tail). "
        f"`timeout_s` defaults to {DEFAULT_TIMEOUT_S} s and is capped by the per-tool time "
        "limit; on timeout the command and everything it started are killed. stdin is empty: "
        "do not run interactive programs."
    )
    parameters: dict[str, Any] = {  # noqa: RUF012 - the Tool protocol wants a plain attribute
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line for sh -c."},
            "timeout_s": {
                "type": ["integer", "null"],
                "description": f"Seconds before it is killed; null for {DEFAULT_TIMEOUT_S}.",
            },
        },
        "required": ["command", "timeout_s"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        *,
        default_timeout_s: float = DEFAULT_TIMEOUT_S,
        kill_grace_s: float = KILL_GRACE_S,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.default_timeout_s = default_timeout_s
        self.kill_grace_s = kill_grace_s
        # run_tool's hard stop comes this much after ctx.timeout_s, leaving room to kill
        # the process group and report the partial output ourselves.
        self.timeout_grace_s = kill_grace_s + DRAIN_AFTER_EXIT_S + 1.0
        self._base_env = base_env  # None: os.environ at run time

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command: str = args["command"]
        if not command.strip():
            raise ToolError("'command' is empty")
        requested = args.get("timeout_s")
        if requested is not None and requested < 1:
            raise ToolError("'timeout_s' must be at least 1 (or null for the default)")
        timeout_s = min(float(requested or self.default_timeout_s), ctx.timeout_s)
        env = child_environment(
            os.environ if self._base_env is None else self._base_env, ctx.workspace
        )
        capture = OutputCapture()
        code, timed_out, detached = await self._execute(
            command, ctx.workspace, env, timeout_s, capture
        )
        output = capture.text().rstrip("\n")
        if timed_out:
            raise ToolError(
                f"the command timed out after {timeout_s:g} s; it and every process it "
                f"started were killed.\noutput so far:\n{output or '(no output)'}"
            )
        lines = [_describe_exit(code), output if output else "(no output)"]
        if detached:
            lines.append(
                "[background processes still hold the output; their further output is not shown]"
            )
        return "\n".join(lines)

    async def _execute(
        self,
        command: str,
        cwd: Path,
        env: dict[str, str],
        timeout_s: float,
        capture: OutputCapture,
    ) -> tuple[int, bool, bool]:
        loop = asyncio.get_running_loop()
        # Our own pipe rather than PIPE: background processes may keep its write end open
        # after the shell exits, and we must be able to stop reading and close it.
        read_fd, write_fd = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                "sh",
                "-c",
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            raise ToolError(f"could not start the command: {exc.strerror or exc}") from None
        finally:
            os.close(write_fd)

        reader = asyncio.StreamReader()
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
            )
        except BaseException:
            _signal_group(proc.pid, signal.SIGKILL)
            raise

        async def pump() -> None:
            while chunk := await reader.read(65536):
                capture.feed(chunk)

        pump_task = asyncio.create_task(pump())
        timed_out = False
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
                await terminate_group(proc, self.kill_grace_s)
            done, _ = await asyncio.wait({pump_task}, timeout=DRAIN_AFTER_EXIT_S)
            detached = not done
        except BaseException:
            # Cancelled (or failing): nobody will read the output; stop everything now.
            _signal_group(proc.pid, signal.SIGKILL)
            raise
        finally:
            pump_task.cancel()
            transport.close()
        code = proc.returncode if proc.returncode is not None else -1
        return code, timed_out, detached
