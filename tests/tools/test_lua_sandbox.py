"""The Lua toolbox's process boundary (docs/tools.md, "The Lua toolbox"): nothing a script reaches
leads to Python or the host, and every limit holds, through the OS, for every Lua construct."""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Processes
from tests.tools.conftest import make_ctx
from tests.tools.test_lua_toolbox import run, toolset, value

#: Walks from a Lua value to Python's object graph and on to ``os.system``, as lupa's bridge
#: allowed: ``{marker}`` is the file the walk tries to create.
CLASSIC = """
local function system_from(root)
  for cls in python.iter(root.__class__.__base__.__subclasses__()) do
    local ok, found = pcall(function() return cls.__init__.__globals__.system end)
    if ok and found then return found end
  end
end
system_from({start})('touch {marker}')
return 'escaped'
"""

ESCAPES = {
    "python.none": CLASSIC.replace("{start}", "python.none"),
    "python.eval": "python.eval(\"__import__('os').system('touch {marker}')\")",
    "python.builtins": "python.builtins.__import__('os').system('touch {marker}')",
    "python.as_attrgetter": CLASSIC.replace("{start}", "python.as_attrgetter(python.none)"),
    "python.iter's class": CLASSIC.replace("{start}", "python.iter({{}})"),
    "a library function's class": "return tools.call.__class__",
    "a library result's class": "local r = json.decode('{{\"a\": 1}}') return r.__class__.__base__.__subclasses__()",
    "a portal result": "local r = tools.list() return r.__class__.__mro__",
    "getmetatable of a library": "return getmetatable(json).__index.__globals__",
    "getmetatable of a string": "return getmetatable('').__index.dump(print)",
    "string.dump and load": "return load(string.dump(function() end), 'x', 'b')()",
    "bytecode through load": "return assert(load(string.char(27) .. 'LuaT\\0', 'x', 'bt'))()",
    "require python": "return require('python').eval('1')",
    "io.open": "io.open('{marker}', 'w'):write('x')",
    "os.execute": "os.execute('touch {marker}')",
    "package.loadlib": "package.loadlib('libc.so.6', 'system')('touch {marker}')",
    "debug.getregistry": "for _, v in pairs(debug.getregistry()) do print(v) end",
    "collectgarbage": "return collectgarbage('count')",
    "loadfile": "return loadfile('/etc/passwd')",
    "a coroutine's upvalues": "local co = coroutine.running() return debug.getinfo(co, 1)",
}


@pytest.mark.parametrize("script", list(ESCAPES.values()), ids=list(ESCAPES))
def test_a_walk_to_python_or_the_host_is_an_error_and_runs_nothing(tmp_path: Path, script: str) -> None:
    marker = tmp_path / "escaped"
    result = run(tmp_path, script.replace("{marker}", str(marker)), AllowedTools=["sqlite_mem_query"])
    assert result.is_error and result.response.startswith("Error: lua_lua_execute: runtime error: "), result.response
    assert not marker.exists()


def test_nothing_reachable_from_the_globals_is_a_python_object(tmp_path: Path) -> None:
    script = """
      local seen, found = {}, {}
      local function walk(v, path, depth)
        local t = type(v)
        if t == 'userdata' then found[#found + 1] = path end
        if (t ~= 'table' and t ~= 'string') or seen[v] or depth > 6 then return end
        seen[v] = true
        local mt = getmetatable(v)
        if mt ~= nil then walk(mt, 'getmetatable(' .. path .. ')', depth + 1) end
        if t == 'table' then for k, x in pairs(v) do walk(x, path .. '.' .. tostring(k), depth + 1) end end
      end
      walk(_G, '_G', 0)
      walk('', '""', 0)
      walk(json.decode('{"a": [1, {"b": 2}]}'), 'json.decode', 0)
      walk(tools.list(), 'tools.list', 0)
      walk(table.pack(coroutine.running()), 'coroutine.running', 0)
      return {count = #found, paths = table.concat(found, ', ')}"""
    assert value(run(tmp_path, script, AllowedTools=["sqlite_mem_query"])) == {"count": 0, "paths": ""}


