"""Celery tasks: thin wrappers over the run loop."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

from celery import shared_task
from celery.signals import worker_process_shutdown, worker_shutting_down
from django.conf import settings

from agents_app.narrowing import narrowed_toolset
from agents_app.runtime import runtime_agent
from sessions_app import background, events, executor, hub, runner
from sessions_app.dispatch import FORWARD_WATCHED_EVENT_TASK, RUN_BACKGROUND_CALL_TASK, RUN_SESSION_TASK
from sessions_app.engine import run_tool_call
from sessions_app.event_types import EventKind, ToolProgressed, progress_reporters
from sessions_app.models import BackgroundCall
from sessions_app.ports import DbSessionsPort
from sessions_app.services import idempotency
from sessions_app.services import params as values
from sessions_app.services.agentmail import watched_event_forward
from sessions_app.services.recovery import recover_stale_runs
from tools_app.base import ToolContext
from tools_app.mcp.manager import shutdown as stop_mcp_servers

log = logging.getLogger("sessions.tasks")


@worker_shutting_down.connect
def _on_worker_shutdown(**kwargs: Any) -> None:
    """A worker told to stop (SIGTERM) hands its runs back after their current step."""
    hub.begin_shutdown()


@worker_process_shutdown.connect
def _on_worker_process_shutdown(**kwargs: Any) -> None:
    """A pool process that leaves (prefork children leave without the atexit hooks) stops the MCP
    servers it started."""
    stop_mcp_servers()


@shared_task(name=RUN_SESSION_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_session_task(session_id: str, run_id: str) -> None:
    """Execute run ``run_id`` of a session; a duplicate delivery finds it claimed and exits."""
    runner.run_session(session_id, run_id)


@shared_task(name=FORWARD_WATCHED_EVENT_TASK, ignore_result=True)
def forward_watched_event_task(event_seq: str) -> int:
    """Mail one event to the sessions watching its session (``watch-session``)."""
    return watched_event_forward(int(event_seq))


@shared_task(name="events.prune", ignore_result=True)
def prune_events_task() -> int:
    """Delete events older than ``AGENTS_EVENT_RETENTION_SECONDS`` (run periodically by beat)."""
    return events.prune(timedelta(seconds=settings.AGENTS["EVENT_RETENTION_SECONDS"]))


@shared_task(name="idempotency.prune", ignore_result=True)
def prune_idempotency_keys_task() -> int:
    """Delete idempotency keys older than ``AGENTS_IDEMPOTENCY_TTL_SECONDS`` (run periodically by beat)."""
    return idempotency.prune()


@shared_task(name="sessions.sweep", ignore_result=True)
def sweep_runs_task() -> None:
    """Recover runs whose lease expired and resend unclaimed ones (run periodically by beat)."""
    recovered, resent = recover_stale_runs(all_claimed=False)
    if recovered:
        log.warning("sessions taken over", extra={"kind": "sessions.taken_over", "session_ids": recovered})
    if resent:
        log.info("runs resent", extra={"kind": "sessions.runs_resent", "session_ids": resent})


@shared_task(name=RUN_BACKGROUND_CALL_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_background_call_task(call_id: str) -> None:
    """Run a ``runAsync`` tool call; a duplicate delivery finds it claimed and exits, and so does a
    delivery while the session's ``maxConcurrency`` calls execute (it is sent again when one ends)."""
    row = BackgroundCall.objects.select_related("session").filter(pk=call_id).first()
    if row is None:
        return
    session = row.session
    agent = runtime_agent(session.agent_slug)
    if not background.claim(row.pk, runner.WORKER_NAME, limit=agent.loaded.spec.maxConcurrency):
        return
    executor.started(row)
    timeout = agent.loaded.spec.asyncCallTimeoutSeconds or settings.AGENTS["TOOL_TIMEOUT"]
    # the session's values as the call starts: those of the run that started it, if it still holds them
    held = values.run_values(agent, session)
    tools = narrowed_toolset(agent.toolset, held.narrowing.here) if held.narrowing is not None else agent.toolset

    def emit_progress(payload: ToolProgressed) -> None:
        events.emit(EventKind.TOOL_PROGRESSED, session.pk, session.owner, payload)

    progress, output = progress_reporters(row.provider_call_id, row.tool, emit_progress)

    def work(cancel: threading.Event) -> tuple[str, Any]:
        context = ToolContext(
            session_id=str(session.pk),
            conversation_id=str(session.pk),
            turn_id=session.document.get("turnId") or "",
            agent_slug=agent.slug,
            tool_call_id=row.provider_call_id,
            timeout=timeout + executor.TIMEOUT_GRACE,
            cancel=cancel,
            sessions=DbSessionsPort(str(session.pk)),
            tools=tools,
            progress=progress,
            output=output,
            params=held.values,
            inherited_bindings=tuple(held.narrowing.below) if held.narrowing is not None else (),
        )
        return run_tool_call(agent, row.call, context)

    executor.execute(row.pk, work, timeout)
