"""Profile: where the product's processes spend their time under load, sampled with py-spy.

    .venv/bin/python bench/profile.py [--topology embedded|scaled] [--variant plain|tool] [--clients 8]
                                      [--seconds 20] [--rate 200] [--mode cpu|wall] [--out DIR]

It starts the scripted model and the product (``embedded``: one ``agents serve``; ``scaled``:
PostgreSQL, Redis, one ``agents serve`` and one ``agents worker``), keeps ``--clients`` clients
running sessions as ``bench/runs.py`` does, and meanwhile records every process of the product with
``py-spy record --threads --rate RATE --format raw --full-filenames --duration SECONDS`` (a sample
of the threads' Python stacks RATE times a second).

``--mode cpu`` (the default) adds ``--gil``: only the thread holding the GIL is sampled, which is
the CPU spent running Python; C code that releases the GIL (SQLite's and PostgreSQL's drivers
inside a query, SSL) is missed. ``--mode wall`` samples every thread py-spy does not take for
idle; on this machine its idle detection lets most waits through (a thread in
``Condition.wait``, or waiting for SQLite's write lock inside ``cursor.execute``, counts as
busy), so read it as "where the threads are", which shows where runs wait, not what burns CPU.

The raw files (``<process>.txt``, one line per distinct stack: ``thread (id): name;frame;... count``)
are kept in ``--out`` and summarised:

- **by thread**: the samples of each thread name (numbers and session ids taken out): the
  server's ``MainThread`` is daphne's Twisted reactor and asyncio loop (HTTP, SSE, websockets),
  ``ThreadPoolExecutor`` are asgiref's threads running Django's sync views and the embedded
  worker's Celery pool, ``lease`` the runs' lease heartbeats, ``llm-request`` the model calls;
- **self, by package** and **self, by line**: where the innermost frame was (a library, the
  standard library, a module of this project): what burns the CPU;
- **inclusive, this project's functions**: the samples whose stack goes through each function of
  agentsite/, agents_app/, sessions_app/ or tools_app/: what the product's code costs, callees
  included.

The same raw file opens in speedscope (``https://www.speedscope.app``) or turns into a flame
graph with ``flamegraph.pl``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import Processes, loadavg, markdown_table, phase  # noqa: E402
from bench.runs import drive, product_run  # noqa: E402

PROJECT_PACKAGES = ("foundation", "agentfiles", "agentsite", "agents_app", "sessions_app", "tools_app", "devtools")
NUMBERED = re.compile(r"[-_]?(\d+(_\d+)?|[0-9a-f]{8}-[0-9a-f-]*)(?= |$)")
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


def py_spy() -> str:
    """The py-spy executable beside this interpreter, installed (the ``bench`` extra) if missing."""
    path = Path(sys.executable).parent / "py-spy"
    if not path.exists():
        print("installing py-spy (the bench extra) ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy>=0.3"], check=True)
    return str(path)


def package_of(file: str) -> str:
    """A frame's file as a package name: ``django``, ``sqlite3`` (stdlib), ``sessions_app``..."""
    parts = Path(file).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].removesuffix(".py")
    for package in PROJECT_PACKAGES:
        if package in parts:
            return package
    if "lib" in parts and any(p.startswith("python3") for p in parts):
        index = max(i for i, p in enumerate(parts) if p.startswith("python3"))
        rest = parts[index + 1 :]
        return f"stdlib:{rest[0].removesuffix('.py')}" if rest else "stdlib"
    return file if file.startswith("<") else Path(file).name


def short_path(file: str) -> str:
    """A frame's file without the interpreter's or the checkout's prefix."""
    parts = Path(file).parts
    for marker in ("site-packages", "lib"):
        if marker in parts:
            index = len(parts) - 1 - parts[::-1].index(marker)
            rest = parts[index + 1 :]
            if marker == "lib" and rest and rest[0].startswith("python3"):
                rest = rest[1:]
            return "/".join(rest)
    for package in PROJECT_PACKAGES:
        if package in parts:
            return "/".join(parts[parts.index(package) :])
    return file


