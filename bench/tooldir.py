"""The cost of following a live ``toolDirectory`` (docs/tools.md §3.9; bench/README.md).

Times one look at a directory of 10 and 100 unchanged scripts (a listing and a ``stat`` per file,
no ``describe``: what a step pays at most once a second) and one look after one script changed
(that script described again), and prints the medians as a markdown table with the 1-minute load
average.

    .venv/bin/python bench/tooldir.py [--looks 50] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools_app.bash.live import LiveBashDirectory  # noqa: E402

TOOL = """#!/bin/sh
if [ "$1" = describe ]; then
  echo '{"slug": "t%d", "description": "tool %d", "args": []}'
  exit 0
fi
echo ran
"""


class Clock:
    """A clock moved past the interval before each look, so every snapshot looks."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _directory(root: Path, count: int) -> Path:
    directory = root / f"tools-{count}"
    directory.mkdir()
    for index in range(count):
        path = directory / f"t{index}"
        path.write_text(TOOL % (index, index))
        path.chmod(0o755)
    return directory


def measure(directory: Path, looks: int, *, change: bool) -> float:
    """The median milliseconds of one look (``change``: after rewriting one script each time)."""
    clock = Clock()
    box = LiveBashDirectory(directory, "toolDirectory", "bench", interval=1.0, clock=clock)
    box.load()
    times = []
    for look in range(looks):
        if change:
            os.utime(directory / "t0", ns=(look * 1000, look * 1000))
        clock.now += 1.0
        started = time.perf_counter()
        box.snapshot()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--looks", type=int, default=50, help="measured looks per row")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for count in (10, 100):
            directory = _directory(Path(root), count)
            for change in (False, True):
                print(f"measuring {count} scripts, change={change} ...", file=sys.stderr, flush=True)
                rows.append({"scripts": count, "one_changed": change,
                             "ms": measure(directory, options.looks, change=change), "load": os.getloadavg()[0]})
    print("| scripts | one changed | one look, ms (median) | load (1 min) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['scripts']} | {'yes' if row['one_changed'] else 'no'} | {row['ms']} | {row['load']:.2f} |")
    if options.json:
        options.json.write_text(json.dumps({"looks": options.looks, "rows": rows, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
