"""What a bash tool's call leaves behind: nothing in its process group outlives the call."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tools_app.bash.loading import load_single_tool

from .conftest import make_ctx, process_alive, read_pid, script, wait_gone


@pytest.fixture(scope="module")
def leaves_behind():
    return load_single_tool(script("leaves-behind.sh"))


@pytest.mark.parametrize("how", ["quiet", "stubborn", "holding"])
def test_background_children_end_with_the_call(leaves_behind, tmp_path, how):
    pidfile = tmp_path / "child.pid"
    started = time.monotonic()
    result = leaves_behind.call({"pidfile": str(pidfile), "how": how}, make_ctx(timeout=20))
    elapsed = time.monotonic() - started
    child = read_pid(pidfile)
    try:
        assert result.is_error is False and result.response == "done\n"
        assert elapsed < 3
        assert wait_gone(child), f"the {how} background child outlived the call"
    finally:
        if process_alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_that_leaves_the_group_on_purpose_keeps_running(leaves_behind, tmp_path):
    pidfile = tmp_path / "daemon.pid"
    result = leaves_behind.call({"pidfile": str(pidfile), "how": "setsid"}, make_ctx(timeout=20))
    daemon = read_pid(pidfile)
    try:
        assert result.is_error is False
        time.sleep(0.3)
        assert process_alive(daemon), "setsid is how a tool starts a daemon; it must survive"
        assert os.getsid(daemon) == daemon
    finally:
        if process_alive(daemon):
            os.kill(daemon, signal.SIGKILL)
