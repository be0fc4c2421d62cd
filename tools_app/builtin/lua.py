"""The Lua toolbox: ``lua_<Name>_execute {script, timeout?}`` on an embedded Lua 5.4 (``lupa``)
(README, "Built-in toolboxes").

Each call gets a fresh Lua state whose heap is capped at ``MaxMemoryMB`` (0: no cap) and whose
time is capped at ``timeout`` seconds (at most ``MaxExecutionTimeSeconds`` and the call's own
limit). The time is checked every 1000 Lua instructions and at each library call; ``pcall``,
``xpcall`` and ``coroutine.resume`` cannot catch the time or memory limit. A library function
still running at the limit (a long pattern match) is left to finish on its own: the call answers
at the limit all the same.

The state keeps the safe part of the standard library (``string`` without ``dump``, ``table``,
``math``, ``utf8``, ``coroutine``, ``os.time``/``clock``/``date``/``difftime``, ``load`` for text
only) and adds, as globals (``require`` returns them too):

* ``json.encode(value)``, ``json.decode(text)``;
* ``http.get(url, headers?)``, ``http.post(url, body, headers?)``, ``http.request{method, url,
  headers, body}``: ``{status, body, headers}``, only to hosts in ``AllowedHosts``, no redirects;
* ``time.now()``, ``time.sleep(s)``, ``time.format(t?, fmt?)``, ``time.diff(a, b)``;
* ``fs.read``, ``fs.write``, ``fs.list``, ``fs.exists``, ``fs.isdir``, ``fs.isfile``, ``fs.mkdir``,
  ``fs.patch`` through the toolbox's sandbox (a refused path is an error; a missing file makes
  ``fs.read`` return ``nil, message``);
* ``text.split``, ``trim``, ``upper``, ``lower``, ``find`` (plain), ``gsub`` (Lua patterns),
  ``startswith``, ``endswith``, ``len`` and ``sub`` (in characters);
* ``tools.call(name, args)`` for the tools named in ``AllowedTools`` (the tool portal), answering
  ``{status = "ok" | "error", data, result_txt, error, duration}``; a tool called this way gets no
  portal itself. ``tools.list()`` names the allowed tools.

The script's return value is the result, as JSON; a script that returns nothing gets what it
printed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import lupa.lua54 as lua

from agents_app.builtins import BuiltinToolbox, LuaConfig

from ..base import ToolContext, ToolResult
from . import editing
from .common import BuiltinTool, json_result, json_safe
from .sandbox import FileSandbox, SandboxError

log = logging.getLogger("tools.lua")

#: Seconds the call waits past the limit for a library function that does not give control back.
GRACE_SECONDS = 1.0
#: Deepest table nesting converted to JSON.
MAX_DEPTH = 100

PRELUDE = r"""
local py = ...
local error, pcall_raw, xpcall_raw, resume = error, pcall, xpcall, coroutine.resume
local LIMIT = setmetatable({}, {__tostring = function() return "limit reached" end})
local function fatal(e) return e == LIMIT or e == "not enough memory" end
debug.sethook(function() if py.expired() then error(LIMIT, 0) end end, "", 1000)
local function rethrow(ok, ...)
  if not ok and fatal((...)) then error((...), 0) end
  return ok, ...
end
pcall = function(f, ...) return rethrow(pcall_raw(f, ...)) end
xpcall = function(f, handler, ...)
  return rethrow(xpcall_raw(f, function(e) if fatal(e) then return e end return handler(e) end, ...))
end
coroutine.resume = function(co, ...) return rethrow(resume(co, ...)) end
local load_raw = load
load = function(chunk, name, _, env) return load_raw(chunk, name, "t", env) end
os = {time = os.time, clock = os.clock, date = os.date, difftime = os.difftime}
string.dump = nil
io, debug, package, dofile, loadfile, collectgarbage = nil, nil, nil, nil, nil, nil

local function lib(names)
  local module = {}
  for _, name in ipairs(names) do
    local f = py[name]
    module[name:match("_(.*)$")] = function(...)
      local status, value = f(...)
      if py.expired() then error(LIMIT, 0) end
      if status == "error" then error(value, 2) end
      if status == "nil" then return nil, value end
      return value
    end
  end
  return module
