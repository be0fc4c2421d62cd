"""One step of a session (docs/sessions.md §3.1, §3.2): pure with respect to storage.

:func:`step` looks at the head turn and does one thing: asks the LLM (head is a user turn) or
runs the tool calls of the head LLM turn, each as its policy says. It returns the new document
and the continuations to create; the run loop (``sessions_app.runner``) stores both, fenced by
the version and the lease.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings
from django.db import close_old_connections

from agentfiles.bindings import ScopedBinding
from agentfiles.parameters import ParamValue
from agentfiles.session_document import CallState, SessionDocument, TrackedCall
from agents_app.llm import LlmCancelled, complete
from agents_app.narrowing import NarrowingError, derived_table, prepare_helper_call
from agents_app.runtime import RuntimeAgent, runtime_agent
from sessions_app import background, executor, isolation
from sessions_app.event_types import (
    EventKind,
    ToolFinished,
    ToolProgressed,
    ToolStarted,
    bounded,
    progress_reporters,
)
from sessions_app.outcomes import NewChild, NewContinuation, StepResult
from sessions_app.ports import DbSessionsPort
from sessions_app.tracing import chat_span, tool_span, tool_span_closed
from tools_app.activation import hidden_text
from tools_app.base import ToolContext
from tools_app.subagent import SubAgentTool
from tools_app.toolset import ToolSet

log = logging.getLogger("sessions.engine")

#: Told when a tool call of the step starts, progresses and ends (``tool.started``,
#: ``tool.progressed``, ``tool.completed``/``failed``).
ToolEventCallback = Callable[[EventKind, ToolStarted | ToolProgressed | ToolFinished], None]


#: What the model is told of a call that started in a step never stored (docs/sessions.md §1.5).
INTERRUPTED_TEXT = (
    "Error: the tool call was interrupted: the process running it stopped before its result was stored."
    " It may or may not have run, and it was not run again."
)


#: Why a call was detached, as its placeholder tells the model (docs/sessions.md §4.6, §6.7).
DETACHED_AT_ONCE = "detached at once (attachSeconds 0)"
DETACHED_BY_INTERRUPT = "detached by an interrupt"


class CallLedger(Protocol):
    """The calls of one LlmTurn that steps started (``sessions_app.started.StartedCalls``)."""

    def interrupted(self, index: int) -> bool:
        """Whether call ``index`` started in an earlier step whose result was never stored."""
        ...

    def record(self, index: int, call: dict[str, Any]) -> None:
        """Record durably that call ``index`` starts now, before it runs."""
        ...


class NothingToDo(Exception):
    """The head turn leaves nothing for a step to do (answered, blocked, or empty)."""


@dataclass
class StepParams:
    """A session's parameter values for a step (docs/agents.md §8, docs/tools.md §8).

    Attributes:
        values: every parameter with a value, for the tool calls (``ToolContext.params``).
        visible: the values that decide which exposed arguments the model sees (message-scope
            ones left out); ``None`` shows every exposed argument.
        toolset: the session's tools: a narrowed copy for a narrowed helper, else ``None`` (the agent's).
        inherited: bindings the session's caller addressed below it, for the helpers it prompts.
    """

    values: dict[str, ParamValue] = field(default_factory=dict)
    visible: dict[str, ParamValue] | None = None
    toolset: ToolSet | None = None
    inherited: tuple[ScopedBinding, ...] = ()

    def tools(self, agent: RuntimeAgent) -> ToolSet:
        """The session's tools."""
        return self.toolset or agent.toolset


def run_tool_call(agent: RuntimeAgent, call: dict[str, Any], context: ToolContext) -> tuple[str, Any]:
    """Run one tool call now and return ``(state, response)``.

    ``state`` is ``Completed`` or ``Failed``; a failure's response is an ``Error: ...`` text the
    LLM sees (docs/sessions.md §1.5: there is no error variant of a tool response). The tool is
    looked up in ``context.tools`` (the session's tools), else in the agent's. Under
    ``--isolate-tools``, a bash or MCP tool's call is sent to the worker (``sessions_app.isolation``).
    """
    function = call.get("function") or {}
    name = function.get("name") or ""
    tools = context.tools or agent.toolset
    tool = tools.get(name)
    if tool is None:
        return "Failed", f"Error: unknown tool {name!r}"
    raw_arguments = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw_arguments) if isinstance(raw_arguments, str) else raw_arguments
    except json.JSONDecodeError as error:
        return "Failed", f"Error: the arguments of {name} are not valid JSON: {error}"
    if not isinstance(arguments, dict):
        return "Failed", f"Error: the arguments of {name} must be a JSON object"
    # --isolate-tools: bash and MCP calls go to the worker, never run here (docs/guide-toolboxes.md §5)
    result = isolation.run(call, context) if isolation.applies(tool) else tool.call(arguments, isolation.guard(context))
    return ("Failed" if result.is_error else "Completed"), result.response


