"""`pingu chat` (talk to an agent in the terminal) and `pingu usage` (token and cost totals).

`pingu chat` goes through the same runtime and database as the daemon: what you say here
is in the session's history like any Telegram message. It never marks other runs as
interrupted, since a daemon may be using the same database right now.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import click

from pingu.agent.events import (
    AgentEvent,
    AgentMessage,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    TurnDone,
    TurnError,
)
from pingu.agent.turn import FAILED, TurnRequest
from pingu.config import config_option, load_config_or_exit
from pingu.config.model import Config

EXIT_COMMANDS = ("/exit", "/quit")
PREVIEW_CHARS = 160


@click.command("chat")
@config_option
@click.option(
    "--session",
    "session_id",
    default="cli:default",
    show_default=True,
    help="Session to continue (its history is kept in the database).",
)
@click.option(
    "--agent",
    "agent_name",
    default=None,
    help="Agent profile to talk to (default: the top-level agent).",
)
def chat_command(config_path: Path | None, session_id: str, agent_name: str | None) -> None:
    """Chat with an agent in the terminal. Ctrl-C cancels a turn; Ctrl-D or /exit leaves."""
    config = load_config_or_exit(config_path)
    _quiet_logging(config)
    try:
        code = asyncio.run(_chat(config, session_id, agent_name))
    except KeyboardInterrupt:
        # Ctrl-C at the prompt (no turn running) leaves, like Ctrl-D.
        click.echo()
        code = 0
    raise SystemExit(code)


async def _chat(config: Config, session_id: str, agent_name: str | None) -> int:
    # Imported here so that `pingu usage` and `--help` do not load the model client.
    from pingu.agent.profiles import UnknownAgentError
    from pingu.agent.runtime import AgentRuntime
    from pingu.store import Database

    db = await Database.open(config.db.path)
    runtime = AgentRuntime(config, db)
    lines: _StdinLines | None = None
    try:
        try:
            profile = runtime.resolve_agent(agent_name)
        except UnknownAgentError as exc:
            click.echo(f"pingu: {exc}", err=True)
            return 2
        interactive = sys.stdin.isatty()
        _dim(
            f"Pingu · agent {profile.name} · session {session_id} · "
            "Ctrl-C cancels a turn, Ctrl-D or /exit leaves"
        )
        lines = _StdinLines(sys.stdin)
        last_failed = False
        while True:
            if interactive:
                click.echo(click.style("you> ", bold=True), nl=False)
            line = await lines.next()
            if line is None:
                break
            text = line.strip()
            if not text:
                continue
            if text in EXIT_COMMANDS:
                break
            request = TurnRequest(
                session_id=session_id,
                user_message=text,
                channel="cli",
                channel_id=session_id,
                agent=profile.name,
            )
            last_failed = not await _run_one_turn(runtime, request)
        if interactive:
            click.echo()
            return 0
        # Piped (`echo hi | pingu chat`): a script learns from the exit code that the
        # answer it waited for did not come (the error itself is printed).
        return 1 if last_failed else 0
    finally:
        if lines is not None:
            lines.close()
        await runtime.close()
        await db.close()


async def _run_one_turn(runtime: Any, request: TurnRequest) -> bool:
    """Run one turn, printing it; False if it failed."""
    printer = _TurnPrinter(sys.stdout)
    task = asyncio.create_task(runtime.run_turn(request, printer.show))
    loop = asyncio.get_running_loop()
    # Ctrl-C cancels this turn (it is saved as cancelled) instead of leaving.
    handled = True
    try:
        loop.add_signal_handler(signal.SIGINT, task.cancel)
    except RuntimeError:  # not the main thread: Ctrl-C keeps its default meaning
        handled = False
    ok = True
    try:
        result = await task
        ok = result.status != FAILED
    except asyncio.CancelledError:
        if not task.cancelled():
            raise  # we ourselves are being cancelled
        printer.end_line()
        _dim("[cancelled]")
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGINT)
    printer.end_line()
    return ok


class _TurnPrinter:
    """Renders one turn's events: answer text as it streams, tool calls as dim lines."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.streamed = False
        self.mid_line = False

    async def show(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self._write(event.text)
            self.streamed = True
        elif isinstance(event, ToolCallStarted):
            self.end_line()
            _dim(f"⚙ {event.name}: {_preview(event.arguments)}")
        elif isinstance(event, ToolResult):
            mark = "✗" if event.is_error else "↳"
            _dim(f"  {mark} {event.name}: {_preview(event.output)}")
        elif isinstance(event, AgentMessage):
            self.end_line()
            click.echo(event.text)
        elif isinstance(event, TurnError):
            self.end_line()
            click.echo(click.style(f"error: {event.message}", fg="red"))
        elif isinstance(event, TurnDone):
            if event.status == "completed":
                if not self.streamed and event.text:
                    self._write(event.text)
            elif event.status == "limited":
                self.end_line()
                click.echo(click.style(event.text, fg="yellow"))
            self.end_line()

    def _write(self, text: str) -> None:
        click.echo(text, nl=False)
        if text:
            self.mid_line = not text.endswith("\n")

    def end_line(self) -> None:
        if self.mid_line:
            click.echo()
            self.mid_line = False


class _StdinLines:
    """Lines from stdin without blocking the event loop.

    A daemon thread does the blocking reads: unlike `asyncio.to_thread`, it cannot keep the
    process alive at exit while it waits for a line that never comes, and unlike
    `connect_read_pipe` it does not switch the terminal to non-blocking mode (which would
    break writes to stdout on the same tty)."""

    def __init__(self, stream: TextIO) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._want = threading.Semaphore(0)
        self._closed = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: TextIO) -> None:
        while True:
            self._want.acquire()  # read only when asked, so typing ahead is not swallowed
            if self._closed:
                return
            try:
                line = stream.readline()
            except (OSError, ValueError):
                line = ""
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._queue.put_nowait, line or None)
            if not line:
                return

    async def next(self) -> str | None:
        self._want.release()
        return await self._queue.get()

    def close(self) -> None:
        self._closed = True
        self._want.release()


