"""A person in a real browser on the chat page at ``/`` (issue 18; docs/guide-chat.md §1).

Headless Debian chromium, driven by Playwright as in tests/test_admin_browser.py, talks to a real
``agents serve`` with the demo agents and the scripted model. The page is a client of the public
API only, so every check of what the page did is made against the API or the model's request log.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import struct
import sys
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, Route, expect, sync_playwright

from devtools.mockllm import MockLlmServer
from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.demo import demo_agents, demo_script
from tests.harness import ROOT, Server, write_agent, write_tool
from tests.owners import TOKENS, owner, write_tokens

# The machine running the suite is shared: give the page as long to show a thing as any other wait.
expect.set_options(timeout=30_000)

#: Records, in ``window.streamed`` and ``window.running``, the text of the streaming answer and
#: of the running tools each time the page draws them.
DRAW_RECORDER = """
window.streamed = [];
window.running = [];
new MutationObserver(() => {
  const node = document.querySelector(".streaming");
  if (node) window.streamed.push(node.textContent);
  document.querySelectorAll(".running-tool").forEach((tool) => window.running.push(tool.textContent));
}).observe(document, {childList: true, subtree: true});
"""


@contextmanager
def browser_page(url: str, *, width: int = 1200, init_script: str | None = None) -> Iterator[Page]:
    """A page of headless chromium opened on ``url``, with a record of every request it made
    (``page.requested``); ``init_script`` runs before the page's own."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.set_default_timeout(30_000)
        requested: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        if init_script:
            page.add_init_script(init_script)
        page.requested = requested  # type: ignore[attr-defined]
        page.goto(url)
        try:
            yield page
        finally:
            browser.close()


def send(page: Page, text: str) -> None:
    """Type a message and press Enter, as a person does."""
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def tiny_png() -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def session_rows(db: str) -> int:
    """How many sessions the server's database holds."""
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT count(*) FROM sessions_app_session").fetchone()[0]


