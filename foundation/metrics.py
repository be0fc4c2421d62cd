"""The Prometheus metrics of a process and their exposition (docs/observability.md §2).

Each process counts what it does itself (runs, steps, model and tool calls, tokens, leases taken
over) in prometheus-client's default registry. Two ways to read them, both documented:

- one exporter per process: ``/metrics`` of a server (for admin owners) or the listener that
  ``AGENTS_METRICS_PORT`` starts in a server or a worker; Prometheus scrapes every process and
  sums over them;
- ``PROMETHEUS_MULTIPROC_DIR`` set for every process of a host (prefork pools, several servers on
  one machine): prometheus-client then keeps the values in files there, and any exporter of the
  host answers for all of them; scrape one per host.

Gauges of shared state (deferred calls waiting, mail, leases, queue depth) are read from the
database and the broker at scrape time by the collectors given to :func:`exposition`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess as prometheus_multiprocess
from prometheus_client.registry import Collector

log = logging.getLogger("foundation.metrics")

#: Seconds: a step, a model call and a tool call take from milliseconds to minutes.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

RUNS_STARTED = Counter("agents_runs_started", "Runs claimed by a worker", ["agent"])
RUNS_FINISHED = Counter("agents_runs_finished", "Runs ended, by the status they stored", ["agent", "outcome"])
STEPS = Counter("agents_steps", "Steps stored, by what they did (model or tools)", ["agent", "kind"])
STEP_SECONDS = Histogram("agents_step_seconds", "Duration of a step", ["agent", "kind"], buckets=_BUCKETS)
MODEL_SECONDS = Histogram("agents_model_call_seconds", "Duration of a model call", ["agent"], buckets=_BUCKETS)
TOOL_CALLS = Counter("agents_tool_calls", "Tool calls by tool kind and outcome", ["kind", "outcome"])
TOOL_SECONDS = Histogram("agents_tool_call_seconds", "Duration of an inline tool call", ["kind"], buckets=_BUCKETS)
TOKENS = Counter("agents_tokens", "Tokens the model reported, by direction (input, output)", ["agent", "direction"])
EVENTS = Counter("agents_events_written", "Events written to the live streams", ["kind"])
EVENT_FANOUT_SECONDS = Histogram(
    "agents_event_fanout_seconds", "From an event's write to its hand-over to a live stream", buckets=_BUCKETS
)
LEASES_TAKEN_OVER = Counter("agents_leases_taken_over", "Runs claimed from a lease that had expired")


def multiprocess_dir() -> str | None:
    """The ``PROMETHEUS_MULTIPROC_DIR`` of this process, when multiprocess mode is on."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition(collectors: Iterable[Collector] = ()) -> tuple[bytes, str]:
    """The text exposition of this process's metrics (of the host's processes in multiprocess
    mode) with those of ``collectors`` added.

    Returns:
        ``(body, content_type)``.
    """
    registry = CollectorRegistry()
    if multiprocess_dir():
        prometheus_multiprocess.MultiProcessCollector(registry)
        sources: list[Any] = [registry]
    else:
        sources = [REGISTRY]
    for collector in collectors:
        registry.register(collector)
    if sources[0] is not registry:
        sources.append(registry)
    return b"".join(generate_latest(source) for source in sources), CONTENT_TYPE_LATEST


class _Everything(Collector):
    """This process's default registry (or the host's files) and the given collectors as one."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self.collectors = list(collectors)
        self.files = CollectorRegistry()
        if multiprocess_dir():
            prometheus_multiprocess.MultiProcessCollector(self.files)

    def collect(self) -> Iterable[Any]:
        """Every metric family of the sources, read now."""
        yield from (self.files if multiprocess_dir() else REGISTRY).collect()
        for collector in self.collectors:
            yield from collector.collect()


def listen(port: int, bind: str, collectors: Iterable[Collector] = ()) -> int:
    """Serve the exposition on ``bind``:``port`` (``0``: a port the kernel picks) in a thread,
    without authentication: the bind is the access rule (docs/observability.md §2.2).

    Returns:
        The port bound, also logged as ``metrics.listening``.
    Raises:
        OSError: the address cannot be bound.
    """
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Everything(collectors))
    server, _ = start_http_server(port, addr=bind, registry=registry)
    bound = int(server.server_port)
    log.info("metrics listening", extra={"kind": "metrics.listening", "port": bound, "bind": bind})
    return bound
