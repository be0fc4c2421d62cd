"""The sessions routes' reading of their input (docs/api.md §7): the listing's query, the one
lookup of the session a route names, and the wait parameters, read before anything changes."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from sessions_app.models import MailEnvelope, Session
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def _error(answer) -> tuple[int, dict[str, str]]:
    return answer.status_code, answer.json()


def _bad(message: str) -> tuple[int, dict[str, str]]:
    return 400, {"error": "bad_request", "message": message}


STATUSES = "ready, running, waiting_external, idle, failed, paused"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=idle,asleep", f"unknown status 'asleep'; expected one of {STATUSES}"),
        ("status=asleep&limit=0", f"unknown status 'asleep'; expected one of {STATUSES}"),
        ("limit=ten", "limit must be an integer between 1 and 500"),
        ("limit=", "limit must be an integer between 1 and 500"),
        ("limit=501", "limit must be an integer between 1 and 500"),
        ("limit=0&before=yesterday", "limit must be an integer between 1 and 500"),
        ("before=yesterday", "before must be an RFC 3339 timestamp"),
        ("before=2026-01-02T03:04:05", "before must be an RFC 3339 timestamp with a time zone"),
    ],
)
def test_a_bad_listing_query_names_the_first_bad_field(query: str, message: str) -> None:
    assert _error(APIClient().get(f"/v1/sessions?{query}")) == _bad(message)


def test_an_unknown_parent_is_answered_before_a_bad_limit() -> None:
    missing = uuid.uuid4()
    answer = APIClient().get(f"/v1/sessions?parent={missing}&limit=0")
    assert _error(answer) == (404, {"error": "unknown_session", "message": f"no session {missing}"})
    answer = APIClient().get("/v1/sessions?parent=nope&limit=0")
    assert _error(answer) == (404, {"error": "unknown_session", "message": "no session nope"})


def test_empty_filters_are_absent_ones_and_the_filters_apply() -> None:
    ready = SessionFactory()
    parent = SessionFactory()
    child = SessionFactory(parent=parent)
    client = APIClient()
    listed = client.get("/v1/sessions?agent=&status=&parent=&before=").json()
    assert [s["session_id"] for s in listed["sessions"]] == [str(parent.pk), str(ready.pk)]
    assert client.get("/v1/sessions?status=%20ready%20,,idle").json()["sessions"][0]["status"] == "ready"
    assert client.get("/v1/sessions?status=paused").json()["sessions"] == []
    children = client.get(f"/v1/sessions?parent={parent.pk}&limit=1").json()
    assert [s["session_id"] for s in children["sessions"]] == [str(child.pk)]
    page = client.get("/v1/sessions?limit=1").json()
    assert [s["session_id"] for s in page["sessions"]] == [str(parent.pk)] and page["next_before"]
    older = client.get(f"/v1/sessions?limit=1&before={page['next_before']}").json()
    assert [s["session_id"] for s in older["sessions"]] == [str(ready.pk)]


@pytest.mark.parametrize(
    ("method", "route", "body"),
    [
        ("post", "messages", {"prompt": 3}),
        ("post", "resume", {"mode": "sideways"}),
        ("post", "fork", {"at_turn": "first"}),
        ("post", "mail", {"body": "not an object"}),
        ("put", "params", []),
        ("post", "pause", None),
        ("get", "pending", None),
        ("get", "mail", None),
        ("get", "export", None),
    ],
)
def test_a_route_of_an_unknown_session_answers_404_whatever_its_body(method: str, route: str, body) -> None:
    missing = uuid.uuid4()
    answer = getattr(APIClient(), method)(f"/v1/sessions/{missing}/{route}", body, format="json")
    assert _error(answer) == (404, {"error": "unknown_session", "message": f"no session {missing}"})


def test_a_bad_timeout_is_refused_before_the_message_is_stored() -> None:
    session = SessionFactory(status=Session.Status.RUNNING, run_id=uuid.uuid4(), run_mode="until_blocked")
    client = APIClient()
    for route, body in (("messages", {"prompt": "hello"}), ("pause", None)):
        answer = client.post(f"/v1/sessions/{session.pk}/{route}?wait=true&timeout=soon", body, format="json")
        assert _error(answer) == _bad("timeout must be a number of seconds, not 'soon'"), route
    assert not MailEnvelope.objects.filter(session=session).exists()
    assert Session.objects.get(pk=session.pk).version == session.version


def test_mail_is_read_once_and_its_body_checked() -> None:
    session = SessionFactory(status=Session.Status.RUNNING, run_id=uuid.uuid4(), run_mode="until_blocked")
    client = APIClient()
    refused = client.post(f"/v1/sessions/{session.pk}/mail", {"body": {"tag": "nonsense"}}, format="json")
    assert refused.status_code == 400 and refused.json()["error"] == "bad_request"
    taken = client.post(
        f"/v1/sessions/{session.pk}/mail", {"body": {"tag": "userMessage", "query": "hi"}}, format="json"
    )
    assert taken.status_code == 202, taken.content
    assert taken.json()["seq"] == 1 and taken.json()["duplicate"] is False
    assert MailEnvelope.objects.get(session=session).body == {"tag": "userMessage", "query": "hi"}
