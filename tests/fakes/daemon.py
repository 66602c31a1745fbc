"""Run the real `pingu gateway` process in end-to-end tests.

The daemon runs as a subprocess (`python -m pingu gateway`) with a config written to the
test's tmp_path; the fakes (Responses API, Telegram) run in the test's event loop and the
daemon reaches them over 127.0.0.1. Its stderr (JSON log lines) is collected as it comes,
so a test can wait for a log event and, at the end, inspect everything it logged.

    async def test_chat(fake_responses, pingu_daemon, tmp_path):
        config = write_config(tmp_path, fake_responses, token="gw-secret")
        daemon = await pingu_daemon(config)          # started, `ready` seen
        async with aiohttp.ClientSession() as http:
            r = await http.get(daemon.url("/healthz"))
        code = await daemon.terminate()              # SIGTERM, wait for the exit code
        assert code == 0
        assert "gw-secret" not in daemon.stderr

`pingu_daemon(config, *extra_args, env=..., ready=True, grace=...)` is a fixture (registered
in tests/conftest.py) that starts a daemon and kills every one still running at teardown.
`DaemonProcess.start(...)` does the same without the fixture (e.g. in a module-scoped
fixture). `write_config(...)` writes a minimal valid config: the fake model, an optional
gateway token, the database and state in tmp_path, JSON logs; `extra` is appended
verbatim (e.g. a `[channel.tg]` table for the Telegram fake).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

# Environment variables a developer's shell (or CI) might set that would change what
# the daemon does; tests control these explicitly.
_SCRUBBED_ENV = (
    "PINGU_CONFIG",
    "PINGU_STATE_DIR",
    "PINGU_DB",
    "PINGU_SHUTDOWN_GRACE",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "TELEGRAM_BOT_TOKEN",
    "LOG_LEVEL",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
)

START_TIMEOUT_S = 30.0  # a cold start imports openai and aiohttp on a busy machine


class DaemonExited(AssertionError):
    """The daemon exited while a test waited for something else."""


def _toml_string(value: str | Path) -> str:
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def write_config(
    tmp_path: Path,
    fake_responses: Any | None = None,
    *,
    token: str | None = None,
    addr: str = "127.0.0.1:0",
    api_key: str | None = None,
    model: str = "gpt-4.1-nano",
    max_body_bytes: int | None = None,
    log_level: str = "info",
    extra: str = "",
    name: str = "config.toml",
) -> Path:
    """A config for one daemon: the fake model (if given), the gateway, state in tmp_path."""
    state = tmp_path / "state"
    lines = [
        f"[state]\ndir = {_toml_string(state)}\n",
        f"[db]\npath = {_toml_string(state / 'pingu.db')}\n",
    ]
    if fake_responses is not None:
        key = api_key if api_key is not None else fake_responses.api_key
        lines.append(
            "[llm.openai]\n"
            f"base_url = {_toml_string(fake_responses.url)}\n"
            f"api_key = {_toml_string(key)}\n"
            f"model = {_toml_string(model)}\n"
            "max_retries = 0\n"
            "timeout_s = 30\n"
        )
    gateway = f"[gateway]\naddr = {_toml_string(addr)}\n"
    if token is not None:
        gateway += f"token = {_toml_string(token)}\n"
    if max_body_bytes is not None:
        gateway += f"max_body_bytes = {max_body_bytes}\n"
    lines.append(gateway)
    lines.append(f'[log]\nlevel = "{log_level}"\nformat = "json"\n')
    if extra:
        lines.append(extra)
    path = tmp_path / name
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def daemon_env(
    extra: Mapping[str, str] | None = None, *, home: Path | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    if home is not None:
        env["HOME"] = str(home)
    env.update(extra or {})
    return env


class DaemonProcess:
    """A running `pingu gateway` subprocess and what it has written to stderr."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lines: list[str] = []  # every stderr line, in order
        self.events: list[dict[str, Any]] = []  # the lines that are JSON log events
        self.stdout = ""
        self.http_host: str | None = None
        self.http_port: int | None = None
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read_stderr())
        self._stdout_reader = asyncio.create_task(self._read_stdout())

    @classmethod
    async def start(
        cls,
        config: Path | None,
        *args: str,
        env: Mapping[str, str] | None = None,
        ready: bool = True,
        grace: float | None = None,
        cwd: Path | None = None,
    ) -> DaemonProcess:
        """Start `python -m pingu gateway [--config CONFIG] [--grace G] ARGS...`; with
        `ready`, wait for the `ready` log event (and raise if the process exits first)."""
        argv = [sys.executable, "-m", "pingu", "gateway"]
        if config is not None:
            argv += ["--config", str(config)]
        if grace is not None:
            argv += ["--grace", str(grace)]
        argv += list(args)
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else daemon_env(),
            cwd=cwd,
        )
        daemon = cls(process)
        if ready:
            try:
                event = await daemon.wait_for("ready", timeout=START_TIMEOUT_S)
            except BaseException:
                await daemon.kill()
                raise
            daemon.http_host = event.get("http_host")
            daemon.http_port = event.get("http_port")
        return daemon

    # -- reading ------------------------------------------------------------------------

    async def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            async with self._changed:
                self.lines.append(line)
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict):
                        self.events.append(event)
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        self.stdout = (await self.process.stdout.read()).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        assert self.http_port is not None, "the daemon has not reported its HTTP port"
        return f"http://127.0.0.1:{self.http_port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def find(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        """Log events named `event` whose fields include `fields`."""
        return [
            e
            for e in self.events
            if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
        ]

    async def wait_for(
        self,
        event: str,
        *,
        timeout: float = 10.0,  # noqa: ASYNC109 - the call style of the other fakes
        **fields: Any,
    ) -> dict[str, Any]:
        """The first log event named `event` (with `fields`), waiting for it to appear."""

        def found() -> list[dict[str, Any]] | None:
            return self.find(event, **fields) or None

        async def wait() -> dict[str, Any]:
            async with self._changed:
                while True:
                    hits = found()
                    if hits:
                        return hits[0]
                    if self._reader.done():
                        raise DaemonExited(
                            f"daemon exited (code {self.process.returncode}) before logging "
                            f"{event!r}; stderr:\n{self.stderr}"
                        )
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"no {event!r} log event within {timeout} s; stderr:\n{self.stderr}"
            ) from None

    # -- stopping -----------------------------------------------------------------------

    def send_signal(self, sig: int = signal.SIGTERM) -> None:
        if self.process.returncode is None:
            self.process.send_signal(sig)

    async def wait(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        """The exit code, once the process has exited and its output is read."""
        code = await asyncio.wait_for(self.process.wait(), timeout)
        await asyncio.wait_for(asyncio.gather(self._reader, self._stdout_reader), timeout)
        return code

    async def terminate(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        """SIGTERM, then the exit code."""
        self.send_signal(signal.SIGTERM)
        return await self.wait(timeout)

    async def kill(self) -> None:
        """Make sure the process is gone (teardown)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        with contextlib.suppress(Exception):
            await self.wait(10)


