"""The agent loop: call the model, run its function calls, call again, until it answers.

One `run_turn` is one user message in one session. It reads the session's history,
streams the answer to the caller's sink, runs tools concurrently, delegates to
sub-agents, records an execution row and one usage row per model call, and saves the
turn (whatever happened: completed, failed, limited or cancelled) so that every
function_call in history has its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from pingu.agent.events import (
    AgentEvent,
    AgentMessage,
    EventSink,
    TextDelta,
    ToolCallStarted,
    ToolResult,
    TurnDone,
    TurnError,
)
from pingu.agent.profiles import (
    DELEGATE_TOOL,
    UnknownAgentError,
    default_agent_name,
    delegation_targets,
    describe_profiles,
    resolve_agent,
)
from pingu.agent.turn import CANCELLED, COMPLETED, FAILED, LIMITED, TurnRequest, TurnResult
from pingu.config.model import AgentProfile, Config, LLMConfig
from pingu.history.items import output_to_input, user_input_item
from pingu.llm import LLMError, ModelClient, ModelResponse, StreamText
from pingu.llm.pricing import api_key_hash, estimate_cost
from pingu.store.usage import UsageRecord
from pingu.tools.base import Tool, ToolContext, ToolError, function_tool_spec
from pingu.tools.registry import build_tools, run_tool
from pingu.tools.workspace import ensure_agent_workspace

__all__ = ["AgentRuntime", "TurnRequest", "TurnResult"]

log = structlog.get_logger("pingu.agent")

DELEGATE_CHANNEL = "delegate"
CANCELLED_OUTPUT = "Not run: the turn was cancelled by the user."
USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
)
# What the execution row says for each way a turn can end (agent_executions.status).
EXECUTION_STATUS = {
    COMPLETED: "completed",
    LIMITED: "failed",
    FAILED: "failed",
    CANCELLED: "failed",
}


class _TurnRefused(Exception):
    """The turn cannot run as configured; the message says why, for the user."""


class _LimitReached(Exception):
    """A bound of the turn was hit; `explanation` is what the user reads."""

    def __init__(self, explanation: str, tool_output: str) -> None:
        super().__init__(explanation)
        self.explanation = explanation
        self.tool_output = tool_output


@dataclass
class _Turn:
    """Everything one agent run has done so far, so it can be saved at any point."""

    session_id: str
    user_message: str
    profile: AgentProfile
    llm: LLMConfig
    depth: int
    execution_id: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    responses: list[dict[str, Any]] = field(default_factory=list)
    # Outputs of tools that finished while their batch was still running.
    finished_outputs: dict[str, str] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS, 0))
    model_calls: int = 0
    tool_calls: int = 0
    retries: int = 0  # model call retries, all calls of this run together
    text: str = ""
    started: float = field(default_factory=time.monotonic)
    usage_writes: list[asyncio.Task[None]] = field(default_factory=list)
    # Text of the model call in flight; its items arrive only with the completed response.
    streamed: list[str] = field(default_factory=list)

    def add_usage(self, usage: dict[str, int]) -> None:
        for key, value in usage.items():
            self.usage[key] = self.usage.get(key, 0) + int(value or 0)

    def keep_streamed_text(self) -> None:
        """A call cut off mid-answer: keep the text the user already saw, so the model's
        next turn knows what it said (as an assistant message; no reasoning can dangle,
        since output items only come with the completed response)."""
        text = "".join(self.streamed)
        self.streamed = []
        if text:
            self.items.append({"role": "assistant", "content": text})

    def close_open_calls(self, reason: str) -> None:
        """Give every function_call without an output one, in call order."""
        answered = {
            item.get("call_id") for item in self.items if item.get("type") == "function_call_output"
        }
        for item in list(self.items):
            if item.get("type") != "function_call" or item.get("call_id") in answered:
                continue
            output = self.finished_outputs.get(item["call_id"], reason)
            self.items.append(_function_call_output(item["call_id"], output))
            answered.add(item["call_id"])


class AgentRuntime:
    def __init__(
        self,
        config: Config,
        db: Any,
        *,
        client_factory: Callable[[LLMConfig], Any] = ModelClient,
    ) -> None:
        self.config = config
        self.db = db
        self._client_factory = client_factory
        self._clients: dict[str, Any] = {}
        self._tools: dict[tuple[str, ...], dict[str, Tool]] = {}
        self._workspaces: dict[str, Path] = {}
        self._unpriced_models: set[str] = set()
        self._secrets = [s for s in config.secrets() if s]

    # -- profiles ---------------------------------------------------------------------

    @property
    def default_agent_name(self) -> str:
        return default_agent_name(self.config)

    def resolve_agent(self, name: str | None = None) -> AgentProfile:
        """Raises UnknownAgentError (its message lists the profiles) for an unknown name."""
        return resolve_agent(self.config, name)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    # -- one turn ---------------------------------------------------------------------

    async def run_turn(self, request: TurnRequest, sink: EventSink) -> TurnResult:
        sink = _safe_sink(sink)
        try:
            profile = self.resolve_agent(request.agent)
        except UnknownAgentError as exc:
            await sink(TurnError(str(exc)))
            await sink(TurnDone(text=str(exc), status=FAILED, turn_id=None))
            return TurnResult(turn_id=None, status=FAILED, text=str(exc))
        return await self._run(
            request.session_id,
            request.user_message,
            profile,
            sink,
            depth=0,
            parent_execution_id=None,
            channel=request.channel,
            channel_id=request.channel_id,
            inbound_ref=request.inbound_ref,
            forward_text=True,
        )

    async def _run(
        self,
        session_id: str,
        user_message: str,
        profile: AgentProfile,
        sink: EventSink,
        *,
        depth: int,
        parent_execution_id: str | None,
        channel: str,
        channel_id: str | None,
        inbound_ref: str | None,
        forward_text: bool,
    ) -> TurnResult:
        llm = self.config.llm_for(profile)
        turn = _Turn(session_id, user_message, profile, llm, depth)
        # Independent: the history read overlaps the two (serialised) writes. Shielded so
        # that a cancel arriving now still leaves a consistent record of the turn.
        setup = asyncio.ensure_future(
            asyncio.gather(
                self.db.history.ensure_session(session_id, channel, channel_id, model=llm.model),
                self.db.history.load_input_history(session_id),
                self.db.executions.start(
                    session_id,
                    profile.name,
                    {"message": user_message, "channel": channel, "depth": depth},
                    parent_execution_id,
                ),
            )
        )
        status, error = COMPLETED, None
        deadline: asyncio.Timeout | None = None
        try:
            _, history, turn.execution_id = await asyncio.shield(setup)
            async with asyncio.timeout(profile.limits.turn_timeout_s) as deadline:
                try:
                    await self._loop(turn, history, sink, forward_text)
                except _LimitReached as limit:
                    status, error, turn.text = LIMITED, limit.explanation, limit.explanation
                    turn.close_open_calls(limit.tool_output)
        except LLMError as exc:
            status, error, turn.text = FAILED, f"{exc.kind}: {exc.user_message}", exc.user_message
            turn.keep_streamed_text()
            turn.close_open_calls("Not run: the model call failed.")
            await sink(TurnError(exc.user_message))
        except _TurnRefused as refusal:
            status, error = FAILED, str(refusal)
            turn.text = str(refusal)
            await sink(TurnError(turn.text))
        except asyncio.CancelledError:
            if turn.execution_id is None:
                with contextlib.suppress(Exception):
                    _, _, turn.execution_id = await setup
            turn.keep_streamed_text()
            turn.close_open_calls(CANCELLED_OUTPUT)
            # Save what happened even though we were cancelled, then let the cancel go on.
            await asyncio.shield(
                self._finish(turn, sink, CANCELLED, "cancelled by the user", inbound_ref)
            )
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError) and deadline is not None and deadline.expired():
                seconds = _seconds(profile.limits.turn_timeout_s)
                status = LIMITED
                error = turn.text = (
                    f"I stopped after {seconds} without finishing: that is the time limit for "
                    "one turn. Ask me to continue, or raise [limits] turn_timeout_s."
                )
                turn.close_open_calls(f"Not run: the turn hit its time limit of {seconds}.")
            else:
                log.exception("turn_crashed", session=session_id, agent=profile.name)
                status, error = FAILED, self._redact(f"{type(exc).__name__}: {exc}")
                turn.text = "Something went wrong inside Pingu; the details are in its log."
                turn.close_open_calls("Not run: the turn failed.")
                await sink(TurnError(turn.text))
        # A cancel arriving while saving must not lose the turn.
        return await asyncio.shield(self._finish(turn, sink, status, error, inbound_ref))

    async def _finish(
        self, turn: _Turn, sink: EventSink, status: str, error: str | None, inbound_ref: str | None
    ) -> TurnResult:
        if status == CANCELLED:
            turn.text = "Cancelled."
        for outcome in await asyncio.gather(*turn.usage_writes, return_exceptions=True):
            if isinstance(outcome, BaseException):
                log.error("usage_record_failed", session=turn.session_id, error=repr(outcome))
        turn_id: int | None = None
        try:
            turn_id = await self.db.history.save_turn(
                turn.session_id,
                turn.user_message,
                turn.items,
                model=turn.llm.model,
                responses=turn.responses,
                status=status,
                error=error,
                inbound_ref=inbound_ref,
                agent=turn.profile.name,
            )
        except Exception:
            log.exception("turn_save_failed", session=turn.session_id, agent=turn.profile.name)
        try:
            if turn.execution_id is not None:
                await self.db.executions.finish(
                    turn.execution_id,
                    EXECUTION_STATUS[status],
                    {"text": turn.text, "status": status, "turn_id": turn_id, "usage": turn.usage},
                    error,
                )
        except Exception:
            log.exception("execution_finish_failed", session=turn.session_id)
        log.info(
            "turn",
            session=turn.session_id,
            agent=turn.profile.name,
            depth=turn.depth,
            status=status,
            duration_ms=round((time.monotonic() - turn.started) * 1000, 1),
            model_calls=turn.model_calls,
            tool_calls=turn.tool_calls,
            tokens=turn.usage.get("total_tokens", 0),
        )
        usage = dict(turn.usage)
        await sink(TurnDone(text=turn.text, status=status, turn_id=turn_id, usage=usage))
        return TurnResult(turn_id=turn_id, status=status, text=turn.text, usage=usage)

    async def _loop(
        self, turn: _Turn, history: list[dict[str, Any]], sink: EventSink, forward_text: bool
    ) -> None:
        limits = turn.profile.limits
        tools = self._tools_for(turn.profile)
        specs = [function_tool_spec(tool) for tool in tools.values()]
        instructions = self._instructions(turn.profile, tools)
        ctx = ToolContext(
            session_id=turn.session_id,
            agent_name=turn.profile.name,
            workspace=await self._workspace(turn.profile.name),
            emit=sink,
            delegate=self._delegate_fn(turn, sink) if DELEGATE_TOOL in tools else None,
            timeout_s=limits.tool_timeout_s,
        )
        request_input = [*history, user_input_item(turn.user_message)]
        while True:
            response = await self._call_model(
                turn, instructions, request_input, specs, sink, forward_text
            )
            turn.items.extend(response.output)
            request_input.extend(_as_input(response.output))
            calls = [item for item in response.output if item.get("type") == "function_call"]
            if not calls:
                turn.text = _output_text(response.output)
                return
            if turn.model_calls >= limits.max_model_calls:
                raise _LimitReached(
                    f"I stopped after {turn.model_calls} model calls without finishing. "
                    "Ask me to continue, or raise [limits] max_model_calls.",
                    "Not run: the turn reached its limit of model calls.",
                )
            allowed = max(0, limits.max_tool_calls - turn.tool_calls)
            outputs = await self._run_tools(turn, calls[:allowed], tools, ctx, sink)
            turn.items.extend(outputs)
            request_input.extend(outputs)
            if len(calls) > allowed:
                raise _LimitReached(
                    f"I stopped after {turn.tool_calls} tool calls without finishing. "
                    "Ask me to continue, or raise [limits] max_tool_calls.",
                    "Not run: the turn reached its limit of tool calls.",
                )

    async def _call_model(
        self,
        turn: _Turn,
        instructions: str,
        request_input: list[dict[str, Any]],
        specs: list[dict[str, Any]],
        sink: EventSink,
        forward_text: bool,
    ) -> ModelResponse:
        client = self._client(turn.llm)
        response: ModelResponse | None = None
        turn.model_calls += 1
        turn.streamed = []
        retried = False

        async def on_retry(attempt: int, kind: str, delay_s: float) -> None:
            nonlocal retried
            retried = True
            turn.retries += 1
            if turn.execution_id is not None:
                await self.db.executions.set_retrying(turn.execution_id, turn.retries)

        async for event in client.stream(
            model=turn.llm.model,
            instructions=instructions,
            input=request_input,
            tools=specs,
            on_retry=on_retry,
        ):
            if retried:  # the answer is coming: this call's retries are over
                retried = False
                if turn.execution_id is not None:
                    await self.db.executions.set_running(turn.execution_id)
            if isinstance(event, StreamText):
                turn.streamed.append(event.text)
                if forward_text and event.text:
                    await sink(TextDelta(event.text))
            elif isinstance(event, ModelResponse):
                response = event
                turn.streamed = []
        if response is None:
            raise LLMError("unavailable", "The model's answer ended early; try again.", True, None)
        usage = _usage_counts(response.usage)
        turn.add_usage(usage)
        turn.responses.append(
            {"id": response.id, "model": response.model, "status": response.status, "usage": usage}
        )
        # Written while the turn goes on; _finish waits for it.
        turn.usage_writes.append(
            asyncio.create_task(self._record_usage(turn, response.model or turn.llm.model, usage))
        )
        return response

    async def _run_tools(
        self,
        turn: _Turn,
        calls: list[dict[str, Any]],
        tools: dict[str, Tool],
        ctx: ToolContext,
        sink: EventSink,
    ) -> list[dict[str, Any]]:
        """Run the calls concurrently; their outputs in call order."""
        turn.tool_calls += len(calls)

        async def run_one(call: dict[str, Any]) -> None:
            name, arguments = call.get("name", ""), call.get("arguments", "") or "{}"
            await sink(ToolCallStarted(call_id=call["call_id"], name=name, arguments=arguments))
            outcome = await run_tool(tools, name, arguments, ctx)
            turn.finished_outputs[call["call_id"]] = outcome.output
            await sink(
                ToolResult(
                    call_id=call["call_id"],
                    name=name,
                    output=outcome.output,
                    is_error=outcome.is_error,
                )
            )

        tasks = [asyncio.create_task(run_one(call)) for call in calls]
        try:
            if tasks:
                await asyncio.wait(tasks)
        except asyncio.CancelledError:
            # Stop the tools (a shell tool kills its process group on cancel) before the
            # turn is saved; what did finish is kept by close_open_calls.
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise
        outputs = []
        for call, task in zip(calls, tasks, strict=True):
            error = None if task.cancelled() else task.exception()
            if error is not None:
                # run_tool never raises; a sink or bug did. Report it to the model.
                log.error("tool_task_failed", tool=call.get("name"), error=repr(error))
                turn.finished_outputs.setdefault(call["call_id"], f"error: {error}")
            output = turn.finished_outputs.get(call["call_id"], CANCELLED_OUTPUT)
            outputs.append(_function_call_output(call["call_id"], output))
        return outputs

    # -- delegation -------------------------------------------------------------------

    def _delegate_fn(self, turn: _Turn, sink: EventSink) -> Callable[[str, str], Any]:
        async def delegate(agent_name: str, task: str) -> str:
            max_depth = turn.profile.limits.max_delegation_depth
            if turn.depth + 1 > max_depth:
                raise ToolError(
                    f"delegation refused: the maximum delegation depth is {max_depth}; "
                    "do this part yourself"
                )
            try:
                profile = self.resolve_agent(agent_name)
            except UnknownAgentError:
                raise ToolError(
                    f"unknown agent {agent_name!r}; {describe_profiles(self.config)}"
                ) from None
            result = await self._run(
                f"{turn.session_id}:delegate:{profile.name}",
                task,
                profile,
                _sub_agent_sink(sink),
                depth=turn.depth + 1,
                parent_execution_id=turn.execution_id,
                channel=DELEGATE_CHANNEL,
                channel_id=turn.session_id,
                inbound_ref=None,
                forward_text=False,
            )
            turn.add_usage(result.usage)
            if result.status == COMPLETED:
                return result.text
            raise ToolError(
                f"the {profile.name} agent did not finish ({result.status}): {result.text}"
            )

        return delegate

    # -- helpers ----------------------------------------------------------------------

    def _client(self, llm: LLMConfig) -> Any:
        client = self._clients.get(llm.name)
        if client is None:
            client = self._clients[llm.name] = self._client_factory(llm)
        return client

    def _tools_for(self, profile: AgentProfile) -> dict[str, Tool]:
        tools = self._tools.get(profile.tools)
        if tools is None:
            tools = self._tools[profile.tools] = build_tools(profile.tools)
        return tools

    def _instructions(self, profile: AgentProfile, tools: dict[str, Tool]) -> str:
        if DELEGATE_TOOL not in tools:
            return profile.system_prompt
        lines = [profile.system_prompt, "", "Agents you can delegate to with the delegate tool:"]
        for name in delegation_targets(self.config, profile.name):
            prompt = self.config.agents[name].system_prompt.strip().splitlines()
            lines.append(f"- {name}: {prompt[0][:200]}" if prompt else f"- {name}")
        return "\n".join(lines)

    async def _workspace(self, agent_name: str) -> Path:
        if agent_name in self._workspaces:
            return self._workspaces[agent_name]
        try:
            path = await ensure_agent_workspace(self.config.workspaces, agent_name)
        except ValueError:
            raise _TurnRefused(
                f"The agent name {agent_name!r} cannot be used as a workspace directory "
                "name; rename [agent.<name>] (no '/', not '.' or '..')."
            ) from None
        self._workspaces[agent_name] = path
        return path

    async def _record_usage(self, turn: _Turn, model: str, usage: dict[str, int]) -> None:
        cost = estimate_cost(model, usage, self.config.pricing)
        if cost is None and model not in self._unpriced_models:
            self._unpriced_models.add(model)
            log.warning("unknown_model_price", model=model, hint=f'add [pricing."{model}"]')
        await self.db.usage.record(
            UsageRecord(
                execution_id=turn.execution_id,
                session_id=turn.session_id,
                agent_name=turn.profile.name,
                provider=turn.llm.provider,
                model=model,
                # The loader has already folded OPENAI_API_KEY into the config.
                api_key_hash=api_key_hash(turn.llm.api_key) if turn.llm.api_key else None,
                input_tokens=usage["input_tokens"],
                cached_input_tokens=usage["cached_input_tokens"],
                output_tokens=usage["output_tokens"],
                reasoning_tokens=usage["reasoning_tokens"],
                total_tokens=usage["total_tokens"],
                cost_estimate=cost,
            )
        )

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text


def _function_call_output(call_id: str, output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _as_input(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    converted = (output_to_input(item) for item in items)
    return [item for item in converted if item is not None]


def _output_text(items: Iterable[dict[str, Any]]) -> str:
    parts = []
    for item in items:
        if item.get("type") != "message":
            continue
        for content in item.get("content") or ():
            if content.get("type") == "output_text":
                parts.append(content.get("text", ""))
    return "".join(parts)


def _usage_counts(usage: Any) -> dict[str, int]:
    if usage is None:
        return dict.fromkeys(USAGE_KEYS, 0)
    if isinstance(usage, dict):
        return {key: int(usage.get(key) or 0) for key in USAGE_KEYS}
    return {key: int(getattr(usage, key, 0) or 0) for key in USAGE_KEYS}


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _safe_sink(sink: EventSink) -> EventSink:
    async def emit(event: AgentEvent) -> None:
        try:
            await sink(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("event_sink_failed", event_kind=event.kind)

    return emit


def _sub_agent_sink(parent: EventSink) -> EventSink:
    """A sub-agent's tool activity and messages reach the user; its answer text does not
    (it goes back to the parent as the tool output)."""

    async def emit(event: AgentEvent) -> None:
        if isinstance(event, ToolCallStarted | ToolResult | AgentMessage):
            await parent(event)

    return emit
