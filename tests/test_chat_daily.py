"""The chat page as a person uses it every day (issue 31; docs/guide-chat.md §1): each rough edge of
points 1-7 and a person's whole path, in headless Debian chromium driven by Playwright against a
real ``agents serve`` and the scripted model. Screenshots are kept in ``test-artifacts/``
(tests/browser.py); axe-core checks the page in the states a person sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Page, expect

from devtools.mockllm import MockLlmServer
from tests.browser import axe_violations, keep_screenshot
from tests.demo import demo_agents, demo_script
from tests.harness import Server, write_agent, write_tool
from tests.test_chat_browser import browser_page, send

expect.set_options(timeout=30_000)

ASK_HUMAN = {
    "slug": "ask_human",
    "description": "Asks a human a question and returns the answer.",
    "args": [
        {"name": "question", "description": "the question", "type": "string", "backing_type": "string",
         "arity": "single", "mode": "dashdashspace"}
    ],
}

#: The model of a person's path: four steps of a slow bash tool, a helper call, a question.
PATH_RULES = [
    {"when": {"any_contains": "You are helper.", "last_role": "user"}, "reply": {"content": "the kettle is fine"}},
    {"when": {"last_role": "user", "last_contains": "Something else"}, "reply": {"content": "Noted."}},
    {"when": {"last_role": "tool", "last_contains": "step 4 of 4"},
     "reply": {"tool_calls": [{"name": "io_prompt_agent_helper", "arguments": {"what": "check the kettle"}}]}},
    {"when": {"last_role": "tool", "last_contains": "the kettle is fine"},
     "reply": {"tool_calls": [{"name": "bash_ask_human", "arguments": {"question": "May I pour the tea?"}}]}},
    {"when": {"last_role": "tool"}, "reply": {"content": "All done. The human said: {last_content}"}},
    {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_steps", "arguments": {}}]}},
]


def _no_horizontal_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert width <= 0, f"the page scrolls sideways by {width}px"


def _focus_by_tab(page: Page, selector: str, key: str = "Tab", most: int = 40) -> None:
    """Press ``key`` until the element matching ``selector`` has the focus, as a keyboard user does."""
    for _ in range(most):
        if page.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
        page.keyboard.press(key)
    raise AssertionError(f"{key} never reached {selector}")


def test_a_persons_path_with_the_shell_helper_agent_by_keyboard(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server({"rules": PATH_RULES})
    gates = [tmp_path / f"gate-{n}" for n in range(1, 5)]
    body = "\n".join(f"echo 'step {n} of 4'; while [ ! -e {g} ]; do sleep 0.1; done" for n, g in enumerate(gates, 1))
    write_tool(tmp_path / "tools", "steps", {"slug": "steps", "description": "works in steps", "args": []}, body)
    write_tool(tmp_path / "tools", "ask_human", ASK_HUMAN, "exit 1")
    write_agent(tmp_path, "helper", llm.url)
    agent = write_agent(
        tmp_path, "shell-helper", llm.url, toolDirectory="tools",
        extraAgents=[{"slug": "helper", "path": "helper.json"}],
        toolCallPolicyConfig={
            "default": {"tag": "runSync"},
            "rules": [{"tool": "bash_ask_human", "disposition": {"tag": "defer", "reason": "a human"}}],
        },
    )
    server = start_server([agent])
    with browser_page(f"{server.url}/") as page:
        expect(page.locator("#connection")).to_have_text("live")
        assert not axe_violations(page)
        # start with the keyboard: Tab to the agent, Enter, type, Enter
        _focus_by_tab(page, "button[data-agent='shell-helper']")
        page.keyboard.press("Enter")
        expect(page.locator("#prompt")).to_be_focused()
        page.keyboard.type("Boil the kettle step by step")
        page.keyboard.press("Enter")

        # the bash tool's lines appear as it prints them (point 3)
        running = page.locator(".running-tool[data-call]")
        expect(running.locator(".tool-output")).to_have_text("step 1 of 4")
        gates[0].touch()
        expect(running.locator(".tool-output")).to_contain_text("step 2 of 4")
        expect(running).to_contain_text("2 lines of stdout")
        keep_screenshot(page, "chat-tool-output")
        for gate in gates[1:]:
            gate.touch()

        # the helper's session is a link away, and leads back (point 4)
        form = page.locator("form.pending-call")
        expect(form).to_contain_text("May I pour the tea?")
        sid = server.client.get("/v1/sessions").json()["sessions"][0]["session_id"]
        [child] = server.client.get(f"/v1/sessions?parent={sid}").json()["sessions"]
        link = page.locator(f"a.child-link[data-child='{child['session_id']}']")
        expect(link).to_contain_text("helper · check the kettle")
        link.focus()
        page.keyboard.press("Enter")
        expect(page.locator("#session-title")).to_contain_text(f"helper · {child['session_id'][:8]}")
        expect(page.locator(".turn.assistant").last).to_contain_text("the kettle is fine")
        assert page.evaluate("location.hash") == f"#session={child['session_id']}"
        keep_screenshot(page, "chat-helper-session")
        page.locator("a.parent-link").click()
        expect(page.locator("#session-title")).to_contain_text(f"shell-helper · {sid[:8]}")

        # the deferred call answered with the keyboard alone: Shift+Tab from the message box
        page.focus("#prompt")
        _focus_by_tab(page, "form.pending-call textarea[name=result]", key="Shift+Tab")
        page.keyboard.type("yes, pour")
        page.keyboard.press("Control+Enter")
        expect(page.locator(".turn.assistant").last).to_contain_text("All done. The human said: yes, pour")
        expect(page.locator("#session-status")).to_have_text("idle")

        # a second conversation, then the first found again by a word of it (point 6)
        page.click("button[data-agent='shell-helper']")
        send(page, "Something else entirely")
        expect(page.locator(".turn.assistant").last).to_contain_text("Noted.")
        expect(page.locator("button[data-session]")).to_have_count(2)
        expect(page.locator(f"button[data-session='{sid}'] .title")).to_have_text("Boil the kettle step by step")
        page.fill("#session-search", "KETTLE")
        expect(page.locator("button[data-session]")).to_have_count(1)
        expect(page.locator(f"button[data-session='{sid}']")).to_be_visible()
        page.fill("#session-search", "teacups")
        expect(page.locator("#sessions")).to_contain_text("no session says “teacups”")
        page.fill("#session-search", "kettle")
        # the search runs a moment after the last key: the row must be there before it is tabbed to
        expect(page.locator(f"button[data-session='{sid}']")).to_be_visible()
        _focus_by_tab(page, f"button[data-session='{sid}']")
        page.keyboard.press("Enter")
        expect(page.locator("#session-title")).to_contain_text(sid[:8])
        keep_screenshot(page, "chat-search")
        violations = axe_violations(page)
        assert not violations, json.dumps(violations, indent=2)


def test_the_calls_line_controls_by_state_markdown_and_no_404(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    rules = [{"when": {"last_contains": "build"},
              "reply": {"content": "Run **`cabal_build`** then *see [the `log`](http://example.com/log)*."}}]
    llm = llm_server({"rules": rules + demo_script()["rules"]})
    server = start_server(demo_agents(tmp_path, llm.url))
    with browser_page(f"{server.url}/") as page:
        failed: list[str] = []
        page.on("response", lambda response: response.status >= 400 and failed.append(response.url))
        page.on("console", lambda message: message.type == "error" and failed.append(message.text))
        page.reload()
        expect(page.locator("#connection")).to_have_text("live")

        # the calls line lists the tools apart (point 1)
        page.click("button[data-agent=shell-helper]")
        send(page, "Count these for me")
        expect(page.locator("form.pending-call")).to_have_count(1)
        expect(page.locator(".turn.assistant .calls")).to_have_text(
            "calls bash_word-count, bash_word-count, bash_ask_human"
        )
        # waiting on a person: Pause only; Resume would start an empty run, Cancel has no run (point 5)
        expect(page.locator("#btn-pause")).to_be_visible()
        expect(page.locator("#btn-resume")).to_be_hidden()
        expect(page.locator("#btn-cancel")).to_be_hidden()
        page.click("#btn-pause")
        expect(page.locator("#session-status")).to_have_text("paused")
        expect(page.locator("#btn-pause")).to_be_hidden()
        expect(page.locator("#btn-resume")).to_be_visible()
        expect(page.locator("#btn-cancel")).to_be_hidden()
        page.click("#btn-resume")
        expect(page.locator("#session-status")).to_have_text("waiting_external")
        shell = server.client.get("/v1/sessions").json()["sessions"][0]["session_id"]

        # an idle session offers none of them; inline markdown nests (point 7)
        page.click("button[data-agent=weather]")
        send(page, "build it")
        expect(page.locator("#session-status")).to_have_text("idle")
        for button in ("#btn-pause", "#btn-resume", "#btn-cancel"):
            expect(page.locator(button)).to_be_hidden()
        answer = page.locator(".turn.assistant .markdown").last
        expect(answer.locator("strong > code")).to_have_text("cabal_build")
        expect(answer.locator("em > a > code")).to_have_text("log")
        expect(answer).to_have_text("Run cabal_build then see the log.")
        weather = next(row["session_id"] for row in server.client.get("/v1/sessions").json()["sessions"]
                       if row["session_id"] != shell)

        # a link pasted into the same tab switches the session; back and forward walk them (point 2)
        page.goto(f"{server.url}/#session={shell}")
        expect(page.locator("#session-title")).to_contain_text(shell[:8])
        page.go_back()
        expect(page.locator("#session-title")).to_contain_text(weather[:8])
        page.go_forward()
        expect(page.locator("#session-title")).to_contain_text(shell[:8])
        page.locator(f"button[data-session='{weather}']").click()
        expect(page.locator("#session-title")).to_contain_text(weather[:8])
        page.go_back()
        expect(page.locator("#session-title")).to_contain_text(shell[:8])
        expect(page.locator("form.pending-call")).to_have_count(1)
        keep_screenshot(page, "chat-controls")
        # every load asked for nothing that is not there (the favicon included)
        assert failed == [], failed
        assert any(url.endswith("/static/chat/favicon.svg") for url in page.requested)  # type: ignore[attr-defined]


def test_on_a_phone_the_page_fits_and_answers_by_keyboard_with_no_serious_axe_violation(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    with browser_page(f"{server.url}/", width=390) as page:
        expect(page.locator("#connection")).to_have_text("live")
        _no_horizontal_scroll(page)
        assert not axe_violations(page)
        _focus_by_tab(page, "#menu-toggle")
        page.keyboard.press("Enter")
        _focus_by_tab(page, "button[data-agent=shell-helper]")
        page.keyboard.press("Enter")
        expect(page.locator("#prompt")).to_be_focused()
        page.keyboard.type("Count these for me")
        page.keyboard.press("Enter")
        form = page.locator("form.pending-call")
        expect(form).to_contain_text("May I give my final answer?")
        _no_horizontal_scroll(page)
        # focus is visible: the focused control draws an outline
        form.locator("textarea[name=result]").focus()
        assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
        page.keyboard.type("yes")
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        expect(form.locator("button[type=submit]")).to_be_focused()
        keep_screenshot(page, "chat-phone-pending")
        violations = axe_violations(page)
        assert not violations, json.dumps(violations, indent=2)
        # back in the box, Ctrl+Enter answers
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Shift+Tab")
        expect(form.locator("textarea[name=result]")).to_be_focused()
        page.keyboard.press("Control+Enter")
        expect(page.locator(".turn.assistant").last).to_contain_text("All done. The human said: yes")
        _no_horizontal_scroll(page)
        keep_screenshot(page, "chat-phone-done")
        violations = axe_violations(page)
        assert not violations, json.dumps(violations, indent=2)


def test_the_sessions_list_shows_a_page_and_older_sessions_on_demand(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    made = [
        server.client.post("/v1/sessions", json={"agent": "weather", "prompt": f"city {n}", "run": "none"}).json()
        for n in range(53)
    ]
    with browser_page(f"{server.url}/") as page:
        rows = page.locator("#sessions button.session")
        expect(rows).to_have_count(50)
        expect(page.locator(f"button[data-session='{made[-1]['session_id']}']")).to_contain_text("city 52")
        expect(page.locator(f"button[data-session='{made[0]['session_id']}']")).to_have_count(0)
        older = page.locator("#older-sessions")
        expect(older).to_be_visible()
        older.click()
        expect(rows).to_have_count(53)
        expect(page.locator(f"button[data-session='{made[0]['session_id']}']")).to_contain_text("city 0")
        expect(older).to_be_hidden()
        # a new session arriving keeps the older rows in the list
        server.client.post("/v1/sessions", json={"agent": "weather", "prompt": "city new", "run": "none"})
        expect(rows).to_have_count(54)