end
json = lib({"json_encode", "json_decode"})
http = lib({"http_get", "http_post", "http_request"})
time = lib({"time_now", "time_sleep", "time_format", "time_diff"})
fs = lib({"fs_read", "fs_write", "fs_list", "fs_exists", "fs_isdir", "fs_isfile", "fs_mkdir", "fs_patch"})
tools = lib({"tools_call", "tools_list"})
print = function(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
  py.print(table.concat(parts, "\t"))
end

text = {}
function text.split(s, sep)
  local out, start = {}, 1
  sep = sep or ","
  if sep == "" then for c in s:gmatch(utf8.charpattern) do out[#out + 1] = c end return out end
  while true do
    local i, j = string.find(s, sep, start, true)
    if not i then out[#out + 1] = s:sub(start) return out end
    out[#out + 1] = s:sub(start, i - 1)
    start = j + 1
  end
end
function text.trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end
function text.upper(s) return s:upper() end
function text.lower(s) return s:lower() end
function text.find(s, sub, init) return string.find(s, sub, init or 1, true) end
function text.gsub(s, pattern, repl, n) return (string.gsub(s, pattern, repl, n)) end
function text.startswith(s, prefix) return s:sub(1, #prefix) == prefix end
function text.endswith(s, suffix) return suffix == "" or s:sub(-#suffix) == suffix end
function text.len(s) return utf8.len(s) or #s end
function text.sub(s, i, j)
  local n = utf8.len(s)
  if not n then return s:sub(i, j) end
  i, j = i or 1, j or -1
  if i < 0 then i = n + i + 1 end
  if j < 0 then j = n + j + 1 end
  if i < 1 then i = 1 end
  if j > n then j = n end
  if i > j then return "" end
  local last = utf8.offset(s, j + 1) or (#s + 1)
  return s:sub(utf8.offset(s, i), last - 1)
end
local modules = {json = json, http = http, time = time, fs = fs, text = text, tools = tools}
require = function(name) return modules[name] or error("module '" .. tostring(name) .. "' not found", 2) end
"""


class _Limits:
    """The deadline and cancellation of one script, and whether a limit stopped it."""

    def __init__(self, seconds: float, cancel: threading.Event | None) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.cancel = cancel
        self.hit = False

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        if time.monotonic() > self.deadline or (self.cancel is not None and self.cancel.is_set()):
            self.hit = True
        return self.hit


def to_python(value: Any, depth: int = 0) -> Any:
    """A Lua value as JSON-ready Python: a table with keys 1..n is a list, another an object.

    Raises:
        ValueError: a function, coroutine or userdata, or tables nested too deep (cycles).
    """
    if depth > MAX_DEPTH:
        raise ValueError("tables nested too deep (or a cycle) to turn into JSON")
    kind = lua.lua_type(value)
    if kind is None:
        return json_safe(value.decode("utf-8", "replace") if isinstance(value, bytes) else value)
    if kind != "table":
        raise ValueError(f"a Lua {kind} cannot be turned into JSON")
    items = list(value.items())
    keys = [k for k, _ in items]
    if keys and keys == list(range(1, len(keys) + 1)):
        return [to_python(v, depth + 1) for _, v in items]
    return {str(k): to_python(v, depth + 1) for k, v in items}


class LuaTool(BuiltinTool):
    """``lua_<Name>_execute``: run a Lua script (module docstring).

    Args:
        box: the parsed ``LuaToolbox`` entry.
        sandbox: its file sandbox (for ``fs``).
    """

    def __init__(self, box: BuiltinToolbox, sandbox: FileSandbox) -> None:
        config = box.config
        assert isinstance(config, LuaConfig)
        self.config = config
        self.sandbox = sandbox
        self.allowed_hosts = {host.lower() for host in config.AllowedHosts}
        allowed = ", ".join(config.AllowedTools) or "none"
        super().__init__(
            box,
            f"lua_{config.Name}_execute",
            f"{config.Description or config.Name}. Runs a Lua 5.4 script and answers its return value as JSON."
            " Globals: json, http, time, fs, text, tools (tools.call(name, args) for: "
            f"{allowed}). Limits: {config.MaxMemoryMB} MB, {config.MaxExecutionTimeSeconds:g} s.",
            {
                "type": "object",
                "properties": {
                    "script": {"type": "string", "description": "the Lua source; its return value is the result"},
                    "timeout": {"type": "number", "description": "seconds the script may run"},
                },
                "required": ["script"],
            },
        )

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run ``arguments["script"]``; errors name the limit or the Lua error."""
        script = arguments.get("script") if isinstance(arguments, dict) else None
        if not isinstance(script, str) or not script.strip():
            return self.fail('the argument "script" (Lua source) is required')
        if script.startswith("\x1b"):
            return self.fail("precompiled Lua chunks are refused; send source text")
        seconds = float(self.config.MaxExecutionTimeSeconds)
        asked = arguments.get("timeout")
        if asked is not None:
            if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
                return self.fail('"timeout" must be a number of seconds above 0')
            seconds = min(seconds, float(asked))
        if ctx.timeout is not None:
            seconds = min(seconds, ctx.timeout)
        limits = _Limits(seconds, ctx.cancel)
        outcome: dict[str, Any] = {}
        worker = threading.Thread(target=self._execute, args=(script, ctx, limits, outcome), daemon=True)
        worker.start()
        worker.join(seconds + GRACE_SECONDS)
        if worker.is_alive():
            limits.hit = True
            return self._limit_error(ctx)
        return outcome["result"]

    def _limit_error(self, ctx: ToolContext) -> ToolResult:
        if ctx.cancel is not None and ctx.cancel.is_set():
            return self.fail("the call was cancelled; the script was stopped")
        return self.fail(f"the script ran longer than its time limit ({self._seconds_text(ctx)}) and was stopped")

    def _seconds_text(self, ctx: ToolContext) -> str:
        return f"{self.config.MaxExecutionTimeSeconds:g}s at most" if ctx.timeout is None else "its timeout"

    def _execute(self, script: str, ctx: ToolContext, limits: _Limits, outcome: dict[str, Any]) -> None:
        megabytes = self.config.MaxMemoryMB
        runtime = lua.LuaRuntime(
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            max_memory=megabytes * 1024 * 1024 if megabytes else 0,
        )
        printed: list[str] = []
        try:
            runtime.execute(PRELUDE, runtime.table_from(_Library(self, runtime, ctx, limits, printed).functions()))
            value = runtime.execute(script)
            if isinstance(value, tuple):
                value = list(value)
            result = to_python(value)
            if result is None and printed:
                outcome["result"] = ToolResult("\n".join(printed))
            else:
                outcome["result"] = json_result(result)
        except lua.LuaMemoryError:
            outcome["result"] = self.fail(f"the script used more than {megabytes} MB of memory and was stopped")
        except lua.LuaSyntaxError as error:
            outcome["result"] = self.fail(f"syntax error: {error}")
        except lua.LuaError as error:
            if limits.hit:
                outcome["result"] = self._limit_error(ctx)
            elif str(error).endswith("not enough memory"):
                outcome["result"] = self.fail(f"the script used more than {megabytes} MB of memory and was stopped")
            else:
                outcome["result"] = self.fail(f"runtime error: {error}")
        except ValueError as error:
            outcome["result"] = self.fail(f"the script's return value: {error}")


class _Library:
    """The Python side of the Lua globals for one script. Each function answers
    ``("ok", value)``, ``("nil", message)`` or ``("error", message)``."""

    def __init__(self, tool: LuaTool, runtime: Any, ctx: ToolContext, limits: _Limits, printed: list[str]) -> None:
        self.tool, self.runtime, self.ctx, self.limits, self.printed = tool, runtime, ctx, limits, printed
        self.portal_calls = 0

    def functions(self) -> dict[str, Any]:
        names = [name for name in dir(self) if name.split("_")[0] in ("json", "http", "time", "fs", "tools")]
        table = {name: self._guard(getattr(self, name)) for name in names}
        return {**table, "expired": self.limits.expired, "print": self._print}

    def _guard(self, function: Any) -> Any:
        def guarded(*args: Any) -> tuple[str, Any]:
            try:
                return "ok", function(*args)
            except _Missing as missing:
                return "nil", str(missing)
            except (SandboxError, editing.EditError, ValueError, TypeError, OSError, httpx.HTTPError) as error:
                return "error", f"{function.__name__.replace('_', '.', 1)}: {error}"

        return guarded

    def _print(self, line: str) -> None:
        if sum(len(p) for p in self.printed) < self.ctx.output_max_bytes:
            self.printed.append(str(line))

    def _lua(self, value: Any) -> Any:
        if isinstance(value, dict | list):
            return self.runtime.table_from(value, recursive=True)
        return value

    # json
    def json_encode(self, value: Any) -> str:
        return json.dumps(to_python(value), ensure_ascii=False)

    def json_decode(self, text: Any) -> Any:
        return self._lua(json.loads(str(text)))

    # http
    def http_get(self, url: str, headers: Any = None) -> Any:
        return self._request("GET", url, headers, None)

    def http_post(self, url: str, body: Any = None, headers: Any = None) -> Any:
        return self._request("POST", url, headers, body)

    def http_request(self, options: Any) -> Any:
        spec = to_python(options) if lua.lua_type(options) == "table" else {}
        return self._request(str(spec.get("method") or "GET"), spec.get("url"), spec.get("headers"), spec.get("body"))

    def _request(self, method: str, url: Any, headers: Any, body: Any) -> Any:
        if not isinstance(url, str):
            raise ValueError("a URL is required")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL")
        if parts.hostname.lower() not in self.tool.allowed_hosts:
            allowed = ", ".join(sorted(self.tool.allowed_hosts)) or "none"
            raise ValueError(f"host {parts.hostname!r} is not in AllowedHosts (allowed: {allowed})")
        headers = to_python(headers) if lua.lua_type(headers) == "table" else {}
        content = body if isinstance(body, str | bytes) or body is None else json.dumps(to_python(body))
        limit = self.ctx.output_max_bytes
        with httpx.Client(timeout=max(0.1, self.limits.remaining()), follow_redirects=False) as client:
            with client.stream(
                method.upper(), url, headers={str(k): str(v) for k, v in headers.items()}, content=content
            ) as response:
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise ValueError(f"the answer is longer than {limit} bytes")
                return self._lua(
                    {
                        "status": response.status_code,
                        "body": data.decode("utf-8", "replace"),
                        "headers": dict(response.headers),
                    }
                )

    # time
    def time_now(self) -> float:
        return time.time()

    def time_sleep(self, seconds: Any) -> bool:
        time.sleep(min(max(float(seconds), 0.0), self.limits.remaining()))
        return True

    def time_format(self, stamp: Any = None, pattern: Any = None) -> str:
        moment = datetime.fromtimestamp(time.time() if stamp is None else float(stamp), UTC)
        return moment.strftime(str(pattern) if pattern else "%Y-%m-%dT%H:%M:%SZ")

    def time_diff(self, later: Any, earlier: Any) -> float:
        return float(later) - float(earlier)

    # fs
    def fs_read(self, path: Any) -> str:
        try:
            target = self.tool.sandbox.check_read(str(path))
        except SandboxError as error:
            if "does not exist" in str(error):
                raise _Missing(str(error)) from None
            raise
        if not target.is_file():
            raise ValueError(f"{path} is not a regular file")
        return target.read_bytes().decode("utf-8", "replace")

    def fs_write(self, path: Any, content: Any) -> bool:
        data = str(content).encode("utf-8", "surrogatepass")
        editing.write_atomically(self.tool.sandbox.check_write(str(path), len(data)), data)
        return True

    def fs_list(self, path: Any) -> Any:
        target = self.tool.sandbox.check_read(str(path))
        names = sorted(child.name for child in target.iterdir() if self.tool.sandbox.allows(str(child.resolve())))
        return self._lua(names)

    def fs_exists(self, path: Any) -> bool:
        return self.tool.sandbox.check_access(str(path)).exists()

    def fs_isdir(self, path: Any) -> bool:
        return self.tool.sandbox.check_access(str(path)).is_dir()

    def fs_isfile(self, path: Any) -> bool:
        return self.tool.sandbox.check_access(str(path)).is_file()

    def fs_mkdir(self, path: Any) -> bool:
        target = self.tool.sandbox.check_write(str(path))
        target.mkdir()
        return True

    def fs_patch(self, path: Any, patch: Any) -> Any:
        arguments = {"path": str(path), "patch": str(patch)}
        return self._lua(editing.patch_file(self.tool.sandbox, self.tool.name, arguments, self.ctx))

    # tools
    def tools_list(self) -> Any:
        lookup = self.ctx.tools
        found = [lookup.get(name) for name in self.tool.config.AllowedTools] if lookup else []
        return self._lua([{"name": t.name, "description": t.description} for t in found if t is not None])

    def tools_call(self, name: Any, args: Any = None) -> Any:
        allowed = self.tool.config.AllowedTools
        if self.ctx.tools is None:
            raise ValueError("the tool portal is not available here (tools called through it get none)")
        if name not in allowed:
            raise ValueError(f"{name!r} is not in AllowedTools (allowed: {', '.join(allowed) or 'none'})")
        target = self.ctx.tools.get(str(name))
        if target is None:
            raise ValueError(f"no tool {name!r} in this agent")
        arguments = to_python(args) if lua.lua_type(args) == "table" else {}
        if not isinstance(arguments, dict):
            raise ValueError("the arguments must be a table of name = value")
        self.portal_calls += 1
        context = dataclasses.replace(
            self.ctx,
            tools=None,
            timeout=self.limits.remaining(),
            tool_call_id=f"{self.ctx.tool_call_id}.portal{self.portal_calls}",
        )
        started = time.monotonic()
        result = target.call(arguments, context)
        duration = round(time.monotonic() - started, 3)
        log.info(
            "portal call",
            extra={
                "kind": "tools.portal_call",
                "tool": name,
                "caller": self.tool.name,
                "duration": duration,
                "is_error": result.is_error,
            },
        )
        response = result.response
        data = response.get("content") if isinstance(response, dict) and response.get("type") == "json" else response
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        if result.is_error:
            return self._lua({"status": "error", "error": text, "result_txt": text, "duration": duration})
        return self._lua({"status": "ok", "data": data, "result_txt": text, "duration": duration})


class _Missing(Exception):
    """A file that is not there: ``fs.read`` answers ``nil, message``."""