DaemonStarter = Callable[..., Awaitable[DaemonProcess]]


@contextlib.asynccontextmanager
async def running_daemons() -> AsyncIterator[DaemonStarter]:
    """A starter for daemons that are all killed on exit (the fixture's body)."""
    started: list[DaemonProcess] = []

    async def start(config: Path | None, *args: str, **kwargs: Any) -> DaemonProcess:
        daemon = await DaemonProcess.start(config, *args, **kwargs)
        started.append(daemon)
        return daemon

    try:
        yield start
    finally:
        for daemon in started:
            await daemon.kill()


@pytest.fixture
async def pingu_daemon() -> AsyncIterator[DaemonStarter]:
    """`await pingu_daemon(config_path, *args, env=None, ready=True, grace=None)`."""
    async with running_daemons() as start:
        yield start


async def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,  # noqa: ASYNC109
    interval: float = 0.05,
) -> None:
    """Poll `predicate` (sync or async) until it is true: for state outside this process
    (a subprocess, a database file) that nothing can signal."""

    async def poll() -> None:
        while True:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            await asyncio.sleep(interval)

    await asyncio.wait_for(poll(), timeout)


def sse_events(body: str) -> list[tuple[str, Any]]:
    """Parse a Server-Sent Events body into (event name, decoded JSON data) pairs."""
    events: list[tuple[str, Any]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


__all__: Sequence[str] = (
    "DaemonExited",
    "DaemonProcess",
    "daemon_env",
    "pingu_daemon",
    "running_daemons",
    "sse_events",
    "wait_until",
    "write_config",
)
