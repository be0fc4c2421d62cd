"""Listing agents costs the same queries for 1 agent as for 30 (docs/api.md §12): the API's
``GET /v1/agents`` and the console's agent list read the stored agents once per request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from agents_app import services
from agents_app.registry import AgentRegistry, set_registry
from agents_app.runtime import reset_runtime_agents
from tests.test_console_forms import _body


@pytest.fixture
def registry() -> Iterator[None]:
    set_registry(AgentRegistry({}, {"k": "secret-k"}))
    reset_runtime_agents()
    yield
    set_registry(None)
    reset_runtime_agents()


def _store(first: int, last: int) -> None:
    """Stored agents ``agent-<first>`` to ``agent-<last - 1>``; every other one has the first as a helper."""
    for index in range(first, last):
        helpers = {"extraAgents": [{"slug": "agent-0"}]} if index % 2 else {}
        services.stored_agent_put(f"agent-{index}", _body(**helpers), "root")


def _queries(get: Client | APIClient, url: str, agents: int) -> int:
    with CaptureQueriesContext(connection) as captured:
        answer = get.get(url)
    assert answer.status_code == 200, answer.content
    if url.startswith("/v1/"):
        assert len(answer.json()) == agents
    else:
        assert answer.content.count(b'class="field-tools_count"') == agents
    return len(captured.captured_queries)


@pytest.mark.django_db
def test_the_api_agent_list_makes_as_many_queries_for_30_agents_as_for_one(registry: None) -> None:
    client = APIClient()
    _store(0, 1)
    one = _queries(client, "/v1/agents", 1)
    _store(1, 30)
    assert _queries(client, "/v1/agents", 30) == one
    # nothing changed since: the list still looks at the database once
    assert _queries(client, "/v1/agents", 30) <= one


@pytest.mark.django_db
def test_the_console_agent_list_makes_as_many_queries_for_30_agents_as_for_one(registry: None) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    url = "/admin/agents_app/storedagent/"
    _store(0, 1)
    one = _queries(client, url, 1)
    _store(1, 30)
    assert _queries(client, url, 30) == one
