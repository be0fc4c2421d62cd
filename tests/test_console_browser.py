"""The operators' console in a real browser (issue 19's acceptance; docs/guide-console.md §1).

Headless Debian chromium, driven by Playwright, against a real ``agents serve`` with
authentication on: an operator builds an agent from form fields and a file row, checks it and
runs it over the API; a refused save keeps the input and stores nothing; two saves make two
versions, whose diff and restore work; a support operator answers deferred calls of several
sessions from one queue without being able to edit agents; a session's page starts with its
conversation. The tests fail, never skip, when chromium is missing (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from devtools.mockllm import MockLlmServer
from tests.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    create_staff,
    create_superuser,
    fill_agent,
    fill_file,
    log_in,
    require_chromium,
)
from tests.harness import Server, write_agent
from tests.owners import owner, write_tokens
from tests.test_stored_agents import shout_tool

SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "has_tool": "bash_shout"},
            "reply": {"tool_calls": [{"name": "bash_shout", "arguments": {"text": "hello there"}}]},
        },
        {
            "when": {"last_role": "user"},
            "reply": {"tool_calls": [{"name": "ask_human", "arguments": {"question": "which colour?"}}]},
        },
        {"when": {"last_role": "tool", "has_tool": "bash_shout"}, "reply": {"content": "the tool said {last_content}"}},
        {"when": {"last_role": "tool"}, "reply": {"content": "The human chose {last_content}."}},
    ]
}


@pytest.fixture
def console(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> Iterator[tuple[Server, MockLlmServer, Page]]:
    """A server with an asking file agent and a keys file, a superuser ``operator``, and a browser
    page logged in as that operator."""
    require_chromium()
    llm = llm_server(SCRIPT)
    asker = write_agent(
        tmp_path,
        "asker",
        llm.url,
        toolCallPolicyConfig={"default": {"tag": "defer", "reason": "a human answers"}, "rules": []},
    )
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"test": "sk-test", "mistral": "sk-mistral"}))
    flags = ["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root", "--api-keys", str(keys)]
    server = start_server([asker], extra_args=flags)
    create_superuser(server)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(30_000)
        yield server, llm, page
        browser.close()


def _rows(db: str, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(f"SELECT * FROM {table}").fetchall()


def _shout(server: Server, agent: str, who: str = "alice") -> str:
    """Run a session of ``agent`` over the API; the tool output the model repeated."""
    answer = server.client.post(
        "/v1/sessions?wait=true", headers=owner(who), content=json.dumps({"agent": agent, "prompt": "shout hello"})
    )
    assert answer.status_code == 201, answer.text
    view = answer.json()
    assert view["status"] == "idle", view
    return view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]


def _new_shouter(page: Page, server: Server, llm: MockLlmServer, marker: str = "v1") -> None:
    """Fill the add page: the common fields, a tool directory and one bash tool file."""
    page.goto(f"{server.url}/admin/agents_app/storedagent/add/")
    fill_agent(page, slug="shouter", model_url=llm.url, announce="shouts", prompt="You shout.\nLoudly.", api_key="test")
    page.fill("#id_toolDirectory", "tools")
    fill_file(page, 0, "tools/shout", shout_tool(marker))


def test_an_operator_builds_checks_saves_and_runs_an_agent_from_form_fields(
    console: tuple[Server, MockLlmServer, Page],
) -> None:
    server, llm, page = console
    log_in(page, server)
    page.goto(f"{server.url}/admin/agents_app/storedagent/add/")
    # the key ids the server knows are the choices
    options = page.locator("#id_apiKeyId option").all_inner_texts()
    assert options[:2] == ["mistral", "test"], options
    _new_shouter(page, server, llm)

    page.click("#check-agent")
    report = page.locator("#check-report")
    # checking runs nothing: the tool is described when the agent is loaded
    expect(report).to_contain_text("shouter: shouts (0 tools known before loading)")
    expect(report).to_contain_text("shouter: toolDirectory 'tools': built when the agent is loaded")
    assert _rows(server.db, "agents_app_storedagent") == []
    # the check kept every input, so the operator saves the same page
    expect(page.locator("#id_toolDirectory")).to_have_value("tools")
    expect(page.locator("#id_files-0-path")).to_have_value("tools/shout")

    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    descriptor = server.client.get("/v1/agents/shouter", headers=owner("alice")).json()
    assert descriptor["tools"] == ["bash_shout"] and descriptor["version"] == 1
    assert descriptor["prompt"] == "You shout.\nLoudly."
    assert descriptor["config"]["apiKeyId"] == "test" and descriptor["updated_by"] == "admin:operator"
    assert _shout(server, "shouter") == "the tool said v1:HELLO THERE"

    # the list reads at a glance: model, tools, sessions, last use, who stored it
    page.goto(f"{server.url}/admin/agents_app/storedagent/")
    row = page.locator("#result_list tbody tr", has_text="shouter")
    expect(row.locator("td.field-llm")).to_have_text(f"scripted at {llm.url}")
    expect(row.locator("td.field-tools_count")).to_have_text("1")
    expect(row.locator("td.field-session_count")).to_have_text("1")
    expect(row.locator("td.field-updated_by")).to_have_text("admin:operator")


def test_a_refused_save_shows_the_loaders_message_at_the_field_keeps_the_input_and_stores_nothing(
    console: tuple[Server, MockLlmServer, Page],
) -> None:
    server, llm, page = console
    log_in(page, server)
    page.goto(f"{server.url}/admin/agents_app/storedagent/add/")
    fill_agent(page, slug="broken", model_url=llm.url, announce="breaks", prompt="No tools here.", api_key="test")
    page.fill("#id_toolDirectory", "tools")
    fill_file(page, 0, "lib/notes", "not a tool")
    page.click("input[name=_save]")

    at_field = page.locator(".field-toolDirectory .errorlist")
    expect(at_field).to_contain_text("agent_failed_to_load: toolDirectory 'tools' is not a directory of the files")
    expect(page.locator("#id_toolDirectory")).to_have_value("tools")
    expect(page.locator("#id_announce")).to_have_value("breaks")
    expect(page.locator("#id_systemPrompt")).to_have_value("No tools here.")
    expect(page.locator("#id_files-0-path")).to_have_value("lib/notes")
    expect(page.locator("#id_files-0-content")).to_have_value("not a tool")
    assert _rows(server.db, "agents_app_storedagent") == []
    assert _rows(server.db, "agents_app_storedagentversion") == []
    assert server.client.get("/v1/agents/broken", headers=owner("alice")).status_code == 404


def test_two_saves_make_two_versions_and_restoring_the_first_is_what_new_sessions_use(
    console: tuple[Server, MockLlmServer, Page],
) -> None:
    server, llm, page = console
    log_in(page, server)
    _new_shouter(page, server, llm, "v1")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")

    page.goto(f"{server.url}/admin/agents_app/storedagent/shouter/change/")
    page.fill("#id_announce", "shouts louder")
    page.fill("#id_files-0-content", shout_tool("v2"))
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    assert _shout(server, "shouter") == "the tool said v2:HELLO THERE"

    page.click("#agent-versions")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("announce, files/tools/shout")
    rows.nth(0).locator("th a").click()
    diff = page.locator("#version-diff")
    expect(diff).to_contain_text("Changes since version 1")
    expect(diff.locator(".diff-del", has_text="printf 'v1:'")).to_have_count(1)
    expect(diff.locator(".diff-add", has_text="printf 'v2:'")).to_have_count(1)
    expect(diff.locator(".diff-add", has_text='"announce": "shouts louder"')).to_have_count(1)

    page.go_back()
    page.locator("#result_list tbody tr").nth(1).locator("th a").click()
    page.click("#restore-version input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("Restored version 1 of shouter as version 3.")
    descriptor = server.client.get("/v1/agents/shouter", headers=owner("alice")).json()
    assert descriptor["version"] == 3 and descriptor["description"] == "shouts"
    assert _shout(server, "shouter", "bob") == "the tool said v1:HELLO THERE"
    versions = _rows(server.db, "agents_app_storedagentversion")
    assert sorted((row[2], row[6]) for row in versions) == [(1, None), (2, None), (3, 1)]


def test_choosing_no_key_stores_an_id_no_keys_file_holds_and_sends_no_key(
    console: tuple[Server, MockLlmServer, Page],
) -> None:
    server, llm, page = console
    log_in(page, server)
    _new_shouter(page, server, llm)
    no_key = page.locator("#id_apiKeyId option", has_text="no key is sent")
    expect(no_key).to_have_text("no key is sent (stored as <slug>-key)")
    page.select_option("#id_apiKeyId", "")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")
    # the editor shows the choice it stored, under the id it stores
    expect(page.locator("#id_apiKeyId option:checked")).to_have_text("no key is sent (stored as shouter-key)")
    descriptor = server.client.get("/v1/agents/shouter", headers=owner("alice")).json()
    assert descriptor["config"]["apiKeyId"] == "shouter-key"
    llm.reset()
    assert _shout(server, "shouter") == "the tool said v1:HELLO THERE"
    assert llm.request_headers and all("authorization" not in headers for headers in llm.request_headers)

    # a key, then no key again: the version diff names the two ids, never a key called "none"
    page.select_option("#id_apiKeyId", "test")
    page.click("input[name=_continue]")
    page.select_option("#id_apiKeyId", "")
    page.click("input[name=_continue]")
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    page.click("#agent-versions")
    page.locator("#result_list tbody tr").nth(0).locator("th a").click()
    diff = page.locator("#version-diff")
    expect(diff.locator(".diff-del", has_text='"apiKeyId": "test"')).to_have_count(1)
    expect(diff.locator(".diff-add", has_text='"apiKeyId": "shouter-key"')).to_have_count(1)
    expect(diff).not_to_contain_text('"none"')


def _ask(server: Server, who: str) -> str:
    created = server.client.post(
        "/v1/sessions?wait=true", headers=owner(who), content=json.dumps({"agent": "asker", "prompt": "Pick a colour"})
    ).json()
    assert created["status"] == "waiting_external", created
    return created["session_id"]


def test_a_support_operator_answers_calls_of_several_sessions_from_one_queue_and_cannot_edit_agents(
    console: tuple[Server, MockLlmServer, Page],
) -> None:
    server, _, page = console
    sessions = {who: _ask(server, who) for who in ("alice", "bob", "root")}
    answer_only = ["sessions_app.view_session", "sessions_app.answer_continuation"]
    create_staff(server, "support", answer_only)
    create_staff(server, "viewer", ["sessions_app.view_continuation"])

    log_in(page, server, "support")
    page.goto(f"{server.url}/admin/sessions_app/continuation/")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(3)
    for who in sessions:
        expect(rows.filter(has_text=who)).to_have_count(1)
    expect(rows.filter(has_text="ask_human")).to_have_count(3)
    # a filter on each column: owner bob
    page.goto(f"{server.url}/admin/sessions_app/continuation/?session__owner=bob")
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row.locator("td.field-agent")).to_have_text("asker")
    row.locator("textarea[name=result]").fill("teal")
    row.locator("input[value=Answer]").click()
    expect(page.locator(".messagelist")).to_contain_text("Answered ask_human")

    done = server.client.get(f"/v1/sessions/{sessions['bob']}?wait=true", headers=owner("bob")).json()
    assert done["status"] == "idle", done
    assert done["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "The human chose teal."
    page.goto(f"{server.url}/admin/sessions_app/continuation/")
    expect(rows).to_have_count(2)
    page.goto(f"{server.url}/admin/sessions_app/continuation/?state=answered")
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.field-owner")).to_have_text("bob")
    for who in ("alice", "root"):
        still = server.client.get(f"/v1/sessions/{sessions[who]}", headers=owner(who)).json()
        assert still["status"] == "waiting_external"

    # answering does not let the support operator near the agents
    assert page.goto(f"{server.url}/admin/agents_app/storedagent/add/").status == 403
    assert page.goto(f"{server.url}/admin/agents_app/storedagent/").status == 403

    # an operator who may only read the queue sees it without answer forms
    page.context.clear_cookies()
    log_in(page, server, "viewer")
    page.goto(f"{server.url}/admin/sessions_app/continuation/")
    expect(rows).to_have_count(2)
    expect(page.locator("textarea[name=result]")).to_have_count(0)
    expect(page.locator("form.answer-call")).to_have_count(0)


def test_the_session_page_shows_the_conversation_before_the_metadata(
    console: tuple[Server, MockLlmServer, Page],
) -> None:
    server, _, page = console
    sid = _ask(server, "alice")
    log_in(page, server)
    page.goto(f"{server.url}/admin/sessions_app/session/{sid}/change/")
    conversation = page.locator(".field-conversation")
    expect(conversation).to_contain_text("Pick a colour")
    expect(page.locator(".field-pending_calls")).to_contain_text("ask_human")
    metadata = page.locator(".field-run_lease_until")
    expect(metadata).to_be_hidden()
    assert conversation.bounding_box()["y"] < page.locator("summary", has_text="Metadata").bounding_box()["y"]
    expect(page.locator("#follow-live")).to_have_attribute("href", f"/#session={sid}")
    page.locator("summary", has_text="Metadata").click()
    expect(metadata).to_be_visible()
    expect(page.locator(".field-owner")).to_contain_text("alice")

    page.click("#session-events")
    expect(page.locator("#result_list tbody tr").first).to_contain_text(sid)
    expect(page.locator("#result_list")).to_contain_text("calls.deferred")