def test_a_person_asks_the_weather_agent_and_answers_its_pending_call_in_the_page(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    with browser_page(f"{server.url}/") as page:
        expect(page.locator("#connection")).to_have_text("live")
        page.click("button[data-agent=weather]")
        expect(page.locator("#session-title")).to_contain_text("weather")
        send(page, "Weather in Paris?")

        # the deferred call arrives live, with a form to answer it
        form = page.locator("form.pending-call")
        expect(form).to_have_count(1)
        expect(form).to_contain_text("get_weather")
        expect(form).to_contain_text('"city": "Paris"')
        expect(page.locator("#session-status")).to_have_text("waiting_external")
        [listed] = server.client.get("/v1/sessions").json()["sessions"]
        expect(page.locator(f"button[data-session='{listed['session_id']}']")).to_contain_text("waiting_external")

        form.locator("textarea[name=result]").fill("sunny")
        form.locator("button[type=submit]").click()

        # the final answer appears without a reload, and the form is gone
        expect(page.locator(".turn.assistant").last).to_contain_text("The weather in Paris: sunny.")
        expect(page.locator("form.pending-call")).to_have_count(0)
        expect(page.locator("#session-status")).to_have_text("idle")
        done = server.client.get(f"/v1/sessions/{listed['session_id']}").json()
        assert done["status"] == "idle"
        assert done["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "The weather in Paris: sunny."
        # every request of the page went to the server itself
        assert page.requested, "the page made no request"  # type: ignore[attr-defined]
        assert all(url.startswith(server.url) for url in page.requested)  # type: ignore[attr-defined]


def test_an_attached_png_reaches_the_model_and_an_attachment_over_20_mib_is_refused_twice(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    png = tiny_png()
    with browser_page(f"{server.url}/") as page:
        page.click("button[data-agent=weather]")
        page.set_input_files("#file", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": png}])
        expect(page.locator("#attachments li")).to_contain_text("dot.png")
        send(page, "Weather where this was taken?")
        expect(page.locator("form.pending-call")).to_have_count(1)
        # the picture is shown inline in the person's turn
        expect(page.locator(".turn.user img[alt='dot.png']")).to_have_count(1)
        expect(page.locator("#attachments li")).to_have_count(0)
        [first] = llm.requests
        [user] = [message for message in first["messages"] if message["role"] == "user"]
        assert {"type": "text", "text": "Weather where this was taken?"} in user["content"]
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}
        assert image in user["content"]

        # over the limit: refused in the page, before anything is sent
        [listed] = server.client.get("/v1/sessions").json()["sessions"]
        before = server.client.get(f"/v1/sessions/{listed['session_id']}").json()
        big = b"a" * 21_000_000
        page.set_input_files("#file", files=[{"name": "big.txt", "mimeType": "text/plain", "buffer": big}])
        expect(page.locator("#composer-error")).to_contain_text("big.txt is 20.03 MiB, over the 20 MiB limit")
        expect(page.locator("#attachments li")).to_have_count(0)
        send(page, "and this?")
        expect(page.locator(".queued-message")).to_contain_text("and this?")
    # the page sent the message without the refused file
    [queued] = server.client.get(f"/v1/sessions/{listed['session_id']}/mail?unread=true").json()["mail"]
    assert queued["body"]["query"] == "and this?"

    # sent anyway, the server refuses it too, and stores nothing
    media = [{"mime": "text/plain", "base64": base64.b64encode(big).decode(), "filename": "big.txt"}]
    refused = server.client.post(
        f"/v1/sessions/{listed['session_id']}/messages", content=json.dumps({"prompt": "read this", "media": media})
    )
    assert refused.status_code == 413, refused.text
    assert refused.json() == {
        "error": "payload_too_large",
        "message": "attachment 'big.txt' is 21000000 bytes, over the limit of 20971520 bytes",
    }
    after = server.client.get(f"/v1/sessions/{listed['session_id']}").json()
    assert after["session"]["turns"] == before["session"]["turns"]
    assert len(server.client.get(f"/v1/sessions/{listed['session_id']}/mail").json()["mail"]) == 1
    created = server.client.post("/v1/sessions", content=json.dumps({"agent": "weather", "media": media}))
    assert created.status_code == 413 and created.json()["error"] == "payload_too_large"
    assert session_rows(server.db) == 1


def test_with_auth_tokens_the_page_asks_for_a_token_and_shows_only_its_owners_sessions(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url), extra_args=["--auth-tokens", str(write_tokens(tmp_path))])
    ids = {}
    for name, who in (("alice-1", "alice"), ("alice-2", "alice"), ("bob-1", "bob")):
        body = json.dumps({"agent": "weather", "prompt": f"hello from {name}", "run": "none"})
        ids[name] = server.client.post("/v1/sessions", headers=owner(who), content=body).json()["session_id"]

    with browser_page(f"{server.url}/") as page:
        expect(page.locator("#token-prompt")).to_be_visible()
        expect(page.locator("#app")).to_be_hidden()
        expect(page.locator("button[data-session]")).to_have_count(0)
        page.wait_for_timeout(500)
        assert not [url for url in page.requested if "/v1/" in url]  # type: ignore[attr-defined]

        page.fill("#token-input", "not-a-token")
        page.press("#token-input", "Enter")
        expect(page.locator("#token-error")).to_contain_text("refused")
        expect(page.locator("#app")).to_be_hidden()

        page.fill("#token-input", TOKENS["alice"])
        page.press("#token-input", "Enter")
        expect(page.locator("#app")).to_be_visible()
        expect(page.locator("button[data-session]")).to_have_count(2)
        for name in ("alice-1", "alice-2"):
            expect(page.locator(f"button[data-session='{ids[name]}']")).to_be_visible()
        expect(page.locator(f"button[data-session='{ids['bob-1']}']")).to_have_count(0)
        expect(page.locator("#connection")).to_have_text("live")
        # the token stays in this tab's session storage only
        assert page.evaluate("sessionStorage.getItem('agents-server-token')") == TOKENS["alice"]
        assert page.evaluate("localStorage.length") == 0
        page.reload()
        expect(page.locator("button[data-session]")).to_have_count(2)

        # a session bob starts now never reaches alice's page; one of hers appears live
        empty = json.dumps({"agent": "weather", "run": "none"})
        server.client.post("/v1/sessions", headers=owner("bob"), content=empty)
        mine = server.client.post("/v1/sessions", headers=owner("alice"), content=empty)
        expect(page.locator(f"button[data-session='{mine.json()['session_id']}']")).to_be_visible()
        expect(page.locator("button[data-session]")).to_have_count(3)

        page.click("#forget-token")
        expect(page.locator("#token-prompt")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('agents-server-token')") is None


def test_no_ui_and_a_non_loopback_bind_without_auth_turn_the_page_off(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    agents = demo_agents(tmp_path, llm.url)
    served = start_server(agents)
    page = served.client.get("/")
    assert page.status_code == 200 and "chat-config" in page.text
    assert served.client.get("/static/chat/chat.js").status_code == 200
    assert served.client.post("/").json()["error"] == "method_not_allowed"
    served.stop()
    for server in (
        start_server(agents, extra_args=["--no-ui"]),
        start_server(agents, env={"AGENTS_NO_UI": "true"}),
        start_server(agents, extra_args=["--bind", "0.0.0.0"]),
    ):
        answer = server.client.get("/")
        assert answer.status_code == 404
        assert answer.json() == {"error": "not_found", "message": "no route for /"}
        # the API is there all the same
        assert server.client.get("/v1/agents").status_code == 200
        server.stop()


SLOWPOKE_RULES = [
    {
        "when": {"any_contains": "You are slowpoke", "last_contains": "stop now"},
        "reply": {"content": "Stopped as asked."},
    },
    {
        "when": {"any_contains": "You are slowpoke", "last_contains": "slow result"},
        "reply": {"content": "The slow work finished late."},
    },
    {
        "when": {"any_contains": "You are slowpoke", "last_role": "user"},
        "reply": {"tool_calls": [{"name": "bash_slow", "arguments": {}}]},
    },
]


def test_the_shell_agent_shows_its_calls_and_question_and_an_interrupt_folds_queued_messages(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    script = demo_script()
    llm = llm_server({"rules": SLOWPOKE_RULES + script["rules"]})
    release = tmp_path / "release"
    write_tool(
        tmp_path / "tools",
        "slow",
        {"slug": "slow", "description": "works slowly", "args": []},
        f"while [ ! -e {release} ]; do sleep 0.1; done; echo slow result",
    )
    slowpoke = write_agent(
        tmp_path, "slowpoke", llm.url, toolDirectory="tools", executionMode="asynchronous",
        toolCallPolicyConfig={"default": {"tag": "runSync"}, "rules": []},
    )
    server = start_server([*demo_agents(tmp_path, llm.url), slowpoke])
    with browser_page(f"{server.url}/") as page:
        page.click("button[data-agent=shell-helper]")
        send(page, "Count these for me")

        # both bash calls with their outputs, folded, and the deferred question with its form
        calls = page.locator(".tool[data-tool='bash_word-count']")
        expect(calls).to_have_count(2)
        expect(calls.nth(0)).to_contain_text("the quick brown fox")
        expect(calls.nth(0).locator("pre.result")).to_have_text("4\n")
        expect(calls.nth(1)).to_contain_text("jumps over the lazy dog today")
        expect(calls.nth(1).locator("pre.result")).to_have_text("6\n")
        assert calls.nth(0).get_attribute("open") is None
        expect(calls.nth(0).locator("pre.result")).to_be_hidden()
        calls.nth(0).locator("summary").click()
        expect(calls.nth(0).locator("pre.result")).to_be_visible()
        form = page.locator("form.pending-call")
        expect(form).to_contain_text("bash_ask_human")
        expect(form).to_contain_text("May I give my final answer?")
        form.locator("textarea[name=result]").fill("yes")
        form.locator("button[type=submit]").click()
        expect(page.locator(".turn.assistant").last).to_contain_text("All done. The human said: yes")
        expect(page.locator(".tool[data-tool='bash_word-count']")).to_have_count(2)
        # the session was drawn again meanwhile; the call the person unfolded is still unfolded
        expect(calls.nth(0).locator("pre.result")).to_be_visible()
        expect(calls.nth(1).locator("pre.result")).to_be_hidden()

        # a slow tool runs; a message sent meanwhile is queued, and shown queued
        page.click("button[data-agent=slowpoke]")
        send(page, "start the slow work")
        expect(page.locator(".running-tool")).to_contain_text("bash_slow")
        send(page, "first extra note")
        expect(page.locator(".queued-message")).to_contain_text("first extra note")
        expect(page.locator(".queued-message")).to_have_count(1)

        # an interrupt detaches the tool: both messages are folded into the conversation
        page.fill("#prompt", "stop now please")
        page.click("#interrupt")
        expect(page.locator(".turn.assistant").last).to_contain_text("Stopped as asked.")
        expect(page.locator(".queued-message")).to_have_count(0)
        expect(page.locator(".turn.user").last).to_contain_text("stop now please")
        expect(page.locator(".turn.user", has_text="first extra note")).to_have_count(1)

        # the detached call's late result comes back on its own
        release.touch()
        expect(page.locator(".turn.assistant").last).to_contain_text("The slow work finished late.")
        expect(page.locator("#session-status")).to_have_text("idle")
        expect(page.locator(".running-tool")).to_have_count(0)


def test_the_page_reconnects_after_a_restart_and_shows_what_it_missed_once(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    agents = demo_agents(tmp_path, llm.url)
    first = start_server(agents)
    with browser_page(f"{first.url}/") as page:
        replays: list[str] = []
        page.on(
            "response",
            lambda response: "/v1/events" in response.url and replays.append(response.headers.get("agents-replay", "")),
        )
        expect(page.locator("#connection")).to_have_text("live")
        page.click("button[data-agent=weather]")
        send(page, "Weather in Paris?")
        form = page.locator("form.pending-call")
        expect(form).to_have_count(1)
        token = form.get_attribute("data-token")
        sid = first.client.get("/v1/sessions").json()["sessions"][0]["session_id"]

        # the server goes away; while the page cannot reach it, a new one answers the call
        page.route("**/v1/events**", lambda route: route.abort())
        first.stop()
        expect(page.locator("#connection")).to_have_text("reconnecting")
        second = start_server(agents, db=first.db, port=first.port)
        done = second.client.post(f"/v1/continuations/{token}?wait=true", content=json.dumps({"result": "rainy"}))
        assert done.json()["status"] == "idle"
        page.unroute("**/v1/events**")

        # the page comes back, replays what it missed, and shows it once
        expect(page.locator("#connection")).to_have_text("reconnected", timeout=60_000)
        expect(page.locator(".turn.assistant").last).to_contain_text("The weather in Paris: rainy.")
        expect(page.locator("form.pending-call")).to_have_count(0)
        expect(page.locator(f"button[data-session='{sid}']")).to_contain_text("idle")
        turns = second.client.get(f"/v1/sessions/{sid}").json()["session"]["turns"]
        expect(page.locator("article.turn")).to_have_count(len(turns))
        expect(page.locator(".turn.assistant", has_text="The weather in Paris: rainy.")).to_have_count(1)
        assert replays[0] == "live" and "replayed" in replays[1:], replays


def test_controls_fork_keyboard_and_a_phone_sized_screen(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    with browser_page(f"{server.url}/", width=390) as page:
        # on a phone the lists fold into a menu
        expect(page.locator("#sidebar")).to_be_hidden()
        page.click("#menu-toggle")
        expect(page.locator("#sidebar")).to_be_visible()
        page.click("button[data-agent=weather]")
        expect(page.locator("#sidebar")).to_be_hidden()
        expect(page.locator("#prompt")).to_be_visible()

        # Shift+Enter starts a new line, Enter sends
        page.click("#prompt")
        page.keyboard.type("Weather in Paris?")
        page.keyboard.press("Shift+Enter")
        page.keyboard.type("Thanks.")
        page.keyboard.press("Enter")
        expect(page.locator("form.pending-call")).to_have_count(1)
        expect(page.locator(".turn.user .text")).to_have_text("Weather in Paris?\nThanks.")
        sid = server.client.get("/v1/sessions").json()["sessions"][0]["session_id"]

        # pause and resume go through the API; Cancel is offered only while a run goes on
        page.click("#btn-pause")
        expect(page.locator("#session-status")).to_have_text("paused")
        assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "paused"
        page.click("#btn-resume")
        expect(page.locator("#session-status")).to_have_text("waiting_external")
        expect(page.locator("#btn-cancel")).to_be_hidden()

        # fork at the first turn: a new session with that turn only, opened at once
        page.locator("article.turn[data-turn='2'] button.fork").click()
        expect(page.locator("article.turn")).to_have_count(1)
        sessions = server.client.get("/v1/sessions").json()["sessions"]
        assert len(sessions) == 2
        [fork] = [meta for meta in sessions if meta["session_id"] != sid]
        expect(page.locator("#session-title")).to_contain_text(fork["session_id"][:8])
        forked = server.client.get(f"/v1/sessions/{fork['session_id']}").json()
        assert forked["session"]["forkedFromSessionId"] == sid and len(forked["session"]["turns"]) == 1

        # back to the first session: a JSON answer is checked in the page, then sent as JSON
        page.click("#menu-toggle")
        page.click(f"button[data-session='{sid}']")
        form = page.locator("form.pending-call")
        form.locator("select[name=kind]").select_option("json")
        form.locator("textarea[name=result]").fill("{not json")
        form.locator("button[type=submit]").click()
        expect(form.locator(".error")).to_contain_text("Not valid JSON")
        assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "waiting_external"
        form.locator("textarea[name=result]").fill('{"sky": "clear"}')
        form.locator("button[type=submit]").click()
        expect(page.locator("#session-status")).to_have_text("idle")
        tool_message = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
        assert json.loads(tool_message["content"]) == {"sky": "clear"}


def test_with_stream_tokens_the_answer_is_drawn_as_it_is_written(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url), extra_args=["--stream-tokens"])
    with browser_page(f"{server.url}/", init_script=DRAW_RECORDER) as page:
        page.click("button[data-agent=weather]")
        send(page, "Weather in Paris?")
        form = page.locator("form.pending-call")
        form.locator("textarea[name=result]").fill("sunny")
        form.locator("button[type=submit]").click()
        expect(page.locator(".turn.assistant").last).to_contain_text("The weather in Paris: sunny.")
        # the streamed draft went away when the stored turn arrived
        expect(page.locator(".streaming")).to_have_count(0)
        drafts = page.evaluate("window.streamed")
    # drawn piece by piece: growing prefixes of the answer, the whole answer last
    assert drafts, "no streamed text was drawn"
    assert all("The weather in Paris: sunny.".startswith(draft) for draft in drafts), drafts
    assert drafts[-1] == "The weather in Paris: sunny."


def test_a_running_tool_is_shown_with_its_progress_and_a_tool_picture_inline(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(
        {
            "rules": [
                {
                    "when": {"last_role": "user", "last_contains": "slowly"},
                    "reply": {"tool_calls": [{"name": "mcp_demo_slow", "arguments": {"steps": 4}}]},
                },
                {
                    "when": {"last_role": "user", "last_contains": "draw"},
                    "reply": {"tool_calls": [{"name": "mcp_demo_picture", "arguments": {}}]},
                },
                {"reply": {"content": "done"}},
            ]
        }
    )
    demo = {"name": "demo", "executable": sys.executable, "args": [str(ROOT / "tests" / "mcp_demo_server.py")]}
    agent = write_agent(tmp_path, "demo", llm.url, mcpServers=[{"tag": "McpSimpleBinary", "contents": demo}])
    server = start_server([agent])
    with browser_page(f"{server.url}/", init_script=DRAW_RECORDER) as page:
        page.click("button[data-agent=demo]")
        send(page, "count slowly")
        expect(page.locator(".tool[data-tool='mcp_demo_slow'] pre.result")).to_have_text("4 steps done")
        expect(page.locator(".running-tool")).to_have_count(0)
        running = page.evaluate("window.running")
        assert any(text.startswith("running mcp_demo_slow") for text in running), running
        assert "running mcp_demo_slow 2/4 · step 2 of 4" in running, running

        send(page, "draw something")
        picture = page.locator(".tool[data-tool='mcp_demo_picture']")
        expect(picture).to_contain_text("a red dot")
        picture.locator("summary").click()
        expect(picture.locator("img")).to_be_visible()
        assert picture.locator("img").evaluate("img => img.naturalWidth") > 0


def test_a_lost_answer_is_sent_again_with_its_idempotency_key_and_runs_once(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    keys: dict[str, list[str | None]] = {}
    lost: dict[str, int] = {}

    def lose_the_first_answer(route: Route) -> None:
        request = route.request
        if request.method != "POST":
            route.continue_()
            return
        path = request.url.split("?")[0].removeprefix(server.url)
        keys.setdefault(path, []).append(request.headers.get("idempotency-key"))
        if path in lost:
            route.continue_()
            return
        # the server answers; the answer never reaches the page, as on a dropped connection
        lost[path] = route.fetch().status
        route.abort("connectionreset")

    with browser_page(f"{server.url}/") as page:
        page.route("**/v1/sessions", lose_the_first_answer)
        page.route("**/v1/continuations/*", lose_the_first_answer)
        expect(page.locator("#connection")).to_have_text("live")
        page.click("button[data-agent=weather]")
        send(page, "Weather in Paris?")
        form = page.locator("form.pending-call")
        expect(form).to_have_count(1)
        form.locator("textarea[name=result]").fill("sunny")
        form.locator("button[type=submit]").click()
        expect(page.locator(".turn.assistant").last).to_contain_text("The weather in Paris: sunny.")
        expect(page.locator("#session-status")).to_have_text("idle")
        # the events may show the answer before the page's retry of the lost result is in
        for _ in range(300):
            if sum(len(tries) for tries in keys.values()) == 4:
                break
            page.wait_for_timeout(100)

    token_path = next(path for path in keys if path.startswith("/v1/continuations/"))
    assert lost["/v1/sessions"] == 201 and lost[token_path] in (200, 202) and len(lost) == 2
    for tries in keys.values():
        assert len(tries) == 2 and tries[0] == tries[1], keys
        assert uuid.UUID(tries[0]).version == 4
    assert keys["/v1/sessions"][0] != keys[token_path][0]
    assert session_rows(server.db) == 1
    assert len(llm.requests) == 2  # one for the question, one for the result