def summarise(raw_files: list[Path], top: int) -> str:
    """The three tables of the docstring, for every raw file together."""
    threads: Counter[str] = Counter()
    self_packages: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for raw in raw_files:
        for line in raw.read_text(errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            total += count
            frames = stack.split(";")
            thread = re.sub(r"^thread \(\w+\): ", "", frames[0]) if frames[0].startswith("thread") else "?"
            # numbered pool threads (ThreadPoolExecutor-0_3) count as one name
            threads[f"{raw.stem}: {NUMBERED.sub('', thread) or thread}"] += count
            parsed = [m for m in (FRAME.match(f) for f in frames[1:]) if m]
            if parsed:
                leaf = parsed[-1]
                self_packages[package_of(leaf["file"])] += count
                leaves[f"{short_path(leaf['file'])}:{leaf['line']} {leaf['function']}"] += count
            seen = set()
            for match in parsed:
                if package_of(match["file"]) in PROJECT_PACKAGES:
                    path = Path(match["file"])
                    name = f"{path.parent.name}/{path.name}:{match['function']}"
                    if name not in seen:
                        seen.add(name)
                        inclusive[name] += count
    if not total:
        return "(no samples: was the process busy? is py-spy allowed to attach?)"

    def table(title: str, counter: Counter[str]) -> str:
        rows = [[name, str(n), f"{n * 100 / total:.1f}"] for name, n in counter.most_common(top)]
        return markdown_table([title, "samples", "% of all"], rows)

    return "\n\n".join(
        [
            f"{total} samples of busy threads",
            table("thread (process: name)", threads),
            table("self: package of the innermost frame", self_packages),
            table("self: innermost line", leaves),
            table("inclusive: this project's function", inclusive),
        ]
    )


def main() -> int:
    """Start the product, drive it, record it with py-spy, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", choices=["embedded", "scaled"], default="embedded")
    parser.add_argument("--variant", choices=["plain", "tool"], default="plain")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=20, help="how long py-spy records")
    parser.add_argument("--rate", type=int, default=200, help="samples per second")
    parser.add_argument(
        "--mode",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu: only threads holding the GIL (py-spy --gil); wall: every thread py-spy does not see as idle",
    )
    parser.add_argument("--top", type=int, default=25, help="rows per table")
    parser.add_argument("--out", default=str(common.BENCH / ".profile"), help="where the raw files go")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    spy = py_spy()
    with Processes() as procs:
        mock = common.start_mock(procs)
        agent_files = common.write_agents(procs.workdir, mock.url)
        with phase(f"starting the product ({args.topology})"):
            if args.topology == "scaled":
                product = common.start_scaled(procs, agent_files, 1)
            else:
                product = common.start_embedded(procs, agent_files)
        asyncio.run(drive(product.url, product_run, args.variant, args.clients, 20))
        stop = threading.Event()
        runs = [0]

        def load() -> None:
            while not stop.is_set():
                latencies, _ = asyncio.run(
                    drive(product.url, product_run, args.variant, args.clients, args.clients * 4)
                )
                runs[0] += len(latencies)

        driver = threading.Thread(target=load, daemon=True)
        driver.start()
        time.sleep(1)
        raws = []
        recorders = []
        with phase(f"py-spy on {len(product.procs)} process(es) for {args.seconds} s"):
            for proc in product.procs:
                raw = out / f"{proc.name}.txt"
                raws.append(raw)
                argv = [spy, "record", "-p", str(proc.pid), "--threads", "--rate", str(args.rate)]
                argv += ["--format", "raw", "--duration", str(args.seconds), "--output", str(raw)]
                argv += ["--full-filenames", *(["--gil"] if args.mode == "cpu" else [])]
                recorders.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            for recorder in recorders:
                _, err = recorder.communicate(timeout=args.seconds + 60)
                if recorder.returncode != 0:
                    print(f"py-spy failed: {err.strip()[-500:]}", file=sys.stderr)
        stop.set()
        driver.join(120)
    print(
        f"\n## Profile: {args.topology}, {args.variant}, {args.clients} clients,"
        f" {args.seconds} s at {args.rate} Hz, {args.mode}\n"
    )
    print(f"{runs[0]} runs completed meanwhile; load average {loadavg()}; raw stacks in {out}\n")
    print(summarise([r for r in raws if r.exists()], args.top))
    return 0


if __name__ == "__main__":
    common.run_main(main)
