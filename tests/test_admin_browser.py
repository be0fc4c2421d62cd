"""An operator in a real browser (issue: owners and operators, acceptance 5; docs/decisions.md §17).

Headless Debian chromium, driven by Playwright, logs into the Django admin of a real ``agents
serve`` (authentication on: the admin needs no bearer token, it has its own login), stores an
agent whose first config is refused (the error is on the form, nothing is stored), fixes it, and
completes a pending call of a session from the session's admin page, which resumes the session.
The test fails, never skips, when chromium is missing (``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from devtools.mockllm import MockLlmServer
from tests.browser import CHROMIUM, CHROMIUM_ARGS, create_superuser, fill_agent, log_in, require_chromium
from tests.harness import Server, write_agent
from tests.owners import owner, write_tokens

# chromium through Playwright (the conftest marks browser tests integration too)
pytestmark = pytest.mark.browser

SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user"},
            "reply": {"tool_calls": [{"name": "ask_human", "arguments": {"question": "which colour?"}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "The human chose {last_content}."}},
    ]
}


def _stored_slugs(db: str) -> list[str]:
    with sqlite3.connect(db) as connection:
        return [row[0] for row in connection.execute("SELECT slug FROM agents_app_storedagent")]


def test_an_operator_stores_an_agent_and_completes_a_pending_call_in_the_admin(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    require_chromium()
    llm = llm_server(SCRIPT)
    plain = write_agent(tmp_path, "plain", llm.url)
    server = start_server([plain], extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"])
    create_superuser(server)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.set_default_timeout(30_000)
        log_in(page, server)

        # an invalid config: the form shows the refusal, nothing is stored
        page.goto(f"{server.url}/admin/agents_app/storedagent/add/")
        fill_agent(
            page, slug="asker", model_url=llm.url, announce="asks a human", prompt="Ask a human.", api_key=""
        )
        page.select_option("#id_policy_default", "defer")
        page.fill("#id_policy_reason", "a human answers")
        page.fill("#id_toolDirectory", "/usr/bin")
        page.click("input[name=_save]")
        expect(page.locator(".errornote, .errorlist").first).to_be_visible()
        expect(page.locator("body")).to_contain_text("agent_invalid_paths")
        expect(page.locator("body")).to_contain_text("'/usr/bin' is absolute")
        assert _stored_slugs(server.db) == []
        assert server.client.get("/v1/agents/asker", headers=owner("alice")).status_code == 404

        # fixed: stored, and the API serves it at once
        page.fill("#id_toolDirectory", "")
        page.click("input[name=_save]")
        expect(page.locator(".messagelist")).to_contain_text("was added successfully")
        assert _stored_slugs(server.db) == ["asker"]
        descriptor = server.client.get("/v1/agents/asker", headers=owner("alice")).json()
        assert descriptor["source"] == "database" and descriptor["updated_by"] == "admin:operator"

        # a session over the API stops on the deferred call
        created = server.client.post(
            "/v1/sessions?wait=true",
            headers=owner("alice"),
            content=json.dumps({"agent": "asker", "prompt": "Pick a colour for me"}),
        ).json()
        assert created["status"] == "waiting_external", created
        sid = created["session_id"]
        [pending] = created["pending"]

        # the operator reads it and answers the call from its page
        page.goto(f"{server.url}/admin/sessions_app/session/{sid}/change/")
        expect(page.locator("body")).to_contain_text("Pick a colour for me")
        expect(page.locator("body")).to_contain_text("ask_human")
        form = page.locator(f"form.complete-call[data-token='{pending['continuation_token']}']")
        form.locator("textarea[name$=-result]").fill("teal")
        form.locator("input[type=submit]").click()
        expect(page.locator(".messagelist")).to_contain_text("Completed ask_human")

        # the session resumed as it would have through the API
        done = server.client.get(f"/v1/sessions/{sid}?wait=true", headers=owner("alice")).json()
        assert done["status"] == "idle", done
        assert done["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "The human chose teal."
        page.reload()
        expect(page.locator("body")).to_contain_text("The human chose teal.")
        expect(page.locator("body")).not_to_contain_text("<br>")
        expect(page.locator("form.complete-call")).to_have_count(0)
        browser.close()
