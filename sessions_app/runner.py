"""The run loop, executed by a Celery worker (docs/sessions.md §4).

A run is requested by a service (``status=running`` and a fresh ``run_id``). The task claims it
with one conditional UPDATE; a second delivery of the same task, or a task for an older run,
changes no row and exits, so a run never executes two steps at once. While the run goes on a
the process's run monitor (``sessions_app.monitor``) renews the lease; every store is fenced by
the version and by the lease.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from enum import StrEnum
from functools import partial
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone
from opentelemetry import trace

from agentfiles import document as doc
from agentfiles.bindings import ScopedBinding
from agentfiles.keys import fallback_api_key
from agentfiles.session_document import CallState, SessionDocument, TrackedCall
from agents_app.llm import LlmError
from agents_app.narrowing import narrowed_toolset
from agents_app.registry import get_registry
from agents_app.runtime import RuntimeAgent, runtime_agent
from foundation import metrics
from foundation.auth import AuthConfigError, auth_config
from foundation.common import db_now_in_statement
from foundation.errors import UnreadableSession
from foundation.redaction import redact, redact_urls
from sessions_app import background, events, hub, mailbox, timings
from sessions_app.deltas import DeltaBuffer
from sessions_app.dispatch import enqueue_background_call, send_background_call, send_run
from sessions_app.engine import (
    DETACHED_BY_INTERRUPT,
    Interrupted,
    NothingToDo,
    RunSignals,
    StepParams,
    Stopped,
    step,
)
from sessions_app.event_types import (
    CallsDeferred,
    EventKind,
    RunStarted,
    RunStopped,
    SessionFailed,
)
from sessions_app.models import Session
from sessions_app.monitor import RunWatch, forget_run, watch_run
from sessions_app.outcomes import StepResult
from sessions_app.services import params as values
from sessions_app.services.continuations import apply_completed_continuations, create_continuations, mark_applied
from sessions_app.services.tree import child_create, deliver_to_parent
from sessions_app.started import StartedCalls, forget_started
from sessions_app.store import VersionConflict, lease_deadline, store, store_columns
from sessions_app.tracing import run_finished, run_span
from tools_app.policy import flatten_disposition
from tools_app.toolset import ToolSet

log = logging.getLogger("sessions.runner")

#: This process's name in ``run_owner``: unique per process, readable in the admin.
WORKER_NAME = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RunEnd(StrEnum):
    """Why a run stops before its turns decide the status: a Pause (stored ``paused``), a StopRun
    or cancel (stored with the status its turns imply, its attached calls cancelled), or a failure
    (stored ``failed``)."""

    PAUSED = "paused"
    STOPPED = "stopped"
    FAILED = "failed"


class LeaseLost(Exception):
    """Another worker holds the run now; stop without storing anything."""


def claim_run(session_id: uuid.UUID, run_id: uuid.UUID) -> Session | None:
    """Take the lease of run ``run_id`` if it is still requested and no live lease holds it.

    Returns:
        The session row as claimed when this worker now holds the run, else ``None``.
    """
    with transaction.atomic():
        # the database's clock inside the UPDATE: a claim is one statement, not two
        now = db_now_in_statement()
        requested = Session.objects.filter(pk=session_id, run_id=run_id, status=Session.Status.RUNNING)
        claim = {"run_owner": WORKER_NAME, "run_lease_until": lease_deadline(now)}
        changed = requested.filter(run_owner__isnull=True).update(**claim)
        if changed != 1:
            # a lease that expired: its holder died or stalled (counted: docs/observability.md §2.1)
            changed = requested.filter(run_lease_until__lt=now).update(**claim)
            if changed != 1:
                return None
            metrics.LEASES_TAKEN_OVER.inc()
        session = Session.objects.get(pk=session_id)
        events.emit(
            EventKind.RUN_STARTED,
            session.pk,
            session.owner,
            RunStarted(mode=session.run_mode or Session.RunMode.UNTIL_BLOCKED),
        )
    return session


def run_session(session_id: str, run_id: str) -> None:
    """Execute run ``run_id`` of session ``session_id`` if this worker can claim it.

    Steps until the LLM answers (``idle``), only deferred calls remain (``waiting_external``),
    or after one step in ``step`` mode; stops on Pause (``paused``) and StopRun or cancel; a
    provider error or any exception stores ``failed`` with a ``status_detail`` and keeps every
    stored turn.
    """
    sid, rid = uuid.UUID(session_id), uuid.UUID(run_id)
    close_old_connections()
    claimed = claim_run(sid, rid)
    if claimed is None:
        log.info("run not claimed", extra={"kind": "run.not_claimed", "session_id": session_id})
        return
    heartbeat = watch_run(sid, rid, WORKER_NAME)
    with run_span(claimed.agent_slug, session_id) as span:
        try:
            _loop(claimed, heartbeat)
        except LeaseLost:
            run_finished(span, claimed.agent_slug, "lease_lost")
            log.warning("lease lost", extra={"kind": "run.lease_lost", "session_id": session_id})
        except UnreadableSession as error:
            _fail_unreadable(sid, error.message)
        finally:
            forget_run(heartbeat)
            close_old_connections()


def _loop(session: Session, heartbeat: RunWatch) -> None:
    """Step the claimed ``session`` until its run ends (see :func:`run_session`)."""
    run = _Run(session, heartbeat)
    log.info("run started", extra={"kind": "run.started", "session_id": str(run.session_id), "mode": run.mode})
    try:
        if run.open():
            while not run.next_pass():
                pass
    except (LeaseLost, UnreadableSession):
        raise
    except LlmError as error:
        _finish(run.session_id, run.mode, RunEnd.FAILED, error.detail, agent=None)
    except VersionConflict:
        _finish(run.session_id, run.mode, RunEnd.FAILED, "concurrent modification", agent=None)
    except Exception as error:
        log.exception("run failed", extra={"kind": "run.failed", "session_id": str(run.session_id)})
        _finish(run.session_id, run.mode, RunEnd.FAILED, f"{type(error).__name__}: {error}", agent=None)


class _Run:
    """One claimed run as its loop goes (docs/sessions.md §4): the session as last read, the
    agent and its tools (set by :meth:`open`), and how many steps it has stored."""

    agent: RuntimeAgent
    held: values.RunValues
    narrowed: ToolSet | None
    tools: ToolSet
    inherited: tuple[ScopedBinding, ...]

    def __init__(self, session: Session, heartbeat: RunWatch) -> None:
        self.session = session
        self.session_id = session.pk
        self.heartbeat = heartbeat
        self.signals = heartbeat.signals
        self.mode = Session.RunMode(session.run_mode or Session.RunMode.UNTIL_BLOCKED)
        self.steps = 0
        # the claim has just read the row; later passes read it again, as others may have written
        self.fresh = True

    def open(self) -> bool:
        """Load the agent and the session's tools; ``False`` when the run cannot start for want of
        parameters (then it is stored ``failed``)."""
        self.agent = runtime_agent(self.session.agent_slug)
        self.held = values.run_values(self.agent, self.session)
        refusal = _params_refusal(self.agent, self.session, self.held)
        if refusal is not None:
            _finish(self.session_id, self.mode, RunEnd.FAILED, refusal, agent=None)
            return False
        narrowing = self.held.narrowing
        self.narrowed = narrowed_toolset(self.agent.toolset, narrowing.here) if narrowing is not None else None
        self.tools = self.narrowed if self.narrowed is not None else self.agent.toolset
        self.inherited = tuple(narrowing.below) if narrowing is not None else ()
        return True

    def next_pass(self) -> bool:
        """Take in what came since the last pass, then wait for the attached background calls,
        fold the unread mail and take a step. Returns ``True`` once the run has ended.

        Raises:
            LeaseLost: another worker holds the run now.
        """
        if self.heartbeat.lost.is_set():
            raise LeaseLost()
        if hub.shutting_down.is_set():
            _hand_back(self.session_id)
            return True
        document, mail, stop = self._take_news()
        if stop is not None:
            _finish(self.session_id, self.mode, stop, None, agent=self.agent)
            return True
        if document.has_attached_background():
            document = _wait_background(self.session, document, self.agent, self.signals)
            self.session = _fenced_store_atomic(self.session, document)
            return False
        if mail:
            document = self._fold_mail(document)
        if self.steps >= 1 and self.mode == Session.RunMode.STEP:
            return _finish(self.session_id, self.mode, None, None, agent=self.agent)
        return self._step(document)

    def _take_news(self) -> tuple[SessionDocument, bool, RunEnd | None]:
        """The session read again with the results posted since applied and its control mail
        consumed (stored when either changed it): ``(document, unread mail may exist, stop)``."""
        if not self.fresh:
            self.session = Session.objects.get(pk=self.session_id)
        self.fresh = False
        # values are read again at every pass: a continuation or a message may bring new ones
        self.held = values.run_values(self.agent, self.session)
        data, applied = apply_completed_continuations(self.session, self.session.document)
        mail = mailbox.may_have_unread(self.session.last_mail_seq, data)
        data, stop, controls = _take_controls(self.session, data) if mail else (data, None, False)
        document = SessionDocument(data)
        if applied or controls:
            with transaction.atomic():
                self.session = _fenced_store(self.session, document)
                mark_applied(applied)
        return document, mail, stop

    def _fold_mail(self, document: SessionDocument) -> SessionDocument:
        """The unread mail folded into the head and stored, when there is some the head can take."""
        unread = [e for e in mailbox.unread(self.session, document.data) if not mailbox.is_control(e)]
        if not unread or not mailbox.can_fold(document.data):
            return document
        folded = mailbox.fold(
            document.data,
            unread,
            system_prompt=self.agent.system_prompt,
            system_tools=self.tools.system_tools(self.held.visible, document.answered_calls),
            in_tool_result=self.agent.loaded.spec.mailInToolResult,
        )
        self.signals.interrupt.clear()
        self.session = _fenced_store_atomic(self.session, SessionDocument(folded))
        return SessionDocument(folded)

    def _step(self, document: SessionDocument) -> bool:
        """One step, stored; ``True`` when it ended the run (nothing left to do ends it too)."""
        deltas = DeltaBuffer(self.session.pk, self.session.owner) if settings.AGENTS["STREAM_TOKENS"] else None
        kind = "model" if document.wants_model() else "tools"
        started = time.monotonic()
        try:
            result = step(
                document,
                self.agent,
                self.session,
                signals=self.signals,
                on_text_delta=deltas.add if deltas is not None else None,
                on_tool_event=events.tool_event_emitter(self.session),
                owner=self.session.owner,
                params=StepParams(self.held.values, self.held.visible, self.narrowed, self.inherited),
                ledger=partial(StartedCalls, self.session.pk),
            )
        except NothingToDo:
            return _finish(self.session_id, self.mode, None, None, agent=self.agent)
        except Stopped:
            # cancel or StopRun while the LLM was asked: the next pass takes the control
            return False
        except Interrupted:
            # the request was cancelled: the next pass folds the mail into the head and asks again
            log.info(
                "completion interrupted",
                extra={"kind": "run.completion_interrupted", "session_id": str(self.session_id)},
            )
            return False
        finally:
            # the streamed text is out before the turn that holds it is stored
            if deltas is not None:
                deltas.flush()
        ended = _store_step(self.session, result, mode=self.mode)
        metrics.STEPS.labels(agent=self.agent.slug, kind=kind).inc()
        metrics.STEP_SECONDS.labels(agent=self.agent.slug, kind=kind).observe(time.monotonic() - started)
        if ended:
            return True
        self.steps += 1
        return False


def _params_refusal(agent: RuntimeAgent, session: Session, held: values.RunValues) -> str | None:
    """Why a run cannot start for want of parameters (``params_required: <names>``), or ``None``:
    a required session-scope value lost (a secret after a restart), or a helper's narrowing lost."""
    missing = agent.parameters.unbound_required(held.values, ["session"])
    if held.narrowing_lost:
        missing.append("narrowing")
    if not missing:
        return None
    log.warning(
        "parameters required", extra={"kind": "sessions.params_required", "session_id": str(session.pk),
                                      "params": missing}
    )
    return f"params_required: {', '.join(missing)}"