@dataclass
class RunSignals:
    """What the run's watcher has seen in the mailbox while a step goes on.

    ``stop``: a cancel or ``stopRun``: attached tool calls are killed. ``interrupt``: an
    interrupt-priority message: attached calls are detached and the model is asked again.
    """

    stop: threading.Event = field(default_factory=threading.Event)
    interrupt: threading.Event = field(default_factory=threading.Event)


def step(
    document: SessionDocument,
    agent: RuntimeAgent,
    session: Any,
    *,
    signals: RunSignals | None = None,
    on_text_delta: Callable[[str], None] | None = None,
    on_tool_event: ToolEventCallback | None = None,
    owner: str | None = None,
    params: StepParams | None = None,
    ledger: Callable[[int], CallLedger] | None = None,
) -> StepResult:
    """Advance ``document`` by one step.

    Args:
        document: the session document (not modified).
        agent: the session's runtime agent.
        session: the Session row (detached calls are recorded against it).
        signals: stop and interrupt requests seen while the step runs.
        on_text_delta: called with each streamed piece of the LLM's text, when streaming.
        on_tool_event: called as ``on_tool_event(kind, payload)`` when a tool call starts
            (``tool.started``), reports progress (``tool.progressed``) and ends
            (``tool.completed`` or ``tool.failed``), always in the step's thread.
        owner: the session's owner, whose keys file (if any) the LLM call uses.
        params: the session's parameter values and tools for this step (none: the agent's tools
            and no values).
        ledger: given the position (oldest first) of the LlmTurn whose calls the step runs, where
            calls are recorded before they run; a call an earlier step started and never stored
            is reported as interrupted instead of run again, unless its tool is safe to retry.
            ``None`` records nothing.
    Returns:
        The new document, the continuations of newly deferred calls and the new background calls.
    Raises:
        NothingToDo: the head is a final answer, waits on calls, or there is no turn.
        agents_app.llm.LlmError: the provider failed; nothing was changed.
    """
    if document.head is None:
        raise NothingToDo("the session has no turn")
    params = params or StepParams()
    signals = signals or RunSignals()
    started = time.monotonic()
    if document.wants_model():
        messages = document.openai_messages(agent.system_prompt)
        with chat_span(agent, messages, on_text_delta) as chat:
            answer = _complete_unless_stopped(
                signals,
                agent.loaded.spec.interruptCompletions,
                spec=agent.loaded.spec,
                api_key=agent.api_key_for(owner),
                messages=messages,
                tools=params.tools(agent).openai_tools(params.visible, document.answered_calls),
                timeout=settings.AGENTS["LLM_TIMEOUT"],
                on_text_delta=chat.on_text_delta,
            )
            chat.answered(answer)
        return StepResult(
            document.push_answer(answer.raw_response, answer.text, answer.thinking, answer.tool_calls, answer.usage),
            kind="model",
            seconds=time.monotonic() - started,
        )
    if document.wants_tools():
        calls = ledger(len(document.turns) - 1) if ledger is not None else None
        ran = _run_calls(_CallRound(document, agent, session, signals, on_tool_event or _ignore, params, calls))
        ran.seconds = time.monotonic() - started
        return ran
    raise NothingToDo(f"nothing to do with a {document.head_tag} head")


class Stopped(Exception):
    """The run was told to stop while the LLM was being asked; the answer is dropped."""


class Interrupted(Exception):
    """An interrupt came while the LLM was being asked, and the agent has ``interruptCompletions``:
    the request was cancelled; the run folds the mail into the head and asks again."""


