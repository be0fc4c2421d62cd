"""Step overhead: the product's own time for one step, at 0, 100 and 1,000 turns of history.

    .venv/bin/python bench/steps.py [--sizes 0,100,1000] [--samples 30] [--rounds 3] [--db sqlite|postgres]
                                    [--json out.json]

What is measured: one run of one step (the ``bench`` agent, no tools: the model answers at once)
on a session that already holds H turns, from the client's request to its answer, minus the
time the model took:

- **wall**: ``POST /v1/sessions/{id}/messages?wait=true`` with a new user message, timed by the
  client until the whole answer (the SessionView, which holds every turn) is read. At H = 0 it is
  ``POST /v1/sessions?wait=true`` (a new session: no history).
- **model**: the time the scripted model (``bench/mockserver.py``, a process of its own) spent on
  that run's one chat completion, timed on its side from reading the request line to writing the
  answer (it parses the H messages it is sent, so it grows a little with H too). Each run makes
  exactly one call, so the timings pair with the runs one to one.
- **orchestration = wall - model**: everything the product does around the model: the HTTP
  request, storing the user turn, handing the run to the worker, claiming it, building the
  model's request from the history, the SDK call's own overhead, storing the answer and its
  events, waking the waiting request and rendering the session. The table prints its p50 (and
  p95) per history size, and the ratio of the largest size's p50 to the smallest's: how the
  overhead grows with history.
- **CPU ms/step**: CPU seconds of the server process (psutil) per run, over the samples; with
  the ratio of its largest size to its smallest, a figure the machine's other load hardly
  moves, where the wall time grows with it.
- **answer KiB**: the size of the answer's body (the whole session is sent back).

The histories are built first, fast, through the API itself: one session per size, each run
adds two turns (the user's and the model's), so 1,000 turns are 500 runs. Each sample adds two
more turns, so a size's session is built to ``samples`` turns below it and its samples run on
histories from about H - samples to H + samples (the table shows their mean). Samples are taken
in ``--rounds`` rounds, the sizes alternating, so that the machine's other load falls on all
sizes alike.

The server is the embedded default (one ``agents serve``, SQLite, in-process worker), or with
``--db postgres`` the same single process on a fresh PostgreSQL database.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import Processes, fmt, loadavg, markdown_table, percentile, phase, tree_cpu  # noqa: E402


@dataclass
class Size:
    """The samples taken at one history size."""

    turns: int
    session_id: str | None = None
    walls: list[float] = field(default_factory=list)
    models: list[float] = field(default_factory=list)
    histories: list[int] = field(default_factory=list)
    answer_bytes: list[int] = field(default_factory=list)
    cpu: float = 0.0
    loads: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        orchestration = [w - m for w, m in zip(self.walls, self.models, strict=True)]
        count = len(self.walls)
        return {
            "turns": self.turns,
            "samples": count,
            "mean_history": sum(self.histories) / count if count else float("nan"),
            "wall_p50_ms": percentile(self.walls, 0.5) * 1000,
            "model_p50_ms": percentile(self.models, 0.5) * 1000,
            "orchestration_p50_ms": percentile(orchestration, 0.5) * 1000,
            "orchestration_p95_ms": percentile(orchestration, 0.95) * 1000,
            "cpu_ms_per_step": self.cpu * 1000 / count if count else float("nan"),
            "answer_kib": sum(self.answer_bytes) / count / 1024 if count else float("nan"),
            "load1": sum(self.loads) / len(self.loads) if self.loads else float("nan"),
        }


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST and check that the run finished."""
    answer = client.post(path, content=json.dumps(body))
    if answer.status_code not in (200, 201) or answer.json().get("status") != "idle":
        raise RuntimeError(f"POST {path}: HTTP {answer.status_code}: {answer.text[:300]}")
    return answer