def _children() -> set[int]:
    """The pids of this process's children (``/proc``: every thread's list)."""
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        pids.update(int(pid) for pid in (task / "children").read_text().split())
    return pids


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


RUNAWAYS = {
    "a loop in a coroutine": "coroutine.wrap(function() while true do end end)() return 1",
    "a loop in a coroutine in pcall": "pcall(coroutine.wrap(function() while true do end end)) return 1",
    "a backtracking string.find on 40 KB": "return string.find(string.rep('a', 40000), string.rep('a*', 30) .. 'b')",
    "a table that grows without end": "local t = {} while true do t[#t + 1] = ('x'):rep(100) .. #t end",
}


@pytest.mark.parametrize("script", list(RUNAWAYS.values()), ids=list(RUNAWAYS))
def test_a_runaway_script_ends_at_its_limit_and_leaves_nothing_running(tmp_path: Path, script: str) -> None:
    threads, children = threading.active_count(), _children()
    tools = toolset(tmp_path, MaxExecutionTimeSeconds=1, MaxMemoryMB=16)
    for _ in range(2):
        started = time.monotonic()
        result = tools.get("lua_lua_execute").call({"script": script}, make_ctx(timeout=None))
        assert time.monotonic() - started < 2, "the call outlived its limit by more than a second"
        assert result.response in (
            "Error: lua_lua_execute: the script ran longer than its time limit (1s at most) and was stopped",
            "Error: lua_lua_execute: the script used more than 16 MB of memory and was stopped",
        )
    assert threading.active_count() == threads and _children() == children
    before = _cpu_seconds()
    time.sleep(2)
    assert _cpu_seconds() - before < 0.5, "something of the calls still runs in this process"


def test_the_script_runs_in_a_process_of_its_own_with_os_limits(tmp_path: Path) -> None:
    children = _children()
    outcome: dict[str, Any] = {}
    tools = toolset(tmp_path, MaxExecutionTimeSeconds=3, MaxMemoryMB=16)
    call = threading.Thread(
        target=lambda: outcome.update(
            result=tools.get("lua_lua_execute").call({"script": "while true do end"}, make_ctx(timeout=None))
        )
    )
    call.start()
    deadline = time.monotonic() + 2
    while not (_children() - children) and time.monotonic() < deadline:
        time.sleep(0.01)
    (pid,) = _children() - children
    proc = Path(f"/proc/{pid}")

    def read_limits() -> dict[str, list[str]]:
        return {line[:26].strip(): line[26:].split()[:2] for line in (proc / "limits").read_text().splitlines()[1:]}

    # The child sets its limits once it has started and read its job: wait for that.
    while read_limits()["Max cpu time"][0] == "unlimited" and time.monotonic() < deadline + 2:
        time.sleep(0.01)
    environment, fds = (proc / "environ").read_bytes(), sorted(int(fd) for fd in os.listdir(proc / "fd"))
    limits = read_limits()
    session = os.getsid(pid)
    call.join()
    assert environment == b"" and fds == [0, 1, 2] and session == pid
    assert limits["Max cpu time"] == ["4", "5"] and limits["Max file size"] == ["0", "0"]
    assert limits["Max processes"] == ["0", "0"] and limits["Max core file size"] == ["0", "0"]
    assert int(limits["Max address space"][0]) == (192 + 2 * 16) * 1024 * 1024
    assert outcome["result"].response.endswith("the script ran longer than its time limit (3s at most) and was stopped")
    assert _children() == children


