"""The console as operators use it every day (issue 31, points 8 and 11 and the console bullet;
docs/guide-console.md §1), in headless Debian chromium driven by Playwright against a real
``agents serve``: the queue of 50 waiting calls at 1280 px shows each call's tool, arguments, age
and answer box in one page, and axe-core finds no serious or critical violation on the queue and
session pages. Screenshots are kept in ``test-artifacts/`` (tests/browser.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from devtools.mockllm import MockLlmServer
from tests.browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    axe_violations,
    create_superuser,
    keep_screenshot,
    log_in,
    require_chromium,
)
from tests.harness import Server, write_agent

expect.set_options(timeout=30_000)

CALLS = 50


def _fifty_questions() -> dict[str, object]:
    calls = [
        {"name": "ask_human", "arguments": {"question": f"question {n}: " + "which shade of blue for the kettle? " * 4}}
        for n in range(CALLS)
    ]
    return {"rules": [{"when": {"last_role": "user"}, "reply": {"tool_calls": calls}}, {"reply": {"content": "ok"}}]}


def test_the_queue_of_fifty_calls_fits_1280_px_and_the_pages_pass_axe(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    require_chromium()
    llm = llm_server(_fifty_questions())
    policy = {"default": {"tag": "defer", "reason": "a human answers"}, "rules": []}
    server = start_server([write_agent(tmp_path, "asker", llm.url, toolCallPolicyConfig=policy)])
    created = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "asker", "prompt": "ask"}))
    view = created.json()
    assert view["status"] == "waiting_external" and len(view["pending"]) == CALLS, created.text
    create_superuser(server)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        log_in(page, server)
        page.goto(f"{server.url}/admin/sessions_app/continuation/")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(CALLS)
        expect(page.locator(".paginator")).not_to_contain_text("Next")
        first = rows.first
        expect(first.locator("td.field-tool_name, th.field-tool_name")).to_have_text("ask_human")
        cut = re.compile(r'^\{"question": "question \d+: which shade .*…$')
        expect(first.locator(".call-arguments")).to_have_text(cut)
        expect(first.locator("td.field-age")).not_to_be_empty()
        # every row's answer box and button are on the screen, inside the table
        table = page.locator("#result_list").bounding_box()
        assert table is not None
        for index in (0, CALLS - 1):
            row = rows.nth(index)
            for control in (row.locator("textarea[name=result]"), row.locator("input[type=submit]")):
                control.scroll_into_view_if_needed()
                box = control.bounding_box()
                assert box is not None and box["x"] >= 0, box
                assert box["x"] + box["width"] <= min(1280, table["x"] + table["width"]) + 1, (box, table)
        width = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert width <= 0, f"the queue scrolls sideways by {width}px"
        # the agent filter counts the waiting calls
        expect(page.locator("#changelist-filter")).to_contain_text(f"asker ({CALLS})")
        keep_screenshot(page, "console-queue-1280")
        violations = axe_violations(page)
        assert not violations, json.dumps(violations, indent=2)

        # the queue's answer box by keyboard: type, Tab past the kind, Enter on Answer
        rows.first.locator("textarea[name=result]").focus()
        page.keyboard.type("navy")
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        expect(page.locator(".messagelist")).to_contain_text("Answered ask_human")
        expect(rows).to_have_count(CALLS - 1)

        page.goto(f"{server.url}/admin/sessions_app/session/{view['session_id']}/change/")
        expect(page.locator("#session-waiting-calls")).to_have_text(f"deferred calls waiting ({CALLS - 1})")
        keep_screenshot(page, "console-session")
        violations = axe_violations(page)
        assert not violations, json.dumps(violations, indent=2)
        page.click("#session-waiting-calls")
        expect(rows).to_have_count(CALLS - 1)
        browser.close()


def test_the_agent_editors_file_rows_stay_inside_their_panel(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    require_chromium()
    llm = llm_server({"rules": [{"reply": {"content": "ok"}}]})
    server = start_server([write_agent(tmp_path, "asker", llm.url)])
    create_superuser(server)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(30_000)
        log_in(page, server)
        page.goto(f"{server.url}/admin/agents_app/storedagent/add/")
        page.click("#add-file-row")
        panel = page.locator("#agent-files").bounding_box()
        assert panel is not None
        right = panel["x"] + panel["width"]
        for field in ("#id_files-0-path", "#id_files-0-content", "#id_files-1-path", "#id_files-1-content"):
            box = page.locator(field).bounding_box()
            assert box is not None, field
            assert box["x"] >= panel["x"] and box["x"] + box["width"] <= right + 1, (field, box, panel)
        keep_screenshot(page, "console-agent-files")
        browser.close()
