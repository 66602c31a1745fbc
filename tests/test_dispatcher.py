"""Dispatcher ordering, concurrency, cancel and drain.

These use a tiny runtime double that records when each turn starts and ends and waits
on a gate the test controls: the dispatcher's job is ordering, not running agents (the
real runtime is exercised through the dispatcher in test_agent_runtime.py).
"""

from __future__ import annotations

import asyncio

import pytest

from pingu.agent.events import AgentEvent, TurnDone
from pingu.agent.turn import TurnRequest, TurnResult
from pingu.dispatcher import Dispatcher, DispatcherClosed


class GatedRuntime:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, asyncio.Event] = {}
        self.cancelled: list[str] = []

    def gate(self, message: str) -> asyncio.Event:
        return self.gates.setdefault(message, asyncio.Event())

    def started_event(self, message: str) -> asyncio.Event:
        return self.started.setdefault(message, asyncio.Event())

    async def run_turn(self, request: TurnRequest, sink) -> TurnResult:
        self.log.append(f"start {request.user_message}")
        self.started_event(request.user_message).set()
        try:
            await self.gate(request.user_message).wait()
        except asyncio.CancelledError:
            self.cancelled.append(request.user_message)
            raise
        if request.user_message == "boom":
            raise RuntimeError("runtime bug")
        self.log.append(f"end {request.user_message}")
        await sink(TurnDone(text=request.user_message.upper(), status="completed", turn_id=1))
        return TurnResult(turn_id=1, status="completed", text=request.user_message.upper())


def req(session: str, message: str) -> TurnRequest:
    return TurnRequest(session_id=session, user_message=message, channel="test")


async def collect(events: list[AgentEvent], event: AgentEvent) -> None:
    events.append(event)


async def test_one_session_runs_in_submission_order_even_when_later_turns_are_ready() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    futures = [await dispatcher.submit(req("s", m), lambda e: collect([], e)) for m in "abc"]
    # Open the gates in reverse: a later turn must still not start before an earlier ends.
    for message in "cba":
        runtime.gate(message).set()
    results = await asyncio.gather(*futures)
    assert [r.text for r in results] == ["A", "B", "C"]
    assert runtime.log == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert dispatcher.active_sessions == 0  # the idle session's worker went away


async def test_different_sessions_run_concurrently() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    first = await dispatcher.submit(req("s1", "one"), lambda e: collect([], e))
    second = await dispatcher.submit(req("s2", "two"), lambda e: collect([], e))
    # Both start while neither has finished.
    await asyncio.wait_for(runtime.started_event("one").wait(), 5)
    await asyncio.wait_for(runtime.started_event("two").wait(), 5)
    assert dispatcher.is_running("s1") and dispatcher.is_running("s2")
    runtime.gate("two").set()
    assert (await second).text == "TWO"
    assert not first.done()
    runtime.gate("one").set()
    assert (await first).text == "ONE"


async def test_events_go_to_the_sink_of_their_own_submission() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    seen_a: list[AgentEvent] = []
    seen_b: list[AgentEvent] = []
    fut_a = await dispatcher.submit(req("s", "a"), lambda e: collect(seen_a, e))
    fut_b = await dispatcher.submit(req("s", "b"), lambda e: collect(seen_b, e))
    runtime.gate("a").set()
    runtime.gate("b").set()
    await asyncio.gather(fut_a, fut_b)
    assert [e.text for e in seen_a] == ["A"]
    assert [e.text for e in seen_b] == ["B"]


async def test_cancel_stops_the_running_turn_and_the_next_one_still_runs() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    first = await dispatcher.submit(req("s", "slow"), lambda e: collect([], e))
    second = await dispatcher.submit(req("s", "next"), lambda e: collect([], e))
    await asyncio.wait_for(runtime.started_event("slow").wait(), 5)
    assert dispatcher.pending("s") == 1
    assert dispatcher.cancel("s") is True
    with pytest.raises(asyncio.CancelledError):
        await first
    assert runtime.cancelled == ["slow"]
    runtime.gate("next").set()
    assert (await second).text == "NEXT"
    assert dispatcher.cancel("s") is False  # nothing running any more
    assert not dispatcher.is_running("s")


async def test_cancel_with_queued_drops_waiting_turns() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    first = await dispatcher.submit(req("s", "slow"), lambda e: collect([], e))
    second = await dispatcher.submit(req("s", "queued"), lambda e: collect([], e))
    await asyncio.wait_for(runtime.started_event("slow").wait(), 5)
    assert dispatcher.cancel("s", queued=True)
    for future in (first, second):
        with pytest.raises(asyncio.CancelledError):
            await future
    await asyncio.sleep(0)
    assert "start queued" not in runtime.log
    assert dispatcher.active_sessions == 0


async def test_a_crashing_turn_fails_its_future_and_the_session_goes_on() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    bad = await dispatcher.submit(req("s", "boom"), lambda e: collect([], e))
    good = await dispatcher.submit(req("s", "fine"), lambda e: collect([], e))
    runtime.gate("boom").set()
    runtime.gate("fine").set()
    with pytest.raises(RuntimeError, match="runtime bug"):
        await bad
    assert (await good).text == "FINE"


async def test_drain_waits_for_quick_turns_then_cancels_the_rest_and_refuses_new_ones() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    quick = await dispatcher.submit(req("s1", "quick"), lambda e: collect([], e))
    stuck = await dispatcher.submit(req("s2", "stuck"), lambda e: collect([], e))
    behind = await dispatcher.submit(req("s2", "behind"), lambda e: collect([], e))
    runtime.gate("quick").set()
    await dispatcher.drain(0.2)
    assert (await quick).text == "QUICK"
    assert stuck.cancelled() and behind.cancelled()
    assert runtime.cancelled == ["stuck"]
    assert "start behind" not in runtime.log
    assert dispatcher.active_sessions == 0
    with pytest.raises(DispatcherClosed):
        await dispatcher.submit(req("s3", "late"), lambda e: collect([], e))


async def test_many_idle_sessions_leave_nothing_behind() -> None:
    runtime = GatedRuntime()
    dispatcher = Dispatcher(runtime)
    for i in range(500):
        runtime.gate(f"m{i}").set()
    futures = [
        await dispatcher.submit(req(f"s{i}", f"m{i}"), lambda e: collect([], e)) for i in range(500)
    ]
    await asyncio.gather(*futures)
    assert dispatcher.active_sessions == 0
    current = asyncio.current_task()
    leftovers = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    assert leftovers == []