def _complete_unless_stopped(signals: RunSignals, interruptible: bool, **request: Any) -> Any:
    """Ask the LLM in a thread, so that a stop (cancel, StopRun) does not wait for its answer.

    With ``interruptible`` (the agent's ``interruptCompletions``, docs/sessions.md §6.7) the
    request is cancellable: a stop or an interrupt closes its connection, so the provider stops
    working on it. Otherwise it goes on, and an interrupt waits for its answer.

    Raises:
        Stopped: the run was stopped first; the answer, when it comes, is dropped.
        Interrupted: ``interruptible`` and an interrupt came first; the request was cancelled.
        agents_app.llm.LlmError: the provider failed.
    """
    cancel = threading.Event() if interruptible else None
    # the request's thread goes on in the step's trace context (the chat span is its parent)
    answer = _llm_requests.submit(contextvars.copy_context().run, functools.partial(complete, cancel=cancel, **request))
    while True:
        try:
            return answer.result(timeout=0.05)
        except LlmCancelled:
            raise Interrupted() from None
        except FuturesTimeout:
            if cancel is not None and (signals.stop.is_set() or signals.interrupt.is_set()):
                cancel.set()
                stopping = signals.stop.is_set()
                try:
                    return answer.result()  # the answer won the race: it is kept
                except LlmCancelled:
                    raise (Stopped() if stopping else Interrupted()) from None
            if signals.stop.is_set():
                raise Stopped() from None


#: The threads that wait on the model for the steps of this process (reused from call to call).
_llm_requests = ThreadPoolExecutor(max_workers=64, thread_name_prefix="llm-request")


def _ignore(kind: EventKind, payload: ToolStarted | ToolProgressed | ToolFinished) -> None:
    """The tool-event callback when nobody listens."""


class _InlineCall:
    """A ``runSync`` call running in a thread of the step, so that an interrupt can detach it."""

    def __init__(self, agent: RuntimeAgent, call: dict[str, Any], context: ToolContext) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.outcome: tuple[str, Any] | None = None
        self.detached_id: uuid.UUID | None = None
        self.watcher: executor.Watcher | None = None
        self.cancel = context.cancel or threading.Event()
        # the call's thread is in the execute_tool span: an MCP request it makes carries its traceparent
        run = functools.partial(contextvars.copy_context().run, self._run, agent, call, context)
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def _run(self, agent: RuntimeAgent, call: dict[str, Any], context: ToolContext) -> None:
        try:
            outcome = run_tool_call(agent, call, context)
        except Exception as error:
            outcome = ("Failed", f"Error: {type(error).__name__}: {error}")
        if self.cancel.is_set():
            outcome = ("Failed", background.CANCELLED_TEXT)
        with self.lock:
            self.outcome = outcome
            self.done.set()
            target = self.detached_id
        if target is not None:
            if self.watcher is not None:
                self.watcher.done.set()
            executor.finish(target, *outcome)
            close_old_connections()

    def detach(self, session: Any, tracked: dict[str, Any]) -> bool:
        """Let the call go on alone; ``False`` when it has already finished."""
        with self.lock:
            if self.done.is_set():
                return False
            row = background.create(session, tracked, attached=False)
            background.claim(row.pk, "inline")
            self.detached_id = row.pk
            self.watcher = executor.Watcher(row.pk, self.cancel)
            self.watcher.start()
            return True


