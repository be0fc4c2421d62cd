"""The console's refusals in one process (docs/guide-console.md §1): who may answer, restore, check and
edit; bad answers and answers to answered calls are refused with a message and change nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from agentfiles.loader import load_agent_files
from agents_app import services
from agents_app.models import StoredAgent, StoredAgentVersion
from agents_app.registry import AgentRegistry, set_registry
from agents_app.runtime import reset_runtime_agents
from devtools.mockllm import MockLlmServer
from sessions_app import runner
from sessions_app.models import Continuation, Session, SessionWatch
from sessions_app.services import sessions
from tests.harness import write_agent
from tests.test_console_forms import _body, _post

QUEUE = "/admin/sessions_app/continuation/"


@pytest.fixture
def asker(tmp_path: Path, llm_server: Callable[..., MockLlmServer]) -> Iterator[MockLlmServer]:
    """A file agent whose every call is deferred, and a model that asks a human."""
    llm = llm_server(
        {"rules": [{"reply": {"tool_calls": [{"name": "ask_human", "arguments": {"question": "which?"}}]}}]}
    )
    policy = {"default": {"tag": "defer", "reason": "a human answers"}, "rules": []}
    files = [write_agent(tmp_path, "asker", llm.url, toolCallPolicyConfig=policy)]
    set_registry(AgentRegistry(load_agent_files(files), {"k": "secret"}))
    reset_runtime_agents()
    yield llm
    set_registry(None)
    reset_runtime_agents()


def _waiting() -> Continuation:
    """A session of ``asker`` stopped on its deferred call; the call's row."""
    session = sessions.session_create(agent_slug="asker", prompt="pick", media=None, run="until_blocked")
    runner.run_session(str(session.pk), str(session.run_id))
    assert Session.objects.get(pk=session.pk).status == "waiting_external"
    return Continuation.objects.get(session=session)


def _client(*permissions: str, superuser: bool = False) -> Client:
    name = "root" if superuser else "-".join(p.split(".")[1] for p in permissions) or "nobody"
    if superuser:
        user = User.objects.create_superuser(name, f"{name}@example.com", "pw")
    else:
        user = User.objects.create_user(name, password="pw", is_staff=True)
    for permission in permissions:
        app, codename = permission.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    client = Client()
    client.force_login(user)
    return client


def _messages(response: Any) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.mark.django_db(transaction=True)
def test_the_call_of_a_session_gets_its_tool_name(asker: MockLlmServer) -> None:
    call = _waiting()
    assert call.tool == "ask_human"


@pytest.mark.django_db(transaction=True)
def test_only_the_answer_permission_answers(asker: MockLlmServer) -> None:
    call = _waiting()
    url = f"{QUEUE}{call.pk}/answer/"
    viewer = _client("sessions_app.view_continuation")
    assert viewer.post(url, {"result": "teal", "kind": "text"}).status_code == 403
    assert viewer.get(QUEUE).status_code == 200
    nobody = _client()
    assert nobody.get(QUEUE).status_code == 403
    assert Continuation.objects.get(pk=call.pk).completed_at is None

    support = _client("sessions_app.answer_continuation")
    assert support.get(url).status_code == 405
    answered = support.post(url, {"result": "teal", "kind": "text", "next": QUEUE})
    assert answered.status_code == 302 and answered["Location"] == QUEUE
    assert _messages(answered) == ["Answered ask_human; the session is running."]
    stored = Continuation.objects.get(pk=call.pk)
    assert stored.result == "teal" and stored.completed_at is not None
    assert Session.objects.get(pk=call.session_id).status == "running"


@pytest.mark.django_db(transaction=True)
def test_bad_and_repeated_answers_are_refused_and_change_nothing(asker: MockLlmServer) -> None:
    call = _waiting()
    support = _client("sessions_app.answer_continuation")
    url = f"{QUEUE}{call.pk}/answer/"
    bad = support.post(url, {"result": "{not json", "kind": "json"})
    assert bad.status_code == 302 and bad["Location"] == QUEUE
    assert _messages(bad)[0].startswith("The result is not valid JSON")
    assert Continuation.objects.get(pk=call.pk).completed_at is None
    # an offsite "next" is not followed
    first = support.post(url, {"result": '{"colour": "teal"}', "kind": "json", "next": "https://elsewhere.example/"})
    assert first["Location"] == QUEUE
    assert Continuation.objects.get(pk=call.pk).result == {"type": "json", "content": {"colour": "teal"}}
    again = support.post(url, {"result": "red", "kind": "text"})
    assert _messages(again)[-1] == f"token_already_completed: continuation {call.pk} was already completed"
    assert Continuation.objects.get(pk=call.pk).result == {"type": "json", "content": {"colour": "teal"}}
    missing = support.post(f"{QUEUE}00000000-0000-0000-0000-000000000000/answer/", {"result": "x", "kind": "text"})
    assert missing.status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_queue_filters_on_state_agent_tool_owner_and_age(asker: MockLlmServer) -> None:
    waiting, answered = _waiting(), _waiting()
    support = _client("sessions_app.answer_continuation")
    support.post(f"{QUEUE}{answered.pk}/answer/", {"result": "teal", "kind": "text"})

    def listed(query: str) -> set[str]:
        page = support.get(QUEUE + query)
        assert page.status_code == 200
        return {str(c.pk) for c in page.context["cl"].result_list}

    assert listed("") == {str(waiting.pk)}
    assert listed("?state=answered") == {str(answered.pk)}
    assert listed("?state=all") == {str(waiting.pk), str(answered.pk)}
    assert listed("?state=all&tool=ask_human&session__agent_slug=asker&age=hour") == {str(waiting.pk), str(answered.pk)}
    assert listed("?age=older") == set()
    assert listed(f"?q={waiting.session_id}") == {str(waiting.pk)}


