"""Deferred calls routed to a Celery queue (issue 16, acceptance 8): the server publishes
``agents.deferred_call`` to the queue a ``defer`` names, the example's billing worker (a real,
separate Celery worker) answers it through ``complete_continuation``, and the session goes on;
what the worker raises is an error result the model reads."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from sessions_app.deferred_worker import ContinuationError, complete_continuation
from tests.harness import ROOT, SHARED_SECRET_KEY, Process, Server, Worker, base_env, wait_until

EXAMPLE = ROOT / "examples" / "celery-worker"
TOOL = "bash_charge-card"


def _script() -> dict[str, Any]:
    def charge(customer: str, amount: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": TOOL, "arguments": {"customer": customer, "amount": amount}}]}

    return {
        "rules": [
            {"when": {"last_role": "user", "last_contains": "CHARGE-ALICE"}, "reply": charge("alice", "12.5")},
            {"when": {"last_role": "user", "last_contains": "CHARGE-BOB"}, "reply": charge("bob", "-5")},
            {"when": {"last_role": "tool"}, "reply": {"content": "billing says: {last_content}"}},
            {"reply": {"content": "ok"}},
        ]
    }


def _agent(tmp: Path, llm: MockLlmServer) -> Path:
    """The example's agent file and tool, pointed at the scripted model."""
    target = tmp / "billing"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    document = json.loads((target / "billing.json").read_text())
    document["contents"]["modelUrl"] = llm.url
    (target / "billing.json").write_text(json.dumps(document))
    return target / "billing.json"


def _billing_worker(tmp: Path, redis_url: str, server: Server, postgres_url: str, access: str) -> Process:
    """``celery -A billing_worker worker -Q billing``, run from the example's folder as its
    docstring shows: a separate process with the broker, and the server's URL (``http``) or its
    database (``database``), not both."""
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "billing_worker",
        "worker",
        "-Q",
        "billing",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
    ]
    reach = (
        {"AGENTS_SERVER_URL": server.url}
        if access == "http"
        else {"DATABASE_URL": postgres_url, "DJANGO_SECRET_KEY": SHARED_SECRET_KEY}
    )
    env = base_env(REDIS_URL=redis_url, PYTHONPATH=str(ROOT), **reach)
    return Process(argv, env, tmp / "billing-worker.log", cwd=EXAMPLE)


def _final(server: Server, sid: str) -> dict[str, Any]:
    return wait_until(lambda: (v := server.client.get(f"/v1/sessions/{sid}").json())["status"] == "idle" and v, 90)


@pytest.mark.parametrize("access", ["http", "database"])
def test_a_celery_worker_answers_a_deferred_call_and_the_session_goes_on(
    access: str,
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(_script())
    agent = _agent(tmp_path, llm)
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    billing = _billing_worker(tmp_path, redis_url, server, postgres_url, access)
    try:
        alice = server.client.post("/v1/sessions", json={"agent": "billing", "prompt": "CHARGE-ALICE"}).json()
        bob = server.client.post("/v1/sessions", json={"agent": "billing", "prompt": "CHARGE-BOB"}).json()
        done = _final(server, alice["session_id"])
        failed = _final(server, bob["session_id"])
    finally:
        billing.stop()
    tool_messages = [m for body in llm.requests for m in body["messages"] if m["role"] == "tool"]
    receipts = [json.loads(m["content"]) for m in tool_messages if m["content"].startswith("{")]
    assert len(receipts) == 1
    assert (receipts[0]["customer"], receipts[0]["charged"]) == ("alice", 12.5)
    assert receipts[0]["receipt"].startswith("r-")
    assert [m["content"] for m in tool_messages if not m["content"].startswith("{")] == [
        "Error: ValueError: cannot charge -5.0 euros"
    ]
    assert "billing says: {" in json.dumps(done)
    assert "billing says: Error: ValueError: cannot charge -5.0 euros" in json.dumps(failed)
    log = billing.log_path.read_text(errors="replace")
    assert log.count("Task agents.deferred_call[") >= 2  # received by the separate worker


def test_complete_continuation_over_http_and_the_embedded_server_keeps_the_call_deferred(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script())
    server = start_server([_agent(tmp_path, llm)])
    sid = server.client.post("/v1/sessions", json={"agent": "billing", "prompt": "CHARGE-ALICE"}).json()["session_id"]
    # no shared broker: nothing is published, the call waits for its continuation as any other
    view = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{sid}").json())["status"] == "waiting_external" and v
    )
    token = view["pending"][0]["continuation_token"]
    assert "deferred call not published: no shared broker" in server.process.output()
    complete_continuation(token, "paid by hand", server_url=server.url)
    assert "billing says: paid by hand" in json.dumps(_final(server, sid))
    complete_continuation(token, "again", server_url=server.url)  # completed already: done
    with pytest.raises(ContinuationError) as refused:
        complete_continuation(str(uuid.uuid4()), "x", server_url=server.url)
    assert refused.value.code == "unknown_token"
    with pytest.raises(ContinuationError) as refused:
        complete_continuation(token.replace("-", "")[:8], "x", server_url=server.url)
    assert refused.value.code in ("unknown_token", "not_found")