def _store_step(session: Session, result: StepResult, *, mode: Session.RunMode) -> bool:
    """Store a step with its continuations and background calls; start those after commit.

    A step that leaves the run nothing to do (a final answer, or any step in ``step`` mode,
    without calls started or deferred) and finds no new mail also ends the run, in the same
    write: ``True`` is returned then.
    """
    final = None
    if not (result.continuations or result.background or result.children):
        status = result.document.status()
        if status == Session.Status.IDLE or mode == Session.RunMode.STEP:
            final = status
    with transaction.atomic():
        if final is not None:
            newest_mail = Session.objects.filter(pk=session.pk).values_list("last_mail_seq", flat=True).get()
            if mailbox.may_have_unread(newest_mail, result.document.data):
                final = None
        if final is not None:
            values.drop_run_on_commit(session.pk, session.run_id)
            session = _fenced_store(session, result.document, **_stopped_fields(final, None))
            _announce_stop(session, final, cancelled=False)
        else:
            session = _fenced_store(session, result.document)
        timings.record(session, result.kind, result.seconds)
        if result.ran_calls:
            forget_started(session.pk)
        create_continuations(session, result.continuations)
        rows = [background.create(session, entry, attached=not entry.get("tcDetached")) for entry in result.background]
        calls = {tc.child: tc.call for tc in result.document.tracked_calls()}
        for child in result.children:
            child_create(session, child, calls.get(str(child.session_id), {}))
        if result.continuations:
            tokens = {c.token for c in result.continuations}
            deferred = [c for c in result.document.pending_calls() if c["continuation_token"] in tokens]
            events.emit(EventKind.CALLS_DEFERRED, session.pk, session.owner, CallsDeferred(calls=deferred))
        for row in rows:
            enqueue_background_call(row.pk)
    if final is not None:
        run_finished(trace.get_current_span(), session.agent_slug, str(final))
        log.info("run stopped", extra={"kind": "run.stopped", "session_id": str(session.pk), "status": final})
    return final is not None