@pytest.mark.django_db
def test_restoring_needs_the_change_permission_and_a_kept_version(asker: MockLlmServer) -> None:
    services.stored_agent_put("a", _body(), "root")
    services.stored_agent_put("a", _body(announce="two"), "root")
    first = StoredAgentVersion.objects.get(slug="a", version=1)
    reader = _client("agents_app.view_storedagent")
    page = reader.get(f"/admin/agents_app/storedagentversion/{first.pk}/change/")
    assert page.status_code == 200 and b"restore-version" not in page.content
    assert reader.post(f"/admin/agents_app/storedagentversion/{first.pk}/restore/").status_code == 403
    editor = _client("agents_app.view_storedagent", "agents_app.change_storedagent")
    assert editor.post("/admin/agents_app/storedagentversion/999999/restore/").status_code == 404
    assert StoredAgent.objects.get(pk="a").version == 2
    restored = editor.post(f"/admin/agents_app/storedagentversion/{first.pk}/restore/")
    assert restored.status_code == 302 and restored["Location"] == "/admin/agents_app/storedagent/a/change/"
    assert StoredAgent.objects.get(pk="a").contents["announce"] == "a stored agent"


@pytest.mark.django_db
def test_a_refused_restore_says_why_and_stores_nothing(asker: MockLlmServer) -> None:
    services.stored_agent_put("helper", _body(), "root")
    services.stored_agent_put("a", _body(extraAgents=[{"slug": "helper"}]), "root")
    services.stored_agent_put("a", _body(), "root")
    services.stored_agent_delete("helper")
    first = StoredAgentVersion.objects.get(slug="a", version=1)
    editor = _client(superuser=True)
    refused = editor.post(f"/admin/agents_app/storedagentversion/{first.pk}/restore/")
    assert refused["Location"] == f"/admin/agents_app/storedagentversion/{first.pk}/change/"
    assert _messages(refused) == ["unknown_helper: 'helper' is not a stored agent"]
    assert StoredAgent.objects.get(pk="a").version == 2 and StoredAgentVersion.objects.filter(slug="a").count() == 2


@pytest.mark.django_db
def test_checking_and_editing_agents_need_the_agent_permissions(asker: MockLlmServer) -> None:
    services.stored_agent_put("a", _body(), "root")
    support = _client("sessions_app.answer_continuation", "sessions_app.view_session")
    data = {key: value for key, value in _post({"_check": "Check"}).items()}
    assert support.post("/admin/agents_app/storedagent/add/", data).status_code == 403
    assert support.post("/admin/agents_app/storedagent/a/change/", data).status_code == 403
    assert support.get("/admin/agents_app/storedagent/a/change/").status_code == 403
    reader = _client("agents_app.view_storedagent")
    assert reader.post("/admin/agents_app/storedagent/a/change/", data).status_code == 403
    assert StoredAgent.objects.get(pk="a").version == 1
    checked = _client(superuser=True).post("/admin/agents_app/storedagent/a/change/", data)
    assert checked.status_code == 200
    assert checked.context["check_report"][0] == "a: knows the date (0 tools known before loading)"
    assert StoredAgent.objects.get(pk="a").version == 1


@pytest.mark.django_db(transaction=True)
def test_the_session_page_links_and_forms_follow_the_permissions(asker: MockLlmServer) -> None:
    call = _waiting()
    page_url = f"/admin/sessions_app/session/{call.session_id}/change/"
    reader = _client("sessions_app.view_session")
    page = reader.get(page_url)
    assert page.status_code == 200 and b"complete-call" not in page.content
    assert f'href="/#session={call.session_id}"'.encode() in page.content
    root = _client(superuser=True)
    for listing, rows in (
        (f"/admin/sessions_app/mailenvelope/?session__id__exact={call.session_id}", 0),
        (f"/admin/sessions_app/continuation/?session__id__exact={call.session_id}&amp;state=all", 1),
    ):
        assert f'href="{listing}"'.encode() in page.content
        listed = root.get(listing.replace("&amp;", "&"))
        assert listed.status_code == 200 and len(listed.context["cl"].result_list) == rows
    support = _client("sessions_app.view_session", "sessions_app.answer_continuation")
    assert b"complete-call" in support.get(page_url).content
    complete_url = f"/admin/sessions_app/session/{call.session_id}/complete/{call.pk}/"
    forbidden = reader.post(complete_url, {f"{call.pk}-result": "x", f"{call.pk}-kind": "text"})
    assert forbidden.status_code == 403
    assert Continuation.objects.get(pk=call.pk).completed_at is None


