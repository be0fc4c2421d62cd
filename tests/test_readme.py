"""The README's demo command serves the demo, and its curl walkthrough works as written."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import ROOT, Process, base_env, free_port, wait_until

# every test here runs scripts/demo, which starts the scripted model and the server
pytestmark = pytest.mark.integration


def readme_curls() -> list[str]:
    """The curl commands of the README's walkthrough, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    walkthrough = text.split("## A walkthrough with curl", 1)[1].split("\n## ", 1)[0]
    commands, current = [], ""
    for line in walkthrough.splitlines():
        stripped = line.strip()
        if not current and not stripped.startswith("curl "):
            continue
        current += stripped.rstrip("\\").strip() + " "
        if not stripped.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def test_the_demo_and_the_walkthrough(tmp_path: Path) -> None:
    port, llm_port = free_port(), free_port()
    demo = Process(
        [str(ROOT / "scripts" / "demo")],
        base_env(AGENTS_PORT=str(port), MOCK_LLM_PORT=str(llm_port), DEMO_DB=str(tmp_path / "demo.db")),
        tmp_path / "demo.log",
    )
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout=300, interval=0.2)
        commands = readme_curls()
        follow = [c for c in commands if c.startswith("curl -N")]
        commands = [c for c in commands if not c.startswith("curl -N")]
        assert len(commands) == 5 and len(follow) == 1, commands
        # the README's live follower, in the background while the walkthrough runs
        follower = subprocess.Popen(
            ["bash", "-c", "exec timeout 30 " + follow[0].replace("localhost:8080", f"localhost:{port}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        time.sleep(1)
        values: dict[str, str] = {}
        answers = []
        for command in commands:
            command = command.replace("localhost:8080", f"localhost:{port}")
            for name, value in values.items():
                command = command.replace(name, value)
            out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=True)
            view = json.loads(out.stdout)
            answers.append(view)
            if view.get("pending"):
                values["TOKEN"] = view["pending"][0]["continuation_token"]
            if view.get("agent") == "weather":
                values["SESSION"] = view["session_id"]

        first, result, more, shell, shell_done = answers
        assert first["status"] == "waiting_external" and first["pending"][0]["tool"] == "get_weather"
        assert result["status"] == "idle" and result["pending"] == []
        text = result["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
        assert text == "The weather in Paris: sunny, 24°C."
        assert more["status"] == "idle"
        assert shell["status"] == "waiting_external"
        states = [t["tcState"] for t in shell["session"]["turns"][0]["contents"]["trackedCalls"]]
        assert states == ["Completed", "Completed", "Deferred"]
        assert shell_done["status"] == "idle"
        assert re.search(
            r"The human said: yes", shell_done["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
        )
        follower.terminate()
        followed = follower.communicate(timeout=30)[0]
        assert "event: session.created" in followed and "event: run.stopped" in followed
    finally:
        demo.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


#: Starts the demo with SIGINT and SIGHUP at their defaults, as from a terminal: a test run started
#: in the background or under nohup ignores them, and a shell cannot trap a signal ignored on entry.
WITH_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for signum in (signal.SIGINT, signal.SIGHUP):\n"
    "    signal.signal(signum, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_demo_stops_everything_it_started(tmp_path: Path, signum: signal.Signals) -> None:
    port, llm_port = free_port(), free_port()
    demo = Process(
        [sys.executable, "-c", WITH_DEFAULT_SIGNALS, str(ROOT / "scripts" / "demo")],
        base_env(AGENTS_PORT=str(port), MOCK_LLM_PORT=str(llm_port), DEMO_DB=str(tmp_path / "demo.db")),
        tmp_path / "demo.log",
    )
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout=300, interval=0.2)
        # the script alone is signalled, as `kill -TERM <pid>` does: not its process group
        demo.proc.send_signal(signum)
        assert demo.proc.wait(30) == 128 + signum
        wait_until(lambda: not _group_alive(demo.proc.pid), timeout=30)
        for taken in (port, llm_port):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", taken))
    finally:
        demo.stop()


def test_the_demo_stops_when_its_model_cannot_start(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        llm_port = taken.getsockname()[1]
        demo = Process(
            [str(ROOT / "scripts" / "demo")],
            base_env(AGENTS_PORT=str(port), MOCK_LLM_PORT=str(llm_port), DEMO_DB=str(tmp_path / "demo.db")),
            tmp_path / "demo.log",
        )
        try:
            assert demo.proc.wait(300) != 0
            assert "demo: the scripted model stopped" in demo.output()
            wait_until(lambda: not _group_alive(demo.proc.pid), timeout=30)
        finally:
            demo.stop()
