"""Webhook subscriptions and signed deliveries over real HTTP (issue 28, acceptance 1, 2, 4 and 6).

A real receiver (tests/webhook_receiver.py) verifies every request with the ``standardwebhooks``
library and answers as scripted; the server is a real ``agents serve`` on its embedded worker and
the model the scripted one. docs/webhooks.md states the rules checked here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.mockllm import MockLlmServer
from tests.harness import Server, wait_until, write_agent
from tests.owners import owner, write_tokens
from tests.webhook_receiver import Receiver, webhook_receiver

WEATHER = {
    "rules": [
        {
            "when": {"last_role": "user"},
            "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "The weather in Paris: {last_content}."}},
    ]
}
GET_WEATHER = {
    "name": "get_weather",
    "description": "The current weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
#: Short retries, so that a test sees them: 1 s, then 2 s, then 4 s.
FAST = {"AGENTS_WEBHOOK_RETRY_SECONDS": "1,2,4", "AGENTS_WEBHOOK_SWEEP_SECONDS": "0.2"}


def _weather(tmp: Path, llm: MockLlmServer) -> Path:
    return write_agent(
        tmp,
        "weather",
        llm.url,
        externalTools=[GET_WEATHER],
        toolCallPolicyConfig={"default": {"tag": "defer", "reason": "weather service"}, "rules": []},
    )


def _subscribe(server: Server, receiver: Receiver, events: list[str], headers: dict[str, str] | None = None) -> dict:
    answer = server.client.post(
        "/v1/webhooks", content=json.dumps({"url": receiver.url, "events": events}), headers=headers or {}
    )
    assert answer.status_code == 201, answer.text
    created = answer.json()
    receiver.secret = created["secret"]
    return created


def _start_session(server: Server, headers: dict[str, str] | None = None) -> dict[str, Any]:
    body = json.dumps({"agent": "weather", "prompt": "Weather in Paris?"})
    answer = server.client.post("/v1/sessions?wait=true", content=body, headers=headers or {})
    assert answer.status_code == 201, answer.text
    return answer.json()


def _deliveries(server: Server, webhook_id: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    answer = server.client.get(f"/v1/webhooks/{webhook_id}/deliveries", headers=headers or {})
    assert answer.status_code == 200, answer.text
    return answer.json()["deliveries"]


def test_the_weather_walkthrough_delivers_each_run_stop_and_deferral_once_signed(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_weather(tmp_path, llm_server(WEATHER))])
    with webhook_receiver() as receiver:
        created = _subscribe(server, receiver, ["run.stopped", "calls.deferred"])
        assert created["secret"].startswith("whsec_")
        # the secret is shown once: never again, in one subscription or the list
        shown = server.client.get(f"/v1/webhooks/{created['webhook_id']}").json()
        assert "secret" not in shown and shown["events"] == ["calls.deferred", "run.stopped"]
        assert all("secret" not in row for row in server.client.get("/v1/webhooks").json()["webhooks"])

        first = _start_session(server)
        assert first["status"] == "waiting_external"
        token = first["pending"][0]["continuation_token"]
        answer = server.client.post(f"/v1/continuations/{token}?wait=true", content=json.dumps({"result": "sunny"}))
        assert answer.status_code == 200 and answer.json()["status"] == "idle"

        wait_until(lambda: len(receiver.received) >= 3)
        time.sleep(1.0)  # nothing more comes
        assert receiver.kinds() == ["calls.deferred", "run.stopped", "run.stopped"]
        assert all(item.verified for item in receiver.received)
        assert len(receiver.processed()) == 3
        payloads = [item.payload for item in receiver.received]
        assert {p["data"]["session_id"] for p in payloads} == {first["session_id"]}
        assert [p["data"]["status"] for p in payloads[1:]] == ["waiting_external", "idle"]
        assert payloads[0]["data"]["calls"][0]["tool"] == "get_weather"
        # seq grows: a run's end is delivered after what came before it in the session
        seqs = [p["data"]["seq"] for p in payloads]
        assert seqs == sorted(seqs)
        for item in receiver.received:
            assert item.headers["webhook-id"].startswith("msg_") and item.headers["webhook-signature"].startswith("v1,")

        log = _deliveries(server, created["webhook_id"])
        assert [row["state"] for row in log] == ["delivered"] * 3
        assert all([a["status_code"] for a in row["attempt_log"]] == [200] for row in log)
        assert {row["delivery_id"] for row in log} == set(receiver.processed())


def test_a_receiver_answering_500_twice_gets_three_attempts_with_growing_delays_and_one_id(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_weather(tmp_path, llm_server(WEATHER))], env=FAST)
    with webhook_receiver() as receiver:
        receiver.answers = [(500, 0.0, {}), (500, 0.0, {})]
        created = _subscribe(server, receiver, ["session.created"])
        _start_session(server)
        wait_until(lambda: len(receiver.received) >= 3, timeout=30)
        time.sleep(1.5)
        received = receiver.received
        assert len(received) == 3
        assert len({item.headers["webhook-id"] for item in received}) == 1
        assert len(receiver.processed()) == 1 and all(item.verified for item in received)
        # the body is the same bytes at every attempt
        assert len({item.body for item in received}) == 1
        first_gap, second_gap = received[1].at - received[0].at, received[2].at - received[1].at
        assert 0.8 < first_gap < second_gap, (first_gap, second_gap)

        [row] = _deliveries(server, created["webhook_id"])
        assert row["state"] == "delivered" and row["attempts"] == 3
        assert [a["status_code"] for a in row["attempt_log"]] == [500, 500, 200]
        assert [a["number"] for a in row["attempt_log"]] == [1, 2, 3]
        assert row["attempt_log"][0]["response_head"] == "ok"


def test_a_410_stops_retries_and_disables_the_subscription_and_other_4xx_are_not_retried(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_weather(tmp_path, llm_server(WEATHER))], env=FAST)
    with webhook_receiver() as gone, webhook_receiver() as picky:
        gone.answers = [(410, 0.0, {})]
        picky.answers = [(404, 0.0, {})]
        gone_hook = _subscribe(server, gone, ["session.created"])
        picky_hook = _subscribe(server, picky, ["session.created"])
        _start_session(server)
        wait_until(lambda: gone.received and picky.received)
        time.sleep(3.0)  # past the first two retry delays
        assert len(gone.received) == 1 and len(picky.received) == 1

        [row] = _deliveries(server, gone_hook["webhook_id"])
        assert row["state"] == "failed" and [a["status_code"] for a in row["attempt_log"]] == [410]
        shown = server.client.get(f"/v1/webhooks/{gone_hook['webhook_id']}").json()
        assert shown["enabled"] is False and "410" in shown["disabled_reason"]
        [row] = _deliveries(server, picky_hook["webhook_id"])
        assert row["state"] == "failed" and [a["status_code"] for a in row["attempt_log"]] == [404]
        shown = server.client.get(f"/v1/webhooks/{picky_hook['webhook_id']}").json()
        assert shown["enabled"] is True and shown["failures_in_a_row"] == 1

        # a disabled subscription gets nothing more; "send again" sends the failed one, same id
        _start_session(server)
        wait_until(lambda: len(picky.received) == 2)
        time.sleep(0.5)
        assert len(gone.received) == 1
        url = f"/v1/webhooks/{picky_hook['webhook_id']}/deliveries/{row['delivery_id']}/resend"
        resent = server.client.post(url)
        assert resent.status_code == 202 and resent.json()["state"] == "pending", resent.text
        wait_until(lambda: len(picky.received) == 3)
        assert picky.received[-1].headers["webhook-id"] == row["delivery_id"]
        assert picky.received[-1].body == picky.received[0].body

        def again() -> dict[str, Any]:
            return {r["delivery_id"]: r for r in _deliveries(server, picky_hook["webhook_id"])}[row["delivery_id"]]

        wait_until(lambda: again()["state"] == "delivered")
        assert [a["status_code"] for a in again()["attempt_log"]] == [404, 200]
        assert len(_deliveries(server, picky_hook["webhook_id"])) == 2


def test_a_receiver_that_times_out_is_retried_and_a_subscription_failing_in_a_row_is_disabled(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    env = {
        "AGENTS_WEBHOOK_RETRY_SECONDS": "0.5",
        "AGENTS_WEBHOOK_SWEEP_SECONDS": "0.2",
        "AGENTS_WEBHOOK_TIMEOUT_SECONDS": "1",
        "AGENTS_WEBHOOK_DISABLE_AFTER": "2",
    }
    server = start_server([_weather(tmp_path, llm_server(WEATHER))], env=env)
    with webhook_receiver() as receiver:
        receiver.answers = [(200, 3.0, {}), (503, 0.0, {}), (503, 0.0, {}), (503, 0.0, {})]
        created = _subscribe(server, receiver, ["session.created"])
        _start_session(server)
        _start_session(server)
        wait_until(lambda: not server.client.get(f"/v1/webhooks/{created['webhook_id']}").json()["enabled"], timeout=30)
        shown = server.client.get(f"/v1/webhooks/{created['webhook_id']}").json()
        assert shown["disabled_reason"] == "2 deliveries failed in a row (last: HTTP 503)"
        log = _deliveries(server, created["webhook_id"])
        assert [row["state"] for row in log] == ["failed", "failed"]
        errors = [a["error"] for row in reversed(log) for a in row["attempt_log"]]
        assert errors[0] == "timed out after 1 s" and errors[1:] == [None, None, None]
        # enabling it again clears the reason and the count
        answer = server.client.patch(f"/v1/webhooks/{created['webhook_id']}", content=json.dumps({"enabled": True}))
        assert answer.status_code == 200 and answer.json()["disabled_reason"] is None
        assert answer.json()["failures_in_a_row"] == 0


def test_loopback_and_private_urls_are_refused_with_the_ssrf_rule_on_and_nothing_is_stored(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_weather(tmp_path, llm_server(WEATHER))], env={"AGENTS_WEBHOOK_BLOCK_PRIVATE": "true"})
    with webhook_receiver() as receiver:
        refused = {
            receiver.url: "resolves to non-public address 127.0.0.1",
            "http://localhost:9/hook": "resolves to non-public address",
            "http://10.1.2.3/hook": "resolves to non-public address 10.1.2.3",
            "http://192.168.0.7/hook": "resolves to non-public address 192.168.0.7",
            "http://169.254.169.254/latest/meta-data": "resolves to non-public address 169.254.169.254",
            "http://[::1]:8080/hook": "resolves to non-public address ::1",
            "http://[::ffff:127.0.0.1]/hook": "resolves to non-public address",
            "http://0.0.0.0/hook": "resolves to non-public address 0.0.0.0",
            "ftp://example.com/hook": "only http and https URLs are allowed",
            "file:///etc/passwd": "only http and https URLs are allowed",
            "http://user:pw@example.com/hook": "may not carry a user name or password",
            "http:///nohost": "the URL has no host",
        }
        for url, reason in refused.items():
            answer = server.client.post("/v1/webhooks", content=json.dumps({"url": url, "events": ["run.stopped"]}))
            assert answer.status_code == 400, (url, answer.text)
            assert answer.json()["error"] == "webhook_url_refused" and reason in answer.json()["message"], url
        assert server.client.get("/v1/webhooks").json()["webhooks"] == []
        # a bad body is refused in the one error shape too
        for body in ({"url": receiver.url}, {"url": receiver.url, "events": ["text.delta"]}, {"events": []}, []):
            answer = server.client.post("/v1/webhooks", content=json.dumps(body))
            assert answer.status_code == 400 and answer.json()["error"] == "bad_request", body
        assert server.client.get("/v1/webhooks").json()["webhooks"] == []


def test_a_redirect_is_not_followed_and_the_delivery_fails_without_retries(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_weather(tmp_path, llm_server(WEATHER))], env=FAST)
    with webhook_receiver() as redirecting, webhook_receiver() as elsewhere:
        redirecting.answers = [(307, 0.0, {"Location": elsewhere.url})]
        created = _subscribe(server, redirecting, ["session.created"])
        _start_session(server)
        wait_until(lambda: redirecting.received)
        time.sleep(2.0)
        assert len(redirecting.received) == 1 and elsewhere.received == []
        [row] = _deliveries(server, created["webhook_id"])
        assert row["state"] == "failed" and [a["status_code"] for a in row["attempt_log"]] == [307]


def test_other_owners_subscriptions_and_deliveries_answer_404_and_are_never_listed(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    tokens = write_tokens(tmp_path)
    server = start_server(
        [_weather(tmp_path, llm_server(WEATHER))], extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"]
    )
    with webhook_receiver() as receiver:
        mine = _subscribe(server, receiver, ["session.created"], headers=owner("alice"))
        assert mine["owner"] == "alice"
        alices = _start_session(server, owner("alice"))
        _start_session(server, owner("bob"))
        wait_until(lambda: receiver.received)
        time.sleep(1.0)
        # alice's subscription hears of alice's sessions only
        assert [item.payload["data"]["session_id"] for item in receiver.received] == [alices["session_id"]]
        [delivery] = _deliveries(server, mine["webhook_id"], owner("alice"))

        hook = f"/v1/webhooks/{mine['webhook_id']}"
        bob = owner("bob")
        assert server.client.get("/v1/webhooks", headers=bob).json()["webhooks"] == []
        for method, path, body in (
            ("GET", hook, None),
            ("PATCH", hook, {"enabled": False}),
            ("DELETE", hook, None),
            ("GET", f"{hook}/deliveries", None),
            ("POST", f"{hook}/deliveries/{delivery['delivery_id']}/resend", None),
        ):
            content = json.dumps(body) if body is not None else None
            answer = server.client.request(method, path, headers=bob, content=content)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json() == {"error": "unknown_webhook", "message": f"no webhook {mine['webhook_id']}"}
        # a delivery of another subscription is not found under one's own
        bobs = _subscribe(server, receiver, ["run.stopped"], headers=bob)
        answer = server.client.post(
            f"/v1/webhooks/{bobs['webhook_id']}/deliveries/{delivery['delivery_id']}/resend", headers=bob
        )
        assert answer.status_code == 404 and answer.json()["error"] == "unknown_delivery"
        answer = server.client.get("/v1/webhooks/not-a-uuid", headers=bob)
        assert answer.status_code == 404 and answer.json()["error"] == "unknown_webhook"
        # nothing changed: alice's subscription is there, enabled, with its one delivery
        shown = server.client.get(hook, headers=owner("alice")).json()
        assert shown["enabled"] is True
        assert [d["delivery_id"] for d in _deliveries(server, mine["webhook_id"], owner("alice"))] == [
            delivery["delivery_id"]
        ]
        listed = server.client.get("/v1/webhooks", headers=owner("alice")).json()["webhooks"]
        assert [row["webhook_id"] for row in listed] == [mine["webhook_id"]]
        # an admin sees everyone's; no token, or a session token (valid on its session only), is 401
        every = server.client.get("/v1/webhooks", headers=owner("root")).json()["webhooks"]
        assert {row["webhook_id"] for row in every} == {mine["webhook_id"], bobs["webhook_id"]}
        assert server.client.get("/v1/webhooks").status_code == 401
        body = json.dumps({"agent": "weather", "session_token": True})
        token = server.client.post("/v1/sessions", content=body, headers=owner("alice")).json()["session_token"]
        answer = server.client.get("/v1/webhooks", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"


def test_a_webhook_url_on_a_request_is_told_once_of_that_run_end_and_a_bad_one_stores_nothing(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([_weather(tmp_path, llm_server(WEATHER))])
    with webhook_receiver() as receiver:
        body = json.dumps({"agent": "weather", "prompt": "Weather in Paris?", "webhook": receiver.url})
        answer = server.client.post("/v1/sessions?wait=true", content=body)
        assert answer.status_code == 201, answer.text
        session = answer.json()
        wait_until(lambda: receiver.received)
        [told] = receiver.received
        assert told.payload["type"] == "run.stopped" and told.payload["data"]["status"] == "waiting_external"
        assert told.payload["data"]["session_id"] == session["session_id"]
        # once: the run the continuation starts is not this request's
        token = session["pending"][0]["continuation_token"]
        server.client.post(f"/v1/continuations/{token}?wait=true", content=json.dumps({"result": "sunny"}))
        path = f"/v1/sessions/{session['session_id']}"
        body = json.dumps({"prompt": "And tomorrow?", "webhook": receiver.url})
        assert server.client.post(f"{path}/messages?wait=true", content=body).status_code == 200
        wait_until(lambda: len(receiver.received) == 2)
        time.sleep(0.5)
        # the message's run also defers get_weather
        assert [item.payload["data"]["status"] for item in receiver.received] == ["waiting_external"] * 2
        assert len({item.headers["webhook-id"] for item in receiver.received}) == 2
        # one-off notifications are no subscriptions of the owner's
        assert server.client.get("/v1/webhooks").json()["webhooks"] == []

        before = server.client.get(path).json()
        for url in ("ftp://example.com/", "http:///nohost"):
            for suffix, sent in (("/messages", {"prompt": "more?"}), ("/resume", {})):
                answer = server.client.post(path + suffix, content=json.dumps({**sent, "webhook": url}))
                assert answer.status_code == 400 and answer.json()["error"] == "webhook_url_refused", answer.text
            answer = server.client.post("/v1/sessions", content=json.dumps({"agent": "weather", "webhook": url}))
            assert answer.status_code == 400 and answer.json()["error"] == "webhook_url_refused", answer.text
        assert server.client.get(path).json()["version"] == before["version"]
        assert len(server.client.get("/v1/sessions").json()["sessions"]) == 1


def test_mistakes_are_refused_when_made_and_a_session_token_cannot_name_a_webhook(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    tokens = write_tokens(tmp_path)
    server = start_server([_weather(tmp_path, llm_server(WEATHER))], extra_args=["--auth-tokens", str(tokens)])
    alice = owner("alice")

    def post(path: str, body: dict[str, Any], headers: dict[str, str] = alice) -> Any:
        return server.client.post(path, content=json.dumps(body), headers=headers)

    # a cron expression that never fires, a parameter the agent lacks: refused now, not at each firing
    never = post("/v1/schedules", {"agent": "weather", "prompt": "x", "cron": "0 0 31 2 *"})
    assert (never.status_code, never.json()["error"]) == (400, "bad_request"), never.text
    assert "never fires" in never.json()["message"]
    unknown = post("/v1/schedules", {"agent": "weather", "prompt": "x", "interval_seconds": 60, "params": {"nope": 1}})
    assert (unknown.status_code, unknown.json()["error"]) == (422, "unknown_params"), unknown.text
    assert server.client.get("/v1/schedules", headers=alice).json()["schedules"] == []

    # a subscription whose filter can never match
    url = "http://127.0.0.1:9/hook"
    no_agent = post("/v1/webhooks", {"url": url, "events": ["run.stopped"], "agent": "nope"})
    assert (no_agent.status_code, no_agent.json()["error"]) == (404, "unknown_agent"), no_agent.text
    bobs = post("/v1/sessions", {"agent": "weather", "run": "none"}, owner("bob")).json()
    not_hers = post("/v1/webhooks", {"url": url, "events": ["run.stopped"], "session": bobs["session_id"]})
    assert (not_hers.status_code, not_hers.json()["error"]) == (404, "unknown_session"), not_hers.text
    assert server.client.get("/v1/webhooks", headers=alice).json()["webhooks"] == []

    # a session token's holder does not choose where the server sends requests
    created = post("/v1/sessions", {"agent": "weather", "run": "none", "session_token": True}).json()
    holder = {"Authorization": f"Bearer {created['session_token']}"}
    refused = post(f"/v1/sessions/{created['session_id']}/messages", {"prompt": "hi", "webhook": url}, holder)
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden"), refused.text
    assert server.client.get(f"/v1/sessions/{created['session_id']}", headers=alice).json()["session"]["turns"] == []
