"""A tool that prints 20 MB cannot hurt the server (issue 11, acceptance 3; docs/tools.md §4).

The bash tool keeps only the cap of its stdout while reading; the stored result is under the cap
with a note; events carry a summary; the server's memory stays small and ``/healthz`` answers
quickly throughout.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent, write_tool

FLOOD = 20_000_000
CAP = 1024 * 1024


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_20_mb_from_a_tool(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(
        {
            "rules": [
                {"when": {"last_contains": "warm up"}, "reply": {"content": "warm"}},
                {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_flood", "arguments": {}}]}},
                {"reply": {"content": "read it"}},
            ]
        }
    )
    flood = f"head -c {FLOOD} /dev/zero | tr '\\0' y"
    write_tool(tmp_path / "tools", "flood", {"slug": "flood", "description": "floods", "args": []}, flood)
    server = start_server([write_agent(tmp_path, "flooded", llm.url, toolDirectory="tools")])
    pid = server.process.proc.pid
    # the first run of a process imports the LLM client (a few hundred ms of CPU): not measured here
    warm = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "flooded", "prompt": "warm up"}))
    assert warm.json()["status"] == "idle"
    latencies: list[float] = []
    peak = [_rss_mb(pid)]
    done = threading.Event()

    def watch() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as probe:
            while not done.is_set():
                started = time.monotonic()
                assert probe.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - started)
                peak.append(_rss_mb(pid))
                time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        answer = server.client.post(
            "/v1/sessions?wait=true&timeout=120", content=json.dumps({"agent": "flooded", "prompt": "flood me"})
        )
    finally:
        time.sleep(0.5)
        done.set()
        watcher.join(30)
    view = answer.json()
    assert answer.status_code == 201 and view["status"] == "idle", answer.text
    [(_, stored)] = view["session"]["turns"][1]["contents"]["userToolResponses"]
    assert len(stored.encode()) <= CAP
    assert stored.startswith("y" * 1000)
    assert stored.endswith(f"[output truncated: {CAP - len(stored.splitlines()[-1]) - 1} of {FLOOD} bytes kept]")
    ordered = sorted(latencies)
    print(
        f"20 MB tool: server RSS {peak[0]:.0f} MB before, peak {max(peak):.0f} MB;"
        f" /healthz over {len(latencies)} requests:"
        f" median {ordered[len(ordered) // 2] * 1000:.1f} ms, p95 {ordered[int(len(ordered) * 0.95)] * 1000:.1f} ms,"
        f" max {ordered[-1] * 1000:.1f} ms"
    )
    assert max(peak) < 300
    assert ordered[-1] < 0.1
