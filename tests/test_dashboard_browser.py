"""The operators' dashboard (issue 27, acceptance 4; docs/console.md §2) in headless Debian
chromium driven by Playwright against a real ``agents serve``: after answered, failed and
deferring runs, its charts show the runs by outcome, the latencies, the token spend per agent
and owner, the queue and the failures; its figures equal what ``GET /v1/usage`` and the
session answers say; it refreshes itself after another run. The screenshot is kept in
``test-artifacts/dashboard.png`` (tests/browser.py)."""

from __future__ import annotations

import json
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

expect.set_options(timeout=45_000)

ANSWERED = 4


def _script() -> dict[str, object]:
    ask = [{"name": "ask_human", "arguments": {"question": f"question {n}"}} for n in range(2)]
    return {
        "rules": [
            {"when": {"last_contains": "crash"}, "reply": {"status": 400, "error": "scripted refusal"}},
            {"when": {"last_contains": "ask"}, "reply": {"tool_calls": ask, "usage": {"prompt_tokens": 300}}},
            {
                "when": {"last_role": "user"},
                "reply": {
                    "content": "ok",
                    "usage": {"prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 20},
                },
            },
        ]
    }


def _run(server: Server, agent: str, prompt: str) -> dict[str, object]:
    created = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": agent, "prompt": prompt}))
    assert created.status_code == 201, created.text
    view: dict[str, object] = created.json()
    return view


def test_the_dashboard_charts_the_fleet_with_the_apis_figures(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    require_chromium()
    llm = llm_server(_script())
    policy = {"default": {"tag": "defer", "reason": "a human answers"}, "rules": []}
    server = start_server(
        [
            write_agent(tmp_path, "alpha", llm.url),
            write_agent(tmp_path, "asker", llm.url, toolCallPolicyConfig=policy),
        ]
    )
    views = [_run(server, "alpha", f"hello {n}") for n in range(ANSWERED)]
    views.append(_run(server, "asker", "ask"))
    views.append(_run(server, "alpha", "crash now"))
    statuses = [view["status"] for view in views]
    assert statuses == ["idle"] * ANSWERED + ["waiting_external", "failed"], statuses
    model_turns = sum(
        1
        for view in views
        for turn in view["session"]["turns"]
        if turn["tag"] == "LlmTurn"  # type: ignore[index]
    )
    create_superuser(server)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(45_000)
        log_in(page, server)
        page.click("#dashboard-link a")
        expect(page.locator("h1")).to_have_text("Dashboard")
        since = page.locator("#dashboard-window").get_attribute("data-since")
        assert since, "the page says the start of its window"
        usage = server.client.get("/v1/usage", params={"since": since}).json()
        by_owner = server.client.get("/v1/usage", params={"since": since, "group_by": "owner"}).json()

        # token spend: the totals and one bar per agent and owner, as the API adds them up
        expect(page.locator("#tokens-input")).to_have_text(str(usage["totals"]["input_tokens"]))
        expect(page.locator("#tokens-output")).to_have_text(str(usage["totals"]["output_tokens"]))
        expect(page.locator("#tokens-cached")).to_have_text(str(usage["totals"]["cached_tokens"]))
        assert usage["totals"]["input_tokens"] == ANSWERED * 120 + 300
        bars = page.locator("#chart-agents rect.bar")
        shown = {
            bars.nth(i).get_attribute("data-label"): int(bars.nth(i).get_attribute("data-value") or -1)
            for i in range(bars.count())
        }
        assert shown == {row["key"]: row["total_tokens"] for row in usage["rows"]}, shown
        owner_bar = page.locator("#chart-owners rect.bar")
        expect(owner_bar).to_have_count(1)
        assert owner_bar.get_attribute("data-value") == str(by_owner["rows"][0]["total_tokens"])

        # runs by outcome, in the chart and its legend
        expect(page.locator('[data-outcome="idle"]')).to_have_text(str(ANSWERED))
        expect(page.locator('[data-outcome="waiting_external"]')).to_have_text("1")
        expect(page.locator('[data-outcome="failed"]')).to_have_text("1")
        segments = page.locator("#chart-runs rect.bar")
        values = [int(segments.nth(i).get_attribute("data-value") or 0) for i in range(segments.count())]
        assert sum(values) == ANSWERED + 2, values

        # latencies: one model call per stored answer, and the deferring tool round on top
        expect(page.locator("#latency-model td").first).to_have_text(str(model_turns))
        expect(page.locator("#latency-steps td").first).to_have_text(str(model_turns + 1))
        model_bars = page.locator("#chart-model rect.bar")
        assert sum(int(model_bars.nth(i).get_attribute("data-value") or 0) for i in range(model_bars.count())) == (
            model_turns
        )

        # the queue and the failures
        pending = sum(len(view["pending"]) for view in views)  # type: ignore[arg-type]
        assert pending == 2
        expect(page.locator("#queue-waiting")).to_have_text(str(pending))
        expect(page.locator('#chart-waiting rect.bar[data-label="ask_human"]')).to_have_attribute("data-value", "2")
        failure = page.locator("#failures tr.failure")
        expect(failure).to_have_count(1)
        expect(failure).to_contain_text("scripted refusal")

        keep_screenshot(page, "dashboard")
        violations = axe_violations(page)
        assert not violations, json.dumps(violations, indent=2)

        # another run shows up without reloading the page
        _run(server, "alpha", "hello again")
        after = server.client.get("/v1/usage", params={"since": since}).json()
        assert after["totals"]["input_tokens"] == usage["totals"]["input_tokens"] + 120
        expect(page.locator("#tokens-input")).to_have_text(str(after["totals"]["input_tokens"]))
        expect(page.locator('[data-outcome="idle"]')).to_have_text(str(ANSWERED + 1))

        # a session's page shows the totals its API answer gives
        view = server.client.get(f"/v1/sessions/{views[0]['session_id']}").json()
        page.goto(f"{server.url}/admin/sessions_app/session/{view['session_id']}/change/")
        expect(page.locator("#usage-input")).to_have_text(str(view["usage"]["inputTokens"]))
        expect(page.locator("#usage-output")).to_have_text(str(view["usage"]["outputTokens"]))
        expect(page.locator("#usage-cached")).to_have_text(str(view["usage"]["cachedTokens"]))
        expect(page.locator("#usage-total-bytes")).to_have_text(str(view["usage"]["totalBytes"]))

        # a window out of bounds is refused
        # without an operator's login, the admin's login page instead
        anonymous = server.client.get("/admin/dashboard/", follow_redirects=False)
        assert anonymous.status_code == 302 and anonymous.headers["location"].startswith("/admin/login/")
        for minutes in ("0", "1441", "²", "-5", "ten"):
            answer = page.request.get(f"{server.url}/admin/dashboard/?minutes={minutes}")
            assert answer.status == 400 and "minutes must be a whole number" in answer.text(), minutes
        browser.close()
