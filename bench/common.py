"""What the benchmarks share: child processes that always stop, the scripted model, agents and
tools, CPU accounting with psutil, percentiles, the markdown table and the JSON file.

Every process a benchmark starts goes through :class:`Processes`: it runs in a process group
of its own (so a server's children go with it), gets SIGTERM when the benchmark dies
(``PR_SET_PDEATHSIG``), and is stopped (SIGTERM to the group, then SIGKILL) when the ``with``
block ends, on an error, on Ctrl-C and on SIGTERM alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
#: Where the peers' virtual environments live (gitignored).
PEERS_DIR = BENCH.parent / ".bench-peers"
POSTGRES_URL = os.environ.get(
    "BENCH_POSTGRES_URL", os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")
SECRET_KEY = "agents-server-benchmarks"


def ensure_psutil() -> Any:
    """Import psutil, installing it (the ``bench`` extra of pyproject.toml) into this interpreter's
    environment first when it is missing, so that the scripts run from a fresh clone."""
    try:
        import psutil
    except ImportError:
        print("installing psutil (the bench extra) ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "psutil>=5.9"], check=True)
        import psutil
    return psutil


psutil = ensure_psutil()


# -- small things ---------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def loadavg() -> tuple[float, float, float]:
    """The machine's 1, 5 and 15 minute load averages."""
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for the table: ``-`` when missing or NaN."""
    if value is None or value != value:
        return "-"
    return f"{value:.{digits}f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, columns padded to their widest cell."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    lines = ["| " + " | ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


#: Where a run's figures go when ``--json`` names no file (gitignored).
RESULTS_DIR = ROOT / "bench" / "results"


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    """Write ``payload`` (plus the machine's description) to ``path``, or without one to
    ``bench/results/<benchmark>-<time>.json``: every run leaves a file that ``bench/compare.py``
    compares with another."""
    if not path:
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = str(RESULTS_DIR / f"{payload.get('benchmark', 'bench')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    payload = {"machine": machine(), **payload}
    Path(path).write_text(json.dumps(payload, indent=2, default=str))
    print(f"wrote {path}", file=sys.stderr)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "loadavg_at_end": loadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def wait_http(url: str, timeout: float = 60.0, proc: Proc | None = None) -> None:
    """Wait until ``GET url`` answers 200.

    Raises:
        RuntimeError: the process exited, or no 200 within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}: {proc.tail()}")
        try:
            answer = httpx.get(url, timeout=5)
            if answer.status_code == 200:
                return
            last = f"HTTP {answer.status_code}"
        except httpx.HTTPError as error:
            last = repr(error)
        time.sleep(0.1)
    tail = proc.tail() if proc is not None else ""
    raise RuntimeError(f"no 200 from {url} within {timeout:.0f} s ({last}) {tail}")


# -- processes ------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the benchmark process dies (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Proc:
    """A child process in a process group of its own, its output in a log file."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path = ROOT) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            list(argv),
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last lines the process wrote."""
        with contextlib.suppress(OSError):
            self._log.flush()
            text = self.log_path.read_text(errors="replace").strip().splitlines()
            return "\n".join(text[-lines:])
        return ""

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group; SIGKILL it when still there after ``timeout`` seconds."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait()
        # what the group left behind (a tool's child, a server's worker process)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self._log.close()


class Processes(contextlib.ExitStack):
    """A ``with`` block owning child processes and clean-up callbacks, undone in reverse order.

    SIGTERM is turned into KeyboardInterrupt while it is open, so ``kill <benchmark>`` stops
    everything the same way Ctrl-C does.
    """

    def __init__(self, workdir: Path | None = None, keep: bool = False) -> None:
        super().__init__()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="agents-bench-"))
        self.keep = keep
        self.procs: list[Proc] = []

    def __enter__(self) -> Processes:
        super().__enter__()

        def interrupt(*_: object) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, interrupt)
        self.callback(signal.signal, signal.SIGTERM, previous)
        if not self.keep:
            import shutil

            self.callback(shutil.rmtree, self.workdir, True)
        return self

    def start(self, name: str, argv: Sequence[str], env: dict[str, str], cwd: Path = ROOT) -> Proc:
        """Start ``argv`` now; it is stopped when the block ends."""
        proc = Proc(name, argv, env, self.workdir / f"{name}-{uuid.uuid4().hex[:6]}.log", cwd)
        self.procs.append(proc)
        self.callback(proc.stop)
        return proc


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the settings a developer may have exported, plus ``extra``."""
    prefixes = ("AGENTS_", "DATABASE_URL", "REDIS_URL", "DJANGO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


# -- the scripted model, agents and tools -----------------------------------------------------------

#: The benchmarks' tiny bash tool: the model calls ``bash_hello`` once, then answers.
TOOL_NAME = "bash_hello"

#: The script every benchmark uses: with the tool on offer and a user message last, call the tool;
#: after a tool result, answer with it; otherwise answer at once.
SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "when": {"last_role": "user", "has_tool": TOOL_NAME},
            "reply": {"tool_calls": [{"name": TOOL_NAME, "arguments": {}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "the tool said {last_content}"}},
        {"reply": {"content": "hello from the scripted model"}},
    ]
}


@dataclass
class Mock:
    """The scripted model's process (``bench/mockserver.py``)."""

    proc: Proc
    url: str  # the ``modelUrl``, ending in /v1
    base: str = field(init=False)

    def __post_init__(self) -> None:
        self.base = self.url.removesuffix("/v1")

    def timings(self) -> list[float]:
        """The model-side seconds of every chat completion since the last call (and forget them)."""
        return list(httpx.get(f"{self.base}/_bench/timings", timeout=30).json()["seconds"])