def _quiet_logging(config: Config) -> None:
    """Log lines go to stderr and, unless debugging, only warnings: the terminal is for
    the conversation."""
    from pingu.daemon.logging import configure_logging

    level = "debug" if config.log.level == "debug" else "warning"
    configure_logging(level, config.log.format, config.secrets())


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _dim(text: str) -> None:
    click.echo(click.style(text, dim=True))


# -- pingu usage ----------------------------------------------------------------------


@click.command("usage")
@config_option
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Only usage from this day on (YYYY-MM-DD, UTC).",
)
def usage_command(config_path: Path | None, session_id: str | None, since: datetime | None) -> None:
    """Token usage and estimated cost: totals by model, agent and day."""
    config = load_config_or_exit(config_path)
    asyncio.run(_usage(config, session_id, since))


async def _usage(config: Config, session_id: str | None, since: datetime | None) -> None:
    from pingu.store import Database

    since_ms = int(since.replace(tzinfo=UTC).timestamp() * 1000) if since else None
    if not await asyncio.to_thread(config.db.path.exists):
        # Do not create an empty database just to report that it is empty.
        click.echo(f"No database at {config.db.path} yet: no usage recorded.")
        return
    db = await Database.open(config.db.path)
    try:
        for group in ("model", "agent", "day"):
            rows = await db.usage.totals(session_id=session_id, since=since_ms, group_by=group)
            _print_totals(group, rows)
    finally:
        await db.close()


_TOTAL_COLUMNS = ("calls", "input", "cached", "output", "reasoning", "total", "cost (USD)")


def _print_totals(group: str, rows: list[Any]) -> None:
    click.echo(click.style(f"By {group}", bold=True))
    if not rows:
        click.echo("  (no usage recorded)\n")
        return
    table = [(group, *_TOTAL_COLUMNS)]
    for row in rows:
        table.append(
            (
                str(row.key),
                str(row.calls),
                str(row.input_tokens),
                str(row.cached_input_tokens),
                str(row.output_tokens),
                str(row.reasoning_tokens),
                str(row.total_tokens),
                _cost(row.cost_estimate, row.unpriced_calls),
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for index, row in enumerate(table):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
        ]
        line = "  " + "  ".join(cells)
        click.echo(click.style(line, dim=True) if index == 0 else line)
    click.echo()


def _cost(cost: float | None, unpriced_calls: int) -> str:
    text = "?" if cost is None else f"{cost:.4f}"
    if cost is not None and unpriced_calls:
        text += f" (+{unpriced_calls} unpriced)"
    return text