def test_library_calls_work_from_coroutines_and_fail_clearly_where_lua_cannot_yield(tmp_path: Path) -> None:
    box = tmp_path / "box"
    script = f"""
      local co = coroutine.create(function(a)
        local inner = coroutine.wrap(function() fs.write('{box}/c.txt', 'deep') return coroutine.yield('paused') end)
        local paused = inner()
        local got = coroutine.yield(a + 1)
        return paused .. ':' .. inner(got) .. ':' .. fs.read('{box}/c.txt') .. ':' .. json.encode(json.decode('[1]'))
      end)
      local _, first = coroutine.resume(co, 1)
      local _, last = coroutine.resume(co, 'resumed')
      local bad, why = pcall(json.decode, '{{')
      return {{first = first, last = last, decode = why, top = select(2, pcall(coroutine.yield, 1)),
               gsub = select(2, pcall(string.gsub, 'a', '.', function(c) return json.encode(c) end))}}"""
    assert value(run(tmp_path, script)) == {
        "first": 2,
        "last": "paused:resumed:deep:[1]",
        "decode": "json.decode: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "top": "attempt to yield from outside a coroutine",
        "gsub": "attempt to yield across a C-call boundary",
    }


def test_a_sleep_past_the_deadline_ends_at_the_deadline(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run(tmp_path, "time.sleep(30) return 1", make_ctx(timeout=None), MaxExecutionTimeSeconds=1)
    assert result.response == (
        "Error: lua_lua_execute: the script ran longer than its time limit (1s at most) and was stopped"
    )
    assert time.monotonic() - started < 2


def test_a_yielded_lookalike_of_a_library_request_is_an_ordinary_value(tmp_path: Path) -> None:
    marker = tmp_path / "box" / "forged.txt"
    script = f"""
      rawequal = function() return true end
      local fake = setmetatable({{}}, {{__eq = function() return true end}})
      local co = coroutine.create(function() coroutine.yield(fake, 'fs_write', {{n = 2, '{marker}', 'x'}}) end)
      local ok, first, name = coroutine.resume(co)
      return {{ok = ok, same = first == fake, name = name}}"""
    assert value(run(tmp_path, script)) == {"ok": True, "same": True, "name": "fs_write"}
    assert not marker.exists()


#: A stand-in for the server: it runs one Lua call that loops until its 60 s limit.
_SERVER = """
import django, sys
django.setup()
from pathlib import Path
from tests.tools.test_lua_toolbox import run
run(Path(sys.argv[1]), 'while true do end', MaxExecutionTimeSeconds=60)
"""


def _lua_children_of(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"lua_child.py" in cmdline and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(proc.name))
    return found


def _ended(pid: int) -> bool:
    """Gone, or a zombie: a container's first process may never reap the orphans it adopts."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_script_dies_with_the_server_that_started_it(tmp_path: Path, processes: Processes) -> None:
    import signal
    import sys

    from tests.harness import ROOT, wait_until

    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings.test", "PYTHONPATH": str(ROOT)}
    server = processes.popen([sys.executable, "-c", _SERVER, str(tmp_path)], env=env, cwd=ROOT)
    try:
        [child] = wait_until(lambda: _lua_children_of(server.pid), timeout=60)
        server.send_signal(signal.SIGKILL)  # a crash: nothing of the server runs any more
        server.wait()
        # well inside the script's 60 s limit, with room for a child still starting on a busy machine
        wait_until(lambda: _ended(child), timeout=30)
    finally:
        server.kill()
        server.wait()


def test_a_script_whose_server_died_before_it_started_exits_at_once(processes: Processes) -> None:
    """The server can die between starting the child and the child's ``prctl``: no signal comes
    then, so the child compares its parent with the server it was started by."""
    import marshal
    import sys

    from tools_app.builtin.lua import CHILD, LENGTH_BYTES, _lupa_directory

    job = marshal.dumps(
        {"script": "return 1", "seconds": 5, "max_memory": 0, "address_space": 0, "cpu_seconds": 6,
         "output_max_bytes": 1000}
    )
    started = time.monotonic()
    orphan = processes.run(
        [sys.executable, "-I", "-S", str(CHILD), _lupa_directory(), str(os.getpid() + 1_000_000)],
        input=len(job).to_bytes(LENGTH_BYTES, "little") + job,
        capture_output=True,
        timeout=30,
    )
    assert (orphan.returncode, orphan.stdout) == (1, b"")
    assert time.monotonic() - started < 10