class _CallRound:
    """The tool calls of the head LLM turn as one step takes them (docs/sessions.md §3.2): what
    each call becomes, and what the run loop creates with the step's store."""

    def __init__(
        self,
        document: SessionDocument,
        agent: RuntimeAgent,
        session: Any,
        signals: RunSignals,
        on_tool_event: ToolEventCallback,
        params: StepParams,
        ledger: CallLedger | None,
    ) -> None:
        self.document = document
        self.agent = agent
        self.session = session
        self.session_id = str(session.pk)
        self.signals = signals
        self.on_tool_event = on_tool_event
        self.params = params
        self.ledger = ledger
        self.tools = params.tools(agent)
        self.history = functools.cache(document.answered_calls)
        self.hidden = self.tools.hidden(self.history)
        self.continuations: list[NewContinuation] = []
        self.background: list[dict[str, Any]] = []
        self.children: list[NewChild] = []

    def track(self, call: dict[str, Any]) -> TrackedCall:
        """The tracked call that ``call`` becomes as its policy says: failed (a gated tool), deferred,
        answered by a helper session, started in the background, or ``Ready`` to run in the step."""
        name = (call.get("function") or {}).get("name") or ""
        original = self.tools.original_name(name)
        disposition = self.agent.policy.disposition_for(name, original)
        effective = self.agent.policy.decide(name, original)
        tag = effective.get("tag")
        tool = self.tools.get(name)
        if tool is not None and name in self.hidden:
            # a gated tool the model may not reach yet: it never runs, and the model is told how to open it
            return TrackedCall.new(call, CallState.FAILED, disposition, result=hidden_text(tool))
        if tag == "defer":
            entry = TrackedCall.new(call, CallState.DEFERRED, disposition, continuation=str(uuid.uuid4()))
            return self.defer(entry, tool_span_closed(tool, entry, "deferred"))
        if isinstance(tool, SubAgentTool):
            return _child_call(self, call, disposition, tool)
        if tag == "runAsync":
            entry = TrackedCall.new(call, CallState.RUNNING, disposition)
            # attachSeconds 0: the model is answered at once, the result comes as mail
            entry.run_in_background(DETACHED_AT_ONCE if effective.get("attachSeconds") == 0 else None)
            tool_span_closed(tool, entry, "background")
            self.background.append(entry.data)
            return entry
        if tag != "runSync":
            # isolated execution is not built: run the call in the step, and say so in the log
            log.warning(
                "disposition run inline",
                extra={"kind": "tools.inline_fallback", "session_id": self.session_id, "disposition": tag},
            )
        return TrackedCall.new(call, CallState.READY, disposition)

    def defer(self, entry: TrackedCall, traceparent: str) -> TrackedCall:
        """A deferred call: its continuation row is created with the step, keeping the
        ``traceparent`` of the call's span for the span of its completion to link to."""
        self.continuations.append(
            NewContinuation(str(entry.continuation), entry.id, entry.call, entry.policy, traceparent)
        )
        return entry

    def run_inline(self, index: int, entry: TrackedCall) -> None:
        """Run the call at ``index`` of the LLM turn in the step, recorded in the ledger first; one an
        earlier step started is interrupted instead, unless safe to retry; an interrupt detaches it."""
        name = entry.name
        if self.ledger is not None and self.ledger.interrupted(index) and not _safe_to_retry(self.agent, name):
            _interrupt(entry, self.session_id, self.on_tool_event)
            return
        if self.ledger is not None:
            self.ledger.record(index, entry.call)
        # progress is reported in the call's thread and emitted from this one
        reports: queue.SimpleQueue[ToolProgressed] = queue.SimpleQueue()
        context = self.context(entry, reports)
        self.on_tool_event(EventKind.TOOL_STARTED, ToolStarted(tool_call_id=context.tool_call_id, tool=name))
        with tool_span(self.tools.get(name), entry) as span:
            running = _InlineCall(self.agent, entry.call, context)
            if self.wait(running, entry, reports):
                span.ended("detached")
                return
            state, response = running.outcome or ("Failed", "Error: the tool call produced no outcome")
            span.ended(state.lower())
        entry.finish(CallState(state), response)
        self.on_tool_event(
            EventKind.TOOL_COMPLETED if state == "Completed" else EventKind.TOOL_FAILED,
            ToolFinished(
                tool_call_id=context.tool_call_id,
                tool=name,
                status=state.lower(),
                result=bounded(response, settings.AGENTS["EVENT_VALUE_MAX_BYTES"]),
            ),
        )

    def context(self, entry: TrackedCall, reports: queue.SimpleQueue[ToolProgressed]) -> ToolContext:
        """What the tool of an inline call is given; its progress reports go to ``reports``."""
        progress, output = progress_reporters(entry.provider_id, entry.name, reports.put)
        return ToolContext(
            session_id=self.session_id,
            conversation_id=self.session_id,
            turn_id=self.document.turn_id,
            agent_slug=self.agent.slug,
            tool_call_id=entry.provider_id,
            timeout=self.agent.loaded.spec.asyncCallTimeoutSeconds or settings.AGENTS["TOOL_TIMEOUT"],
            cancel=threading.Event(),
            sessions=DbSessionsPort(self.session_id),
            tools=self.tools,
            progress=progress,
            output=output,
            params=self.params.values,
            inherited_bindings=self.params.inherited,
        )

    def wait(self, running: _InlineCall, entry: TrackedCall, reports: queue.SimpleQueue[ToolProgressed]) -> bool:
        """Wait for an inline call, emitting its progress; a stop cancels it, an interrupt detaches
        it. Returns whether it was detached."""
        while not running.done.wait(0.05):
            _emit_progress(reports, self.on_tool_event)
            if self.signals.stop.is_set():
                running.cancel.set()
            if self.signals.interrupt.is_set() and running.detach(self.session, entry.data):
                entry.detach(DETACHED_BY_INTERRUPT)
                break
        _emit_progress(reports, self.on_tool_event)
        return entry.state is CallState.RUNNING