def _stopped_fields(final: str, detail: str | None) -> dict[str, Any]:
    """The columns of a session whose run stops with status ``final``: the lease released."""
    return {
        "status": final,
        "status_detail": detail if final == Session.Status.FAILED else None,
        "run_id": None,
        "run_mode": None,
        "run_owner": None,
        "run_lease_until": None,
    }


def _announce_stop(session: Session, final: str, *, cancelled: bool) -> None:
    """``run.stopped``, and a child's outcome for the parent call waiting on it, after commit.

    A run that leaves its session ``running`` (its helpers work for it) has not stopped to the
    session's clients: no ``run.stopped`` until the run that takes their answers stops.
    """
    if final != Session.Status.RUNNING:
        events.emit(EventKind.RUN_STOPPED, session.pk, session.owner, RunStopped(status=final))
    if session.parent_id is not None:
        session_id = session.pk
        transaction.on_commit(lambda: deliver_to_parent(session_id, cancelled=cancelled))


def _take_controls(session: Session, document: dict[str, Any]) -> tuple[dict[str, Any], RunEnd | None, bool]:
    """Consume unread control mail in order (``mailbox.take_controls``): ``(document, stop,
    consumed_any)``, ``stop`` being ``PAUSED`` (Pause), ``STOPPED`` (StopRun) or ``None``."""
    document, stop, consumed = mailbox.take_controls(session, document)
    ends = {mailbox.Control.PAUSE: RunEnd.PAUSED, mailbox.Control.STOP_RUN: RunEnd.STOPPED}
    return document, ends.get(stop) if stop is not None else None, consumed


