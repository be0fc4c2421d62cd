"""The run claim: a run task delivered twice, or a stale one, never runs a second step."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentfiles.loader import load_agent_files
from agents_app.registry import AgentRegistry, set_registry
from agents_app.runtime import reset_runtime_agents
from devtools.mockllm import MockLlmServer
from sessions_app import mailbox, runner
from sessions_app.models import Session
from sessions_app.services import sessions
from sessions_app.services.mail import mail_send
from sessions_app.services.recovery import recover_stale_runs
from tests.harness import write_agent


@pytest.fixture
def agent_registry(tmp_path: Path, llm_server: Callable[..., MockLlmServer]) -> Iterator[MockLlmServer]:
    llm = llm_server({"rules": [{"reply": {"delay": 0.5, "content": "one answer"}}]})
    set_registry(AgentRegistry(load_agent_files([write_agent(tmp_path, "single", llm.url)]), {}))
    reset_runtime_agents()
    yield llm
    set_registry(None)
    reset_runtime_agents()


@pytest.mark.django_db(transaction=True)
def test_a_task_delivered_twice_runs_the_step_once(agent_registry: MockLlmServer) -> None:
    session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    run_id = str(session.run_id)
    threads = [threading.Thread(target=runner.run_session, args=(str(session.pk), run_id)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == "idle"
    assert [t["tag"] for t in stored.document["turns"]] == ["LlmTurn", "UserTurn"]
    assert len(agent_registry.requests) == 1
    # a redelivery after the run finished finds nothing to claim
    runner.run_session(str(session.pk), run_id)
    assert len(agent_registry.requests) == 1
    assert Session.objects.get(pk=session.pk).version == stored.version


@pytest.mark.django_db(transaction=True)
def test_a_stale_task_does_not_run_a_newer_run(agent_registry: MockLlmServer) -> None:
    session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    runner.run_session(str(session.pk), str(uuid.uuid4()))
    assert len(agent_registry.requests) == 0
    assert Session.objects.get(pk=session.pk).status == "running"
    runner.run_session(str(session.pk), str(session.run_id))
    assert len(agent_registry.requests) == 1
    assert Session.objects.get(pk=session.pk).status == "idle"


@pytest.mark.django_db(transaction=True)
def test_a_live_lease_held_elsewhere_is_not_taken(agent_registry: MockLlmServer) -> None:
    session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    assert runner.claim_run(session.pk, session.run_id)
    # the same run asked of another worker while the lease is live: not claimed
    Session.objects.filter(pk=session.pk).update(run_owner="another-worker")
    assert not runner.claim_run(session.pk, session.run_id)


@pytest.mark.django_db(transaction=True)
def test_a_run_that_ends_consumes_every_control_posted_to_it(agent_registry: MockLlmServer) -> None:
    session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    assert runner.claim_run(session.pk, session.run_id)
    mail_send(session_id=session.pk, body=mailbox.STOP_RUN, sender={"tag": "user", "owner": None})
    runner._finish(session.pk, "until_blocked", runner.RunEnd.FAILED, "provider down", agent=None)
    stored = Session.objects.get(pk=session.pk)
    assert (stored.status, stored.status_detail) == ("failed", "provider down")
    assert mailbox.unread(stored, stored.document) == []


@pytest.mark.django_db(transaction=True)
def test_recovery_consumes_the_controls_a_dead_run_never_read(agent_registry: MockLlmServer) -> None:
    stopped = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    paused = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    Session.objects.filter(pk__in=[stopped.pk, paused.pk]).update(run_owner="a-dead-worker")
    mail_send(session_id=stopped.pk, body=mailbox.STOP_RUN, sender={"tag": "user", "owner": None})
    mail_send(session_id=paused.pk, body=mailbox.PAUSE, sender={"tag": "user", "owner": None})
    recovered, _ = recover_stale_runs(all_claimed=True)
    assert set(recovered) == {str(stopped.pk), str(paused.pk)}
    for session, status in ((stopped, "ready"), (paused, "paused")):
        stored = Session.objects.get(pk=session.pk)
        assert stored.status == status
        assert mailbox.unread(stored, stored.document) == []
    # the next run of the stopped one is not stopped by the old control
    again = sessions.session_resume(session_id=stopped.pk, mode="until_blocked")
    runner.run_session(str(again.pk), str(again.run_id))
    assert Session.objects.get(pk=stopped.pk).status == "idle"
