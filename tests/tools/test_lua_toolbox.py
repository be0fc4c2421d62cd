"""The Lua toolbox in process: results, limits, the removed globals, the libraries and the portal."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.tools.conftest import make_agent, make_ctx
from tools_app.toolset import build_toolset


def toolset(tmp_path: Path, **contents: Any):
    sandbox = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(tmp_path / "box")}, "fsbName": "box"}
    (tmp_path / "box").mkdir(exist_ok=True)
    lua = {"Name": "lua", "MaxMemoryMB": 16, "MaxExecutionTimeSeconds": 5, "FileSandbox": sandbox, **contents}
    return build_toolset(
        make_agent(
            tmp_path,
            builtinToolboxes=[
                {"tag": "LuaToolbox", "contents": lua},
                {
                    "tag": "SqliteToolbox",
                    "contents": {"Name": "mem", "Versioning": {"tag": "SqliteReadWrite", "path": "m.db"}},
                },
            ],
        )
    )


def run(tmp_path: Path, script: str, ctx=None, **contents: Any):
    tools = toolset(tmp_path, **contents)
    return tools.get("lua_lua_execute").call({"script": script}, ctx or make_ctx(tools=tools))


def value(result) -> Any:
    assert not result.is_error, result.response
    return result.response["content"]


def test_the_return_value_is_the_json_result(tmp_path: Path) -> None:
    result = run(tmp_path, "return {n = 1 + 1, list = {'a', 'b'}, ok = true, nested = {x = {1.5}}}")
    assert value(result) == {"n": 2, "list": ["a", "b"], "ok": True, "nested": {"x": [1.5]}}
    assert run(tmp_path, "print('hello', 42)").response == "hello\t42"


@pytest.mark.parametrize(
    "script, message",
    [
        ("return (", "syntax error"),
        ("error('boom')", 'runtime error: [string "<python>"]:1: boom'),
        ("return function() end", "the script's return value: a Lua function cannot be turned into JSON"),
        ("\x1bLua", "precompiled Lua chunks are refused"),
    ],
)
def test_script_errors(tmp_path: Path, script: str, message: str) -> None:
    result = run(tmp_path, script)
    assert result.is_error and result.response.startswith("Error: lua_lua_execute: ") and message in result.response


def test_a_script_over_its_time_limit_is_stopped_even_inside_pcall(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run(tmp_path, "while true do pcall(function() while true do end end) end", MaxExecutionTimeSeconds=0.5)
    assert result.response == (
        "Error: lua_lua_execute: the script ran longer than its time limit (its timeout) and was stopped"
    )
    assert time.monotonic() - started < 3


def test_the_timeout_argument_shortens_the_limit(tmp_path: Path) -> None:
    tools = toolset(tmp_path)
    started = time.monotonic()
    result = tools.get("lua_lua_execute").call({"script": "while true do end", "timeout": 0.3}, make_ctx())
    assert result.is_error and "time limit" in result.response and time.monotonic() - started < 2


def test_a_script_over_its_memory_limit_is_stopped_even_inside_pcall(tmp_path: Path) -> None:
    script = "local ok = pcall(function() local t = {} for i = 1, 1e8 do t[i] = ('x'):rep(64) .. i end end) return ok"
    result = run(tmp_path, script, MaxMemoryMB=8)
    assert result.response == "Error: lua_lua_execute: the script used more than 8 MB of memory and was stopped"


def test_a_cancelled_call_stops_the_script(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    result = run(tmp_path, "while true do end", make_ctx(cancel=cancel, timeout=30))
    assert result.response == "Error: lua_lua_execute: the call was cancelled; the script was stopped"


def test_unsafe_globals_are_gone(tmp_path: Path) -> None:
    script = """return {io = io == nil, debug = debug == nil, dofile = dofile == nil, loadfile = loadfile == nil,
      execute = os.execute == nil, exit = os.exit == nil, getenv = os.getenv == nil, dump = string.dump == nil,
      package = package == nil, binary = select(2, load(string.char(27) .. 'Lua')) ~= nil,
      time = type(os.time()) == 'number', text = load('return 1 + 1')()}"""
    assert value(run(tmp_path, script)) == {
        "io": True,
        "debug": True,
        "dofile": True,
        "loadfile": True,
        "execute": True,
        "exit": True,
        "getenv": True,
        "dump": True,
        "package": True,
        "binary": True,
        "time": True,
        "text": 2,
    }


def test_json_text_and_time_libraries(tmp_path: Path) -> None:
    script = """local t = json.decode('{"a": [1, 2], "b": "x"}')
      return {a2 = t.a[2], enc = json.encode({k = 'v'}), split = text.split('a,b,,c', ','),
              trim = text.trim('  hi '), find = text.find('a.b', '.'), gsub = text.gsub('aaa', 'a', 'b', 2),
              starts = text.startswith('hello', 'he'), ends = text.endswith('hello', 'lo'),
              len = text.len('héllo'), sub = text.sub('héllo', 2, 3), up = text.upper('a'),
              diff = time.diff(5, 3), fmt = time.format(0), req = require('json') == json}"""
    assert value(run(tmp_path, script)) == {
        "a2": 2,
        "enc": '{"k": "v"}',
        "split": ["a", "b", "", "c"],
        "trim": "hi",
        "find": 2,
        "gsub": "bba",
        "starts": True,
        "ends": True,
        "len": 5,
        "sub": "él",
        "up": "A",
        "diff": 2.0,
        "fmt": "1970-01-01T00:00:00Z",
        "req": True,
    }


def test_fs_goes_through_the_sandbox(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    box = tmp_path / "box"
    script = f"""fs.mkdir('{box}/d')
      fs.write('{box}/d/f.txt', 'one\\ntwo\\n')
      local missing, why = fs.read('{box}/nope.txt')
      fs.patch('{box}/d/f.txt', '@@ -2 +2 @@\\n-two\\n+TWO')
      local ok, err = pcall(fs.read, '{tmp_path}/secret.txt')
      return {{read = fs.read('{box}/d/f.txt'), list = fs.list('{box}/d'), isdir = fs.isdir('{box}/d'),
               missing = missing == nil, why = why, refused = err}}"""
    answer = value(run(tmp_path, script))
    assert answer["read"] == "one\nTWO\n" and answer["list"] == ["f.txt"] and answer["isdir"] is True
    assert answer["missing"] is True and "does not exist" in answer["why"]
    assert "fs.read: reading" in answer["refused"] and "is not allowed by the file sandbox 'box'" in answer["refused"]


def test_the_portal_calls_allowed_tools_only_and_never_nests(tmp_path: Path) -> None:
    script = """local made = tools.call('sqlite_mem_query', {sql = 'CREATE TABLE t (x)'})
      local row = tools.call('sqlite_mem_query', {sql = "INSERT INTO t VALUES ('v')"})
      local bad = tools.call('sqlite_mem_query', {sql = 'nonsense'})
      local ok, refused = pcall(tools.call, 'lua_lua_execute', {script = 'return 1'})
      return {made = made.status, changes = row.data.changes, bad = bad.status, err = bad.error, refused = refused,
              listed = #tools.list()}"""
    answer = value(run(tmp_path, script, AllowedTools=["sqlite_mem_query"]))
    assert answer["made"] == "ok" and answer["changes"] == 1 and answer["bad"] == "error"
    assert "SQL error" in answer["err"] and answer["listed"] == 1
    assert answer["refused"].startswith(
        "tools.call: 'lua_lua_execute' is not in AllowedTools (allowed: sqlite_mem_query)"
    )
    nested = run(
        tmp_path,
        "return tools.call('sqlite_mem_query', {sql = 'SELECT 1'})",
        make_ctx(),
        AllowedTools=["sqlite_mem_query"],
    )
    assert nested.is_error and "the tool portal is not available here" in nested.response


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_http_reaches_allowed_hosts_only(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/x"
        script = f"""local r = http.get('{url}')
          local ok, err = pcall(http.get, 'http://localhost:{server.server_address[1]}/y')
          return {{status = r.status, path = json.decode(r.body).path, refused = err}}"""
        answer = value(run(tmp_path, script, AllowedHosts=["127.0.0.1"]))
    finally:
        server.shutdown()
    assert answer["status"] == 200 and answer["path"] == "/x"
    assert "host 'localhost' is not in AllowedHosts (allowed: 127.0.0.1)" in answer["refused"]