def _wait_background(session: Session, document: SessionDocument, agent: Any, signals: RunSignals) -> SessionDocument:
    """Wait for the head's attached background calls as ``asyncYieldStrategy`` says.

    ``yieldWhenAllDone`` (default) waits for all; ``yieldOnAnyProgress`` for one, then detaches
    the rest; ``{"tag": "yieldOnTimeout", "milliseconds": N}`` detaches what is left after N ms.
    A call whose disposition has ``attachSeconds`` N is detached alone once it has run N seconds
    (the wait goes on for the others when the loop comes back). An interrupt detaches them all;
    a stop or a Pause returns at once (the loop handles it).
    """
    strategy = agent.loaded.spec.asyncYieldStrategy
    timeout_ms = strategy.get("milliseconds") if isinstance(strategy, dict) else None
    started = time.monotonic()
    open_calls = [tc for tc in document.tracked_calls() if tc.attached_running]
    waiting = [tc.id for tc in open_calls]
    attach = {tc.id: _attach_seconds(tc.policy) for tc in open_calls}
    with hub.SessionWatch(str(session.pk)) as watch:
        while True:
            if background.orphan_stale(session):
                # slots a dead executor held are free: the calls maxConcurrency held back may start
                for call_id in background.waiting(session.pk):
                    send_background_call(str(call_id))
            rows = background.results_for(session, waiting)
            finished = {tc_id: row for tc_id, row in rows.items() if row.state != "running"}
            document = _apply_background(document, finished)
            still = [tc_id for tc_id in waiting if tc_id not in finished]
            if not still:
                return document
            if signals.interrupt.is_set():
                reason, leaving = DETACHED_BY_INTERRUPT, still
            elif strategy == "yieldOnAnyProgress" and finished:
                reason, leaving = "still running when another call of the turn finished", still
            elif timeout_ms is not None and (time.monotonic() - started) * 1000 >= timeout_ms:
                reason, leaving = f"still running after {timeout_ms} ms", still
            else:
                now = timezone.now()
                leaving = [
                    tc_id for tc_id in still
                    if (seconds := attach[tc_id]) is not None and tc_id in rows
                    and (now - rows[tc_id].created_at).total_seconds() >= seconds
                ]
                reason = f"still running after {attach[leaving[0]]:g}s" if leaving else ""
            if leaving:
                late = background.detach(session, leaving)
                document = _apply_background(document, late)
                return _mark_detached(document, [tc_id for tc_id in leaving if tc_id not in late], reason)
            if signals.stop.is_set() or _pause_pending(session, document):
                return document
            watch.wait(0.25)