def build(client: httpx.Client, turns: int) -> str:
    """A session holding ``turns`` turns (rounded up to even), built by real runs."""
    view = post(client, "/v1/sessions?wait=true&timeout=600", {"agent": "bench", "prompt": "start"}).json()
    session_id = str(view["session_id"])
    for index in range(max(0, turns // 2 - 1)):
        post(client, f"/v1/sessions/{session_id}/messages?wait=true&timeout=600", {"prompt": f"message {index}"})
    return session_id


def sample(client: httpx.Client, size: Size, mock: common.Mock, server_pid: int) -> None:
    """One run at ``size``: its wall time, the model's time, the history it ran on."""
    mock.timings()  # forget anything earlier
    before = tree_cpu([server_pid])
    started = time.perf_counter()
    if size.session_id is None:
        answer = post(client, "/v1/sessions?wait=true&timeout=600", {"agent": "bench", "prompt": "hi"})
    else:
        path = f"/v1/sessions/{size.session_id}/messages?wait=true&timeout=600"
        answer = post(client, path, {"prompt": "one more"})
    wall = time.perf_counter() - started
    size.cpu += tree_cpu([server_pid]) - before
    timings = mock.timings()
    if len(timings) != 1:
        raise RuntimeError(f"expected one model call for the run, the model saw {len(timings)}")
    size.walls.append(wall)
    size.models.append(timings[0])
    size.histories.append(len(answer.json()["session"]["turns"]) - 2)
    size.answer_bytes.append(len(answer.content))


def main() -> int:
    """Build the histories, take the samples in rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,100,1000", help="turns of history, comma-separated")
    parser.add_argument("--samples", type=int, default=30, help="runs measured per size")
    parser.add_argument("--rounds", type=int, default=3, help="the samples are taken in this many rounds")
    parser.add_argument("--warmup", type=int, default=5, help="runs before measuring, not counted")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    sizes = [Size(int(s)) for s in args.sizes.split(",")]
    with Processes(keep=args.keep) as procs:
        mock = common.start_mock(procs)
        agent_files = common.write_agents(procs.workdir, mock.url)
        with phase(f"starting agents serve ({args.db})"):
            database = common.create_database(procs, "agents_steps") if args.db == "postgres" else None
            product = common.start_embedded(procs, agent_files, "steps", db=database)
            url, server_pid = product.url, product.pids()[0]
        with httpx.Client(base_url=url, timeout=600) as client:
            for _ in range(args.warmup):
                post(client, "/v1/sessions?wait=true", {"agent": "bench", "prompt": "warm-up"})
            for size in sizes:
                if size.turns > 0:
                    # each sample adds two turns: start below the size so that the samples centre on it
                    start = max(2, size.turns - args.samples)
                    with phase(f"building a session of {start} turns ({start // 2} runs)"):
                        size.session_id = build(client, start)
            for round_index, chunk in enumerate(common.split(args.samples, args.rounds)):
                for size in sizes:
                    with phase(f"round {round_index + 1}: {chunk} samples at {size.turns} turns"):
                        size.loads.append(loadavg()[0])
                        for _ in range(chunk):
                            sample(client, size, mock, server_pid)
    summaries = [s.summary() for s in sizes]
    headers = ["history (turns)", "samples", "mean history", "wall p50 ms", "model p50 ms"]
    headers += ["orchestration p50 ms", "orchestration p95 ms", "CPU ms/step", "answer KiB", "load"]
    rows = [
        [
            str(s["turns"]), str(s["samples"]), fmt(s["mean_history"], 0), fmt(s["wall_p50_ms"]),
            fmt(s["model_p50_ms"], 2), fmt(s["orchestration_p50_ms"]), fmt(s["orchestration_p95_ms"]),
            fmt(s["cpu_ms_per_step"]), fmt(s["answer_kib"]), fmt(s["load1"], 2),
        ]
        for s in summaries
    ]  # fmt: skip
    print(f"\n## Step overhead ({args.db}, {args.samples} samples per size; 2-core machine)\n")
    print(markdown_table(headers, rows))
    first, last = summaries[0], summaries[-1]
    ratio = last["orchestration_p50_ms"] / first["orchestration_p50_ms"]
    print(f"\norchestration p50 at {last['turns']} turns / at {first['turns']} turns: {ratio:.2f}")
    cpu_ratio = last["cpu_ms_per_step"] / first["cpu_ms_per_step"]
    # the CPU per step hardly moves with the machine's other load; the wall time does
    print(f"CPU per step at {last['turns']} turns / at {first['turns']} turns: {cpu_ratio:.2f}")
    print(f"load average at the end: {loadavg()}")
    common.write_json(
        args.json,
        {
            "benchmark": "steps",
            "options": vars(args),
            "results": summaries,
            "ratio_last_first": ratio,
            "cpu_ratio_last_first": cpu_ratio,
        },
    )
    return 0


if __name__ == "__main__":
    common.run_main(main)
