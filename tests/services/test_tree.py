"""Fork and delete in process: what a fork keeps and drops, and which trees a delete removes."""

from __future__ import annotations

import pytest

from foundation.errors import RunInProgress, UnknownTurn
from sessions_app.models import Continuation, Event, Session, Turn
from sessions_app.services import sessions
from sessions_app.services.tree import session_delete, session_fork
from tests.factories import LlmTurnFactory, SessionFactory, UserTurnFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db


def test_a_fork_at_a_turn_keeps_it_and_the_older_ones_and_starts_no_run(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    turns = [LlmTurnFactory(text="two"), UserTurnFactory(query="second"), LlmTurnFactory(text="one"), UserTurnFactory()]
    source = SessionFactory(turns=turns, owner="alice")
    with django_capture_on_commit_callbacks(execute=True):
        fork = session_fork(session_id=source.pk, at_turn=2, agent_slug=None)
    stored = Session.objects.get(pk=fork.pk)
    assert stored.document["turns"] == turns[2:]
    assert stored.document["forkedFromSessionId"] == str(source.pk) and stored.forked_from == source.pk
    assert stored.owner == "alice" and stored.status == Session.Status.IDLE
    assert Session.objects.get(pk=source.pk).version == source.version, "the source is not touched"
    assert worker.sent == []


def test_a_fork_of_a_waiting_session_closes_its_deferred_calls_and_copies_no_continuation() -> None:
    source = SessionFactory(deferred=1)
    fork = session_fork(session_id=source.pk, at_turn=None, agent_slug=None)
    head = Session.objects.get(pk=fork.pk).document["turns"][0]
    assert head["tag"] == "UserTurn"
    [(_, response)] = head["contents"]["userToolResponses"]
    assert "cancelled" in response
    assert not Continuation.objects.filter(session_id=fork.pk).exists()
    assert Continuation.objects.filter(session=source).count() == 1
    assert Session.objects.get(pk=source.pk).status == Session.Status.WAITING_EXTERNAL


def test_a_fork_past_the_last_turn_is_refused_and_stores_nothing() -> None:
    source = SessionFactory()
    with pytest.raises(UnknownTurn) as raised:
        session_fork(session_id=source.pk, at_turn=1, agent_slug=None)
    assert raised.value.code == "unknown_turn"
    assert Session.objects.count() == 1


def test_delete_removes_the_tree_deepest_first_with_an_event_each() -> None:
    root = SessionFactory()
    child = SessionFactory(parent=root)
    grandchild = SessionFactory(parent=child, deferred=1)
    other = SessionFactory()
    plan = session_delete(session_id=root.pk, dry_run=False)
    assert plan == {
        "sessions": [str(grandchild.pk), str(child.pk), str(root.pk)],
        "continuations": 1,
        "dry_run": False,
    }
    assert list(Session.objects.values_list("pk", flat=True)) == [other.pk]
    assert not Turn.objects.exclude(session=other).exists() and not Continuation.objects.exists()
    deleted = Event.objects.filter(kind="session.deleted").order_by("seq").values_list("session_id", flat=True)
    assert list(deleted) == [grandchild.pk, child.pk, root.pk]


def test_a_dry_run_answers_the_plan_and_deletes_nothing() -> None:
    root = SessionFactory()
    SessionFactory(parent=root)
    plan = session_delete(session_id=root.pk, dry_run=True)
    assert plan["dry_run"] is True and len(plan["sessions"]) == 2
    assert Session.objects.count() == 2 and not Event.objects.filter(kind="session.deleted").exists()


def test_delete_is_refused_while_a_run_is_active_in_the_tree() -> None:
    root = SessionFactory()
    running = sessions.session_create(
        agent_slug="single", prompt="busy", media=None, run="until_blocked", parent_id=root.pk
    )
    with pytest.raises(RunInProgress) as raised:
        session_delete(session_id=root.pk, dry_run=False)
    assert raised.value.status == 409 and str(running.pk) in raised.value.message
    assert Session.objects.count() == 2
