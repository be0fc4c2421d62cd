"""prometheus-client's multiprocess mode (docs/observability.md §2.3): processes of one machine
sharing ``PROMETHEUS_MULTIPROC_DIR`` count into its files, and any exporter of the machine
answers with their sum."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.harness import ROOT, Processes, base_env

COUNT = """
import sys
from foundation import metrics
metrics.RUNS_STARTED.labels(agent="multi").inc(int(sys.argv[1]))
metrics.TOOL_SECONDS.labels(kind="bash").observe(0.2)
"""

EXPOSE = """
from foundation import metrics
body, content_type = metrics.exposition()
print(content_type)
print(body.decode())
"""


def _python(processes: Processes, code: str, env: dict[str, str], *args: str) -> str:
    done = processes.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def test_processes_sharing_a_directory_are_exported_as_one(tmp_path: Path, processes: Processes) -> None:
    env = base_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    _python(processes, COUNT, env, "2")
    _python(processes, COUNT, env, "3")
    exported = _python(processes, EXPOSE, env)
    assert exported.startswith("text/plain")
    assert 'agents_runs_started_total{agent="multi"} 5.0' in exported
    assert 'agents_tool_call_seconds_count{kind="bash"} 2.0' in exported


def test_without_the_directory_a_process_exports_its_own_counts(tmp_path: Path, processes: Processes) -> None:
    env = base_env()
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    exported = _python(processes, COUNT + EXPOSE, env, "4")
    assert 'agents_runs_started_total{agent="multi"} 4.0' in exported
    assert not list(tmp_path.iterdir())