def _rows_waiting(count: int) -> None:
    """``count`` sessions with one waiting call each, written directly (the list reads no turn)."""
    now = timezone.now()
    for index in range(count):
        session = Session.objects.create(
            agent_slug="asker", owner=f"owner{index % 3}", status="waiting_external", created_at=now, updated_at=now,
            header_json="{}",
        )
        Continuation.objects.create(
            session=session, tool_call_id=f"c{index}", tool="ask_human", call={"function": {"name": "ask_human"}},
            disposition={"tag": "defer"}, created_at=now,
        )


@pytest.mark.django_db
def test_the_queue_page_costs_the_same_queries_whatever_its_rows(asker: MockLlmServer) -> None:
    support = _client("sessions_app.answer_continuation")
    _rows_waiting(3)
    with CaptureQueriesContext(connection) as few:
        assert support.get(QUEUE).status_code == 200
    _rows_waiting(30)
    with CaptureQueriesContext(connection) as many:
        page = support.get(QUEUE)
    assert len(page.context["cl"].result_list) == 33
    assert len(many.captured_queries) == len(few.captured_queries)


def _asking(count: int, arguments: str) -> None:
    """``count`` sessions with one waiting call each whose arguments are ``arguments``."""
    now = timezone.now()
    for index in range(count):
        session = Session.objects.create(
            agent_slug="asker" if index % 2 else "other", status="waiting_external", created_at=now,
            updated_at=now, header_json="{}",
        )
        call = {"function": {"name": "ask_human", "arguments": arguments}}
        Continuation.objects.create(
            session=session, tool_call_id=f"c{index}", tool="ask_human", call=call, disposition={"tag": "defer"},
            created_at=now - timedelta(minutes=index),
        )


@pytest.mark.django_db
def test_the_queue_shows_what_is_asked_sorts_by_age_and_counts_its_agents(asker: MockLlmServer) -> None:
    support = _client("sessions_app.answer_continuation")
    question = '{"question": "' + "which colour should the new kettle be, " * 8 + '"}'
    _asking(50, question)
    page = support.get(QUEUE)
    html = page.content.decode()
    rows = page.context["cl"].result_list
    assert len(rows) == 50 and not page.context["cl"].multi_page
    # each row says what is asked, cut short, with the whole of it in its title
    assert html.count('class="call-arguments"') == 50
    shown = question[: 120 - 1] + "…"
    assert f">{escape(shown)}</span>" in html and f'title="{escape(question)}"' in html
    # oldest first by default; the age column sorts either way
    ages = [row.created_at for row in rows]
    assert ages == sorted(ages)
    newest = support.get(QUEUE + "?o=-5").context["cl"].result_list
    assert [row.created_at for row in newest] == sorted(ages, reverse=True)
    # the agent filter says how many waiting calls each agent has
    assert "asker (25)" in html and "other (25)" in html


@pytest.mark.django_db(transaction=True)
def test_a_session_page_links_its_family_calls_and_watches_and_watches_have_a_page(asker: MockLlmServer) -> None:
    call = _waiting()
    parent = Session.objects.get(pk=call.session_id)
    now = timezone.now()
    child = Session.objects.create(
        agent_slug="asker", parent=parent, status="idle", created_at=now, updated_at=now, header_json="{}"
    )
    SessionWatch.objects.create(
        watcher=parent, watched=child, events=["run.stopped"], tool="watch_helper", created_at=now,
        expires_at=now + timedelta(hours=1),
    )
    root = _client(superuser=True)
    page = root.get(f"/admin/sessions_app/session/{parent.pk}/change/").content.decode()
    child_page = f"/admin/sessions_app/session/{child.pk}/change/"
    assert f'href="{child_page}"' in page and f'data-child="{child.pk}"' in page
    assert "deferred calls waiting (1)" in page
    watches = f"/admin/sessions_app/sessionwatch/?watcher__id__exact={parent.pk}"
    assert f'href="{watches}"' in page
    back = root.get(child_page).content.decode()
    assert f'href="/admin/sessions_app/session/{parent.pk}/change/"' in back and f"/#session={parent.pk}" in back
    children = root.get(f"/admin/sessions_app/session/?parent__id__exact={parent.pk}")
    assert [row.pk for row in children.context["cl"].result_list] == [child.pk]

    listed = root.get(watches)
    assert listed.status_code == 200 and len(listed.context["cl"].result_list) == 1
    html = listed.content.decode()
    assert "run.stopped" in html and "watch_helper" in html and f'href="{child_page}"' in html
    watch = SessionWatch.objects.get()
    assert root.get(f"/admin/sessions_app/sessionwatch/{watch.pk}/change/").status_code == 200
    # a watch changes only through the mail tools: nothing to add or edit here
    assert root.get("/admin/sessions_app/sessionwatch/add/").status_code == 403
