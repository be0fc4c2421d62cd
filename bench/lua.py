"""The cost of one Lua toolbox call (see bench/README.md, "Lua calls: bench/lua.py").

Times ``lua_<Name>_execute`` as the server runs it now (a fresh child process per call, killed
at its deadline) beside the design it replaced (a fresh Lua state in a thread of the server's
own process), for a trivial script, a loop and 100 library calls, beside the start of a bare interpreter
(the floor of any process per call), and prints the medians as a markdown table with the 1-minute load average.

    .venv/bin/python bench/lua.py [--calls 50] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

import lupa.lua54 as lua  # noqa: E402

from agentfiles.builtins import parse_builtin_toolboxes  # noqa: E402
from tools_app.base import ToolContext  # noqa: E402
from tools_app.builtin.lua import LuaTool  # noqa: E402
from tools_app.builtin.sandbox import FileSandbox  # noqa: E402

#: The scripts, and whether the replaced design runs them too (it had no library without its prelude).
SCRIPTS: dict[str, tuple[str, bool]] = {
    "return 1 + 1": ("return 1 + 1", True),
    "a loop of 10^6 additions": ("local s = 0 for i = 1, 1e6 do s = s + i end return s", True),
    "100 json.encode calls (now)": ("local s = '' for i = 1, 100 do s = json.encode({i}) end return s", False),
}


def the_tool() -> LuaTool:
    """A Lua toolbox with the defaults (256 MB, 300 s) and no file sandbox."""
    (box,), problems, _ = parse_builtin_toolboxes([{"tag": "LuaToolbox", "contents": {"Name": "bench"}}], None)
    assert not problems, problems
    return LuaTool(box, FileSandbox())


def in_process(script: str) -> None:
    """The replaced design's core cost: a fresh capped Lua state in a new thread, run and joined
    (without its prelude, which set up the library)."""

    def execute() -> None:
        runtime = lua.LuaRuntime(
            register_eval=False, register_builtins=False, unpack_returned_tuples=True, max_memory=256 * 1024 * 1024
        )
        runtime.execute(script)

    worker = threading.Thread(target=execute, daemon=True)
    worker.start()
    worker.join()


def median_ms(function: Any, calls: int) -> float:
    """The median wall-clock milliseconds of ``calls`` calls of ``function`` (after one warm-up)."""
    function()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        function()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="measured calls per script and design")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args()
    tool = the_tool()
    ctx = ToolContext("s", "c", "t", "bench", "call_1", timeout=None)
    rows = []
    for label, (script, compared) in SCRIPTS.items():
        print(f"measuring {label} ...", file=sys.stderr, flush=True)

        def child(script: str = script) -> None:
            result = tool.call({"script": script}, ctx)
            assert not result.is_error, result.response

        process_ms = median_ms(child, options.calls)
        thread_ms = median_ms(lambda script=script: in_process(script), options.calls) if compared else None
        rows.append({"script": label, "child_ms": process_ms, "thread_ms": thread_ms, "load": os.getloadavg()[0]})
    print("measuring the bare interpreter ...", file=sys.stderr, flush=True)
    bare = [sys.executable, "-I", "-S", "-c", "pass"]
    floor_ms = median_ms(lambda: subprocess.run(bare, env={}, check=True), options.calls)
    rows.append({"script": "python -I -S -c pass (the floor)", "child_ms": floor_ms, "thread_ms": None})
    rows[-1]["load"] = os.getloadavg()[0]
    print("| script | child process per call (now), ms | Lua state in a thread (before), ms | load (1 min) |")
    print("|---|---|---|---|")
    for row in rows:
        before = "-" if row["thread_ms"] is None else row["thread_ms"]
        print(f"| {row['script']} | {row['child_ms']} | {before} | {row['load']:.2f} |")
    if options.json:
        options.json.write_text(json.dumps({"calls": options.calls, "rows": rows, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