def start_mock(procs: Processes, script: dict[str, Any] | None = None) -> Mock:
    """Start the scripted model in a process of its own and wait until it answers."""
    script_path = procs.workdir / f"script-{uuid.uuid4().hex[:6]}.json"
    script_path.write_text(json.dumps(script or SCRIPT))
    port = free_port()
    argv = [sys.executable, str(BENCH / "mockserver.py"), "--script", str(script_path), "--port", str(port)]
    proc = procs.start("mock-llm", argv, clean_env())
    mock = Mock(proc, f"http://127.0.0.1:{port}/v1")
    wait_http(f"{mock.base}/_bench/ping", 30, proc)
    return mock


def write_tool(directory: Path) -> Path:
    """The bash tool ``hello`` (protocol v1, no arguments): ``run`` prints one line."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "hello"
    describe = {"slug": "hello", "description": "says hello", "args": []}
    path.write_text(
        "#!/usr/bin/env bash\n"
        f"if [ \"${{1:-}}\" = describe ]; then echo '{json.dumps(describe)}'; exit 0; fi\n"
        "echo hello from bash\n"
    )
    path.chmod(0o755)
    return path


def write_agents(directory: Path, model_url: str) -> list[Path]:
    """Agent files ``bench`` (no tools) and ``bench-tool`` (the ``hello`` bash tool) in ``directory``."""
    write_tool(directory / "tools")
    paths = []
    for slug, extra in (("bench", {}), ("bench-tool", {"toolDirectory": "tools"})):
        contents = {
            "slug": slug,
            "apiKeyId": "none",
            "flavor": "OpenAIv1",
            "modelUrl": model_url,
            "modelName": "scripted",
            "announce": f"the {slug} benchmark agent",
            "systemPrompt": ["You are a benchmark."],
            **extra,
        }
        path = directory / f"{slug}.json"
        path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}))
        paths.append(path)
    return paths


# -- the product's processes --------------------------------------------------------------------------


@dataclass
class Product:
    """One topology of this product: its servers and workers, and where to reach it."""

    url: str
    procs: list[Proc]
    db: str

    def pids(self) -> list[int]:
        """The root processes of the system under test."""
        return [p.pid for p in self.procs]


def agents_argv(command: str, agent_files: Sequence[Path], db: str, *extra: str) -> list[str]:
    """``agents <command>`` run by this interpreter (so that this checkout's code runs)."""
    argv = [sys.executable, "-m", "agentsite.cli", command, "--db", db]
    for path in agent_files:
        argv += ["--agent-file", str(path)]
    return argv + list(extra)


def start_embedded(
    procs: Processes,
    agent_files: Sequence[Path],
    name: str = "embedded",
    db: str | None = None,
    extra: Sequence[str] = (),
    **env: str,
) -> Product:
    """One ``agents serve`` with its in-process worker, on a fresh SQLite file unless ``db`` names a
    PostgreSQL database (see :func:`create_database`)."""
    port = free_port()
    if db is None:
        db = str(procs.workdir / f"{name}-{uuid.uuid4().hex[:6]}.db")
    elif db.startswith("postgres"):
        env = {"DJANGO_SECRET_KEY": SECRET_KEY, **env}
    argv = agents_argv("serve", agent_files, db, "--port", str(port), *extra)
    proc = procs.start(name, argv, clean_env(AGENTS_DATA_DIR=str(procs.workdir), **env), cwd=procs.workdir)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", 120, proc)
    return Product(url, [proc], db)


def create_database(procs: Processes, prefix: str) -> str:
    """A fresh PostgreSQL database, dropped when the block ends; returns its URL."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with contextlib.suppress(Exception), psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    procs.callback(drop)
    return f"{POSTGRES_URL.rsplit('/', 1)[0]}/{name}"


def claim_redis_db(procs: Processes) -> str:
    """A Redis database of its own among 1-15, taken as the tests take theirs (a lock key
    ``agents-tests:db:<n>`` in database 0, set if absent, expiring, renewed here while the block
    lasts), emptied before use and at the end, when the lock is given back.

    Every scaled system takes one: two systems on one database would take each other's runs
    and fleet key. A database number in ``BENCH_REDIS_URL`` is therefore not used; its server is.
    """
    import redis

    base = REDIS_URL.rstrip("/")
    if base.count("/") > 2:
        base, number = base.rsplit("/", 1)
        print(f"BENCH_REDIS_URL: database {number} ignored, each system takes a database of its own", file=sys.stderr)
    locks = redis.Redis.from_url(f"{base}/0")
    owner = f"bench-{uuid.uuid4().hex}"
    deadline = time.monotonic() + 120
    while True:
        number = next((n for n in range(15, 0, -1) if locks.set(f"agents-tests:db:{n}", owner, nx=True, ex=900)), None)
        if number is not None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("no free Redis database among 1-15 (all locked by test runs)")
        time.sleep(0.5)
    key, url = f"agents-tests:db:{number}", f"{base}/{number}"
    redis.Redis.from_url(url).flushdb()
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(60):
            with contextlib.suppress(redis.RedisError):
                if locks.get(key) == owner.encode():
                    locks.expire(key, 900)

    threading.Thread(target=renew, name="redis-lock", daemon=True).start()

    def release() -> None:
        stop.set()
        with contextlib.suppress(redis.RedisError):
            redis.Redis.from_url(url).flushdb()
            if locks.get(key) == owner.encode():
                locks.delete(key)

    procs.callback(release)
    return url


def start_scaled(
    procs: Processes, agent_files: Sequence[Path], workers: int, name: str = "scaled", extra: Sequence[str] = ()
) -> Product:
    """PostgreSQL and Redis, one ``agents serve`` and ``workers`` ``agents worker`` processes
    (``extra`` flags go to all of them)."""
    db = create_database(procs, "agents_bench")
    redis_url = claim_redis_db(procs)
    env = clean_env(DJANGO_SECRET_KEY=SECRET_KEY, REDIS_URL=redis_url)
    port = free_port()
    server = procs.start(f"{name}-serve", agents_argv("serve", agent_files, db, "--port", str(port), *extra), env)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/healthz", 120, server)
    started = [server]
    for index in range(workers):
        flags = ["--hostname", f"bench{index}-{uuid.uuid4().hex[:4]}@%h"]
        if index == 0:
            flags.append("--beat")
        started.append(
            procs.start(f"{name}-worker{index}", agents_argv("worker", agent_files, db, *flags, *extra), env)
        )
    return Product(url, started, db)


# -- CPU ------------------------------------------------------------------------------------------------


def tree_cpu(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by the processes ``pids``, every descendant still
    running, and every descendant already reaped (psutil's ``children_user``/``children_system``:
    a bash tool's process, once waited for, counts in its parent's)."""
    seen: set[int] = set()
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            family = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
    return total


def service_pids() -> list[int]:
    """The PostgreSQL postmaster and the Redis server on this machine (shared: other work using them
    counts too), for the ``services CPU`` figure."""
    found = []
    for proc in psutil.process_iter(["name", "ppid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            name = proc.info["name"] or ""
            cmd = " ".join(proc.info["cmdline"] or [])
            if (name == "postgres" or cmd.endswith("/postgres") or "bin/postgres " in cmd) and proc.info["ppid"] == 1:
                found.append(proc.pid)
            elif name.startswith("redis-server"):
                found.append(proc.pid)
    return found


def pg_sessions(database_url: str) -> int | None:
    """Connections ever opened to the PostgreSQL database of ``database_url`` (``pg_stat_database``;
    the statistics reach it within a second or so), or None for another database."""
    if not database_url.startswith("postgres"):
        return None
    import psycopg

    name = database_url.rsplit("/", 1)[1]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", [name]).fetchone()
    return int(row[0]) if row else None


def own_cpu() -> float:
    """CPU seconds this process (the load generator) used so far."""
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MiB."""
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


def split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal positive chunks (fewer when ``total`` is smaller)."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_main(main: Callable[[], int]) -> None:
    """Run a benchmark's ``main``; Ctrl-C ends it with status 130 after everything was stopped."""
    try:
        code = main()
    except KeyboardInterrupt:
        print("\ninterrupted: everything started was stopped", file=sys.stderr)
        code = 130
    raise SystemExit(code)


@contextlib.contextmanager
def phase(label: str) -> Iterator[None]:
    """Print what is going on (on stderr, so that stdout keeps the tables)."""
    started = time.monotonic()
    print(f"[{time.strftime('%H:%M:%S')}] {label} ... (load {loadavg()[0]})", file=sys.stderr, flush=True)
    yield
    print(f"[{time.strftime('%H:%M:%S')}]   done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