def _pause_pending(session: Session, document: SessionDocument) -> bool:
    return any(mailbox.is_control(e) for e in mailbox.unread(session, document.data))


def _apply_background(document: SessionDocument, rows: dict[str, Any]) -> SessionDocument:
    """Write finished background calls into the head partial turn (closing it when all are final)."""

    def finish(tc: TrackedCall) -> bool:
        row = rows.get(tc.id)
        if row is None or tc.state is not CallState.RUNNING:
            return False
        tc.finish(CallState.COMPLETED if row.state == "completed" else CallState.FAILED, row.result)
        return True

    return document.edit_calls(finish) if rows else document


def _attach_seconds(disposition: Any) -> float | None:
    """The ``attachSeconds`` of a call's disposition (``decorate`` layers looked through), if any."""
    seconds = flatten_disposition(disposition).get("attachSeconds") if isinstance(disposition, dict) else None
    return float(seconds) if isinstance(seconds, int | float) and not isinstance(seconds, bool) else None


def _mark_detached(document: SessionDocument, tc_ids: list[str], reason: str) -> SessionDocument:
    """The head's calls ``tc_ids`` detached (still running, their results to come as mail)."""

    def detach(tc: TrackedCall) -> bool:
        if tc.id in tc_ids:
            tc.detach(reason)
        return tc.id in tc_ids

    return document.edit_calls(detach)


def _cancel_attached(session: Session, document: dict[str, Any]) -> dict[str, Any]:
    """A stopped run's attached calls are cancelled, and reported as such to the LLM next time."""
    ids: list[str] = []

    def cancel(tc: TrackedCall) -> bool:
        if tc.attached_running or (tc.state is CallState.DEFERRED and tc.child):
            tc.finish(CallState.FAILED, background.CANCELLED_TEXT)
            ids.append(tc.id)
        return tc.id in ids

    cancelled = SessionDocument(document).edit_calls(cancel)
    if ids:
        # still attached: their killed executors record the cancellation without posting mail
        background.cancel_calls(session, ids)
    return cancelled.data


def _hand_back(session_id: uuid.UUID) -> None:
    """This process is shutting down: give the run back between two steps.

    The session stays ``running`` with no lease, so the run is claimed again: by another worker
    at once when the broker is shared (the task is sent again), else by the startup recovery of
    the next embedded server.
    """
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        if session.run_owner != WORKER_NAME:
            raise LeaseLost()
        store(session, session.document, fence_run=WORKER_NAME, run_owner=None, run_lease_until=None)
        if settings.REDIS_URL:
            run_id = str(session.run_id)
            transaction.on_commit(lambda: send_run(str(session_id), run_id))
    run_finished(trace.get_current_span(), session.agent_slug, "handed_back")
    log.info("run handed back", extra={"kind": "run.handed_back", "session_id": str(session_id)})