def _run_calls(calls: _CallRound) -> StepResult:
    """Run, start or defer every tool call of the head LLM turn (docs/sessions.md §3.2).

    ``defer`` calls get a continuation; ``runAsync`` calls become background calls (started by the
    run loop once the step is stored); the others run one after another in this step, each
    recorded in the ledger before it runs (one an earlier step started is interrupted, unless
    safe to retry). An interrupt detaches the call running and those not started yet: they go
    on in the background and their results come back as mail.
    """
    tracked = [calls.track(call) for call in calls.document.head_tool_calls()]
    inline = [(index, entry) for index, entry in enumerate(tracked) if entry.state is CallState.READY]
    for index, entry in inline:
        calls.run_inline(index, entry)
    system_tools = calls.tools.system_tools(calls.params.visible, calls.history)
    document = calls.document.push_calls(calls.agent.system_prompt, system_tools, tracked)
    return StepResult(document, calls.continuations, calls.background, calls.children, ran_calls=bool(inline))


def _safe_to_retry(agent: RuntimeAgent, name: str) -> bool:
    """Whether a call of tool ``name`` may run again after an interruption: its tool says so
    (``safe-to-retry`` in a bash tool's ``describe``), or the agent file's ``safeToRetry`` lists
    it (docs/tools.md §5.4)."""
    tool = agent.toolset.get(name)
    if tool is not None and tool.safe_to_retry:
        return True
    listed = agent.loaded.spec.safeToRetry
    return name in listed or agent.toolset.original_name(name) in listed


def _interrupt(entry: TrackedCall, session_id: str, on_tool_event: ToolEventCallback) -> None:
    """Close a call an earlier step started and never stored as interrupted, without running it."""
    entry.finish(CallState.FAILED, INTERRUPTED_TEXT)
    log.warning(
        "tool call interrupted", extra={"kind": "tools.interrupted", "session_id": session_id, "tool": entry.name}
    )
    finished = ToolFinished(tool_call_id=entry.provider_id, tool=entry.name, status="failed", result=INTERRUPTED_TEXT)
    on_tool_event(EventKind.TOOL_FAILED, finished)


def _emit_progress(reports: queue.SimpleQueue[ToolProgressed], on_tool_event: ToolEventCallback) -> None:
    """Emit the progress reports a running call has made since the last look."""
    while True:
        try:
            report = reports.get_nowait()
        except queue.Empty:
            return
        on_tool_event(EventKind.TOOL_PROGRESSED, report)


def _child_call(
    calls: _CallRound, call: dict[str, Any], disposition: dict[str, Any], helper: SubAgentTool
) -> TrackedCall:
    """A helper call: a child session will answer it (docs/sessions.md §7, docs/decisions.md §13).

    The call waits like a deferred one, on an internal continuation the child completes when it
    stops; the depth limit (``AGENTS_MAX_SUBAGENT_DEPTH``) turns runaway recursion into a tool
    error, and a narrowing the calling model can fix fails the call with its reason
    (docs/tools.md §8.6), before any child exists.
    """
    chain = [calls.session.agent_slug]
    ancestor = calls.session.parent
    while ancestor is not None:
        chain.append(ancestor.agent_slug)
        ancestor = ancestor.parent
    limit = settings.AGENTS["MAX_SUBAGENT_DEPTH"]
    if len(chain) > limit:
        path = " > ".join(reversed(chain))
        return TrackedCall.new(
            call, CallState.FAILED, disposition, result=f"Error: max sub-agent depth {limit} reached: {path}"
        )
    try:
        arguments = json.loads((call.get("function") or {}).get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = None
    what = arguments.get("what") if isinstance(arguments, dict) else None
    if not isinstance(what, str) or not what.strip():
        return TrackedCall.new(call, CallState.FAILED, disposition, result='Error: a helper call needs a "what" string')
    try:
        prepared = prepare_helper_call(
            helper,
            arguments,
            caller=calls.params.values,
            inherited=calls.params.inherited,
            derived=derived_table(calls.history()),
            lookup=runtime_agent,
        )
    except NarrowingError as error:
        return TrackedCall.new(call, CallState.FAILED, disposition, result=f"Error: {error}")
    entry = TrackedCall.new(call, CallState.DEFERRED, disposition, continuation=str(uuid.uuid4()))
    child = entry.answer_by_child()
    # the helper's run is a child of this span, in the same trace
    traceparent = tool_span_closed(helper, entry, "child")
    calls.defer(entry, traceparent)
    calls.children.append(
        NewChild(child, helper.slug, what, len(chain), prepared.params, prepared.narrowing, traceparent)
    )
    return entry
