"""Per-session ordering of agent turns.

Turns of one session run strictly one after another in submission order (history is
a sequence); turns of different sessions run concurrently. There is no global lock:
each session with work has a small worker task and its queue, and both go away as
soon as the queue is empty, so idle sessions cost nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from pingu.agent.events import EventSink
from pingu.agent.turn import TurnRequest, TurnResult

log = structlog.get_logger("pingu.dispatcher")


class TurnRunner(Protocol):
    async def run_turn(self, request: TurnRequest, sink: EventSink) -> TurnResult: ...


class DispatcherClosed(RuntimeError):
    """The dispatcher is draining or drained and takes no new turns."""


# Why a turn was cancelled, as `cancel_reason(future)` tells the submitter: a shutdown
# (the drain ran out of grace) leaves work to resume after the restart; any other cancel
# (a user's /stop, the HTTP API) is the turn's end.
CANCEL_USER = "user"
CANCEL_SHUTDOWN = "shutdown"


def cancel_reason(future: asyncio.Future[TurnResult]) -> str | None:
    """CANCEL_USER or CANCEL_SHUTDOWN for a future `submit` returned that was cancelled;
    None if it was not cancelled."""
    if not future.cancelled():
        return None
    try:
        future.result()
    except asyncio.CancelledError as exc:
        return str(exc.args[0]) if exc.args and exc.args[0] else CANCEL_USER
    return CANCEL_USER  # unreachable: a cancelled future raises


@dataclass
class _Job:
    request: TurnRequest
    sink: EventSink
    future: asyncio.Future[TurnResult]
    cancel_reason: str | None = None  # the first cancel's reason wins


@dataclass
class _Session:
    queue: deque[_Job] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[TurnResult] | None = None
    current_job: _Job | None = None


class Dispatcher:
    def __init__(self, runtime: TurnRunner) -> None:
        self._runtime = runtime
        self._sessions: dict[str, _Session] = {}
        self._closed = False

    async def submit(self, request: TurnRequest, sink: EventSink) -> asyncio.Future[TurnResult]:
        """Queue a turn; the returned future resolves when it has run (cancelled if the turn
        was cancelled). Raises DispatcherClosed once `drain` has begun."""
        if self._closed:
            raise DispatcherClosed("not accepting new turns: shutting down")
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        session = self._sessions.get(request.session_id)
        if session is None:
            session = self._sessions[request.session_id] = _Session()
        session.queue.append(_Job(request, sink, future))
        if session.worker is None:
            session.worker = asyncio.create_task(
                self._work(request.session_id, session), name=f"session:{request.session_id}"
            )
        return future

    def cancel(self, session_id: str, *, queued: bool = False, reason: str = CANCEL_USER) -> bool:
        """Cancel the running turn of a session (and, with `queued`, the turns waiting
        behind it). True if there was something to cancel. `reason` is what
        `cancel_reason` tells the submitters of the cancelled turns."""
        session = self._sessions.get(session_id)
        if session is None:
            return False
        cancelled = False
        if queued:
            while session.queue:
                session.queue.popleft().future.cancel(msg=reason)
                cancelled = True
        if session.current is not None and not session.current.done():
            job = session.current_job
            if job is not None and job.cancel_reason is None:
                job.cancel_reason = reason
            session.current.cancel()
            cancelled = True
        return cancelled

    def is_running(self, session_id: str) -> bool:
        session = self._sessions.get(session_id)
        return session is not None and session.current is not None

    def pending(self, session_id: str) -> int:
        """Turns waiting behind the running one."""
        session = self._sessions.get(session_id)
        return len(session.queue) if session is not None else 0

    @property
    def active_sessions(self) -> int:
        return len(self._sessions)

    async def drain(self, grace_s: float) -> None:
        """Take no new turns, let queued and running turns finish for up to `grace_s`,
        then cancel what is left and wait for the cancelled turns to be saved."""
        self._closed = True
        workers = [s.worker for s in self._sessions.values() if s.worker is not None]
        if workers:
            _, late = await asyncio.wait(workers, timeout=grace_s)
        else:
            late = set()
        if late:
            log.warning("drain_cancelling", sessions=len(self._sessions))
            for session_id in list(self._sessions):
                self.cancel(session_id, queued=True, reason=CANCEL_SHUTDOWN)
            await asyncio.wait(late)

    async def _work(self, session_id: str, session: _Session) -> None:
        try:
            while session.queue:
                job = session.queue.popleft()
                if job.future.cancelled():
                    continue
                session.current_job = job
                session.current = asyncio.create_task(
                    self._runtime.run_turn(job.request, job.sink),
                    name=f"turn:{session_id}",
                )
                # The worker itself is never cancelled: cancel() targets the turn task.
                await asyncio.wait([session.current])
                _settle(job, session.current)
                session.current = None
                session.current_job = None
        finally:
            # Only reached with work left if the worker itself was cancelled (event loop
            # shutdown): nothing may be left waiting forever.
            if session.current is not None and not session.current.done():
                if session.current_job is not None and session.current_job.cancel_reason is None:
                    session.current_job.cancel_reason = CANCEL_SHUTDOWN
                session.current.cancel()
            while session.queue:
                session.queue.popleft().future.cancel(msg=CANCEL_SHUTDOWN)
            session.current = None
            session.current_job = None
            session.worker = None
            # Nothing can have been queued between the last check and here: no await.
            if self._sessions.get(session_id) is session:
                del self._sessions[session_id]


def _settle(job: _Job, task: asyncio.Task[TurnResult]) -> None:
    future = job.future
    if future.done():
        # The caller gave up on the future; still retrieve the outcome so it is not logged
        # as "never retrieved".
        with contextlib.suppress(asyncio.CancelledError, Exception):
            task.result()
        return
    if task.cancelled():
        # (A turn cancelled from inside, e.g. a timeout, ended: as if a user stopped it.)
        future.cancel(msg=job.cancel_reason or CANCEL_USER)
        return
    error = task.exception()
    if error is not None:
        log.error("turn_crashed", error=repr(error))
        future.set_exception(error)
    else:
        future.set_result(task.result())
