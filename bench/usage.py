"""What usage totals cost (see bench/README.md, "Usage: bench/usage.py").

Imports ``--sessions`` session files of ``--answers`` model answers each (every answer with its
provider usage, as agents-exe writes them) into one ``agents serve`` on SQLite, then times
``GET /v1/usage`` by agent, owner and day over all of them, and ``GET /v1/sessions/:id`` (whose
answer now adds up its document's usage) beside ``GET /v1/sessions/:id/export`` (the same
document, no totals). Prints the medians as a markdown table with the 1-minute load average.

    .venv/bin/python bench/usage.py [--sessions 200] [--answers 25] [--repeat 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    Processes,
    loadavg,
    markdown_table,
    phase,
    run_main,
    start_embedded,
    start_mock,
    write_agents,
    write_json,
)


def _document(answers: int) -> dict[str, Any]:
    """A session file of ``answers`` question-and-answer pairs, newest first."""
    turns: list[dict[str, Any]] = []
    for n in range(answers):
        usage = {"prompt_tokens": 1000 + n, "completion_tokens": 50 + n, "prompt_tokens_details": {"cached_tokens": n}}
        turns.append(
            {
                "tag": "UserTurn",
                "contents": {"userPrompt": "p", "userQuery": f"q{n}", "userToolResponses": [], "userTools": []},
            }
        )
        turns.append(
            {
                "tag": "LlmTurn",
                "contents": {
                    "llmResponse": {
                        "rawResponse": {"usage": usage},
                        "responseText": f"a{n}",
                        "responseThinking": None,
                        "responseTokenUsage": usage,
                    },
                    "llmToolCalls": [],
                },
            }
        )
    turns.reverse()
    return {"turns": turns, "sessionId": str(uuid.uuid4()), "forkedFromSessionId": None, "turnId": str(uuid.uuid4())}


def _median_ms(client: httpx.Client, path: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--answers", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    with Processes() as procs:
        mock = start_mock(procs)
        product = start_embedded(procs, write_agents(procs.workdir, mock.base))
        client = httpx.Client(base_url=product.url, timeout=120)
        last = ""
        with phase(f"importing {args.sessions} sessions of {args.answers} answers"):
            for _ in range(args.sessions):
                body = {"agent": "bench", "session": _document(args.answers)}
                answer = client.post("/v1/sessions/import", content=json.dumps(body))
                answer.raise_for_status()
                last = answer.json()["session_id"]
        rows = []
        with phase("timing"):
            for label, path in (
                ("GET /v1/usage (per agent)", "/v1/usage"),
                ("GET /v1/usage?group_by=owner", "/v1/usage?group_by=owner"),
                ("GET /v1/usage?group_by=day", "/v1/usage?group_by=day"),
                (f"GET /v1/sessions/:id ({2 * args.answers} turns, with usage)", f"/v1/sessions/{last}"),
                (f"GET /v1/sessions/:id/export ({2 * args.answers} turns)", f"/v1/sessions/{last}/export"),
            ):
                rows.append((label, _median_ms(client, path, args.repeat), loadavg()[0]))
        totals = client.get("/v1/usage").json()["totals"]
        assert totals["model_turns"] == args.sessions * args.answers, totals
    answers = args.sessions * args.answers
    print(f"\n{args.sessions} sessions, {answers} model answers with usage, SQLite, median of {args.repeat}\n")
    table = [(label, f"{ms:.1f}", f"{load:.2f}") for label, ms, load in rows]
    print(markdown_table(["request", "median ms", "load (1 min)"], table))
    write_json(
        args.json,
        {"sessions": args.sessions, "answers": args.answers, "rows": [list(r) for r in rows]},
    )
    return 0


if __name__ == "__main__":
    run_main(main)