def _fenced_store(session: Session, document: SessionDocument, **fields: Any) -> Session:
    try:
        return store(session, document.data, fence_run=WORKER_NAME, **fields)
    except VersionConflict:
        holder = Session.objects.filter(pk=session.pk).values_list("run_owner", flat=True).first()
        if holder != WORKER_NAME:
            raise LeaseLost() from None
        raise


def _fenced_store_atomic(session: Session, document: SessionDocument) -> Session:
    with transaction.atomic():
        return _fenced_store(session, document)


def _fail_unreadable(session_id: uuid.UUID, detail: str) -> None:
    """The session's document cannot be read: store ``failed`` saying why, without reading it."""
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        if session.run_owner != WORKER_NAME:
            return
        events.emit(EventKind.SESSION_FAILED, session.pk, session.owner, SessionFailed(message=detail))
        session = store_columns(session, fence_run=WORKER_NAME, **_stopped_fields(Session.Status.FAILED, detail))
        _announce_stop(session, Session.Status.FAILED, cancelled=False)
    run_finished(trace.get_current_span(), session.agent_slug, "failed", detail)
    log.warning("run failed", extra={"kind": "run.unreadable_session", "session_id": str(session_id)})


def _redacted(detail: str | None) -> str | None:
    """A failure's text without any configured secret in it (docs/agents.md §7.5): the values
    of the API keys files, the bearer tokens of the tokens file, and the credentials of the URLs
    it quotes (an unreachable ``modelUrl``'s, say)."""
    if detail is None:
        return None
    detail = redact_urls(detail)
    registry = get_registry()
    secrets = [*registry.api_keys.values(), *filter(None, [fallback_api_key()])]
    secrets += [value for keys in registry.owner_api_keys.values() for value in keys.values()]
    try:
        digests = [digest for digest, _ in auth_config().digests]
    except AuthConfigError:
        digests = []
    return redact(detail, secrets, digests)


def _finish(
    session_id: uuid.UUID, mode: Session.RunMode, status: RunEnd | None, detail: str | None, *, agent: Any
) -> bool:
    """Release the lease and store the final status (derived from the turns unless given).

    Under the row lock, results and mail posted since the last step are looked at first, so
    none is left behind by a run that was about to stop: if they let an ``until_blocked`` run go
    on, the lease is kept and ``False`` is returned (the loop continues). Every control still
    unread is consumed, whatever ends the run, so that none outlives it (docs/sessions.md §6.3).
    A run stopped by StopRun or cancel has its attached calls cancelled; Pause stores ``paused``.
    A failure's ``detail`` is stored without the configured secrets it may quote.
    """
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        if session.run_owner != WORKER_NAME:
            raise LeaseLost()
        document, applied = apply_completed_continuations(session, session.document)
        mark_applied(applied)
        mail = mailbox.may_have_unread(session.last_mail_seq, document)
        if mail:
            # every control posted to this run is consumed now: none is left to stop the next one
            document, late_stop, _ = _take_controls(session, document)
            status = status if status is not None else late_stop
        if status is None and mode == Session.RunMode.UNTIL_BLOCKED:
            pending_mail = [e for e in mailbox.unread(session, document) if not mailbox.is_control(e)] if mail else []
            progress = (applied and doc.status_of(document) == "ready") or (pending_mail and mailbox.can_fold(document))
            if progress:
                store(session, document, fence_run=WORKER_NAME)
                return False
        if status == RunEnd.STOPPED or (status == RunEnd.PAUSED and agent and agent.loaded.spec.pauseCancelsCalls):
            document = _cancel_attached(session, document)
        final = str(status) if status in (RunEnd.FAILED, RunEnd.PAUSED) else doc.status_of(document)
        detail = _redacted(detail)
        if status == RunEnd.FAILED:
            events.emit(EventKind.SESSION_FAILED, session.pk, session.owner, SessionFailed(message=detail))
        values.drop_run_on_commit(session.pk, session.run_id)
        session = store(session, document, fence_run=WORKER_NAME, **_stopped_fields(final, detail))
        _announce_stop(session, final, cancelled=status == RunEnd.STOPPED)
    run_finished(trace.get_current_span(), session.agent_slug, final, detail)
    log.info("run stopped", extra={"kind": "run.stopped", "session_id": str(session_id), "status": final})
    return True
