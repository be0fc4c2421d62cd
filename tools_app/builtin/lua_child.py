"""The process that runs one Lua script for the Lua toolbox (docs/guide-toolboxes.md §1;
docs/tools.md, "The Lua toolbox").

Started by :mod:`tools_app.builtin.lua` as ``python -I -S lua_child.py LUPA_DIR SERVER_PID`` in a session of
its own, with an empty environment, no inherited file descriptors but its three pipes, and
killed with its process group at the call's deadline. It imports nothing of the server: only the
standard library and ``lupa`` (from ``LUPA_DIR``, since ``-S`` leaves site-packages out).

The child writes one JSON object per line; the parent answers with ``marshal`` data after its
length (:data:`LENGTH_BYTES`, little-endian), which only the child reads (``marshal`` and the
json module's C encoder start faster than ``json``). The parent sends the job first::

    {"script": SOURCE, "max_memory": BYTES, "cpu_seconds": N, "address_space": BYTES,
     "output_max_bytes": N, "seconds": S}

then the child writes, any number of times, ``{"call": NAME, "args": [JSON, ...]}`` for a
function the parent answers (:data:`PARENT_FUNCTIONS`: ``json.decode``, ``http``, ``fs``,
``tools``) and reads the answer ``{"status": "ok" | "nil" | "error", "value": JSON}``, and at
last writes ``{"done": KIND, ...}``: ``result`` (``value``), ``printed`` (``text``), ``memory``,
``syntax``, ``runtime`` or ``value`` (``message``), or ``crash`` (``message``: this module
failed).

No Python object ever reaches Lua: the runtime has no ``python`` global, no eval and no
builtins, refuses every attribute, and the script runs in a Lua coroutine that asks for library
functions by yielding plain Lua values (strings, numbers, tables) to the loop below, which
answers with plain Lua values.
"""

from __future__ import annotations

import _json
import marshal
import math
import resource
import sys
import time
from typing import Any

#: Bytes of the length before each message from the parent (little-endian).
LENGTH_BYTES = 4
#: Deepest table nesting converted to JSON.
MAX_DEPTH = 100
#: The functions the parent process answers; the others are answered here.
PARENT_FUNCTIONS = frozenset(
    {
        "json_decode",
        "http_get",
        "http_post",
        "http_request",
        "fs_read",
        "fs_write",
        "fs_list",
        "fs_exists",
        "fs_isdir",
        "fs_isfile",
        "fs_mkdir",
        "fs_patch",
        "tools_call",
        "tools_list",
    }
)

PRELUDE = r"""
local yield_raw, resume_raw, create_raw, running_raw = coroutine.yield, coroutine.resume, coroutine.create,
  coroutine.running
local isyieldable_raw, pack, select, error, tostring, type = coroutine.isyieldable, table.pack, select, error,
  tostring, type
local pcall_raw, xpcall_raw, concat, load_raw, rawequal = pcall, xpcall, table.concat, load, rawequal
local HOST = {}
local MAIN
local function fatal(e) return e == "not enough memory" end
local function rethrow(ok, ...)
  if not ok and fatal((...)) then error((...), 0) end
  return ok, ...
end
pcall = function(f, ...) return rethrow(pcall_raw(f, ...)) end
xpcall = function(f, handler, ...)
  return rethrow(xpcall_raw(f, function(e) if fatal(e) then return e end return handler(e) end, ...))
end
-- A library call yields HOST upwards; each resume on the way passes it on and hands the answer back.
local function forward(co, ok, ...)
  if ok and rawequal((...), HOST) then return forward(co, resume_raw(co, yield_raw(...))) end
  return rethrow(ok, ...)
end
coroutine.resume = function(co, ...) return forward(co, resume_raw(co, ...)) end
local resume = coroutine.resume
coroutine.wrap = function(f)
  local co = create_raw(f)
  local function unwrap(ok, ...)
    if ok then return ... end
    error((...), 0)
  end
  return function(...) return unwrap(resume(co, ...)) end
end
coroutine.yield = function(...)
  if running_raw() == MAIN then error("attempt to yield from outside a coroutine", 2) end
  return yield_raw(...)
end
coroutine.isyieldable = function() return running_raw() ~= MAIN and isyieldable_raw() end
coroutine.running = function()
  local co, main = running_raw()
  return co, main or co == MAIN
end
load = function(chunk, name, _, env) return load_raw(chunk, name, "t", env) end
os = {time = os.time, clock = os.clock, date = os.date, difftime = os.difftime}
string.dump = nil
io, debug, package, dofile, loadfile, collectgarbage, python = nil, nil, nil, nil, nil, nil, nil

local function lib(names)
  local module = {}
  for _, name in ipairs(names) do
    module[name:match("_(.*)$")] = function(...)
      local status, value = yield_raw(HOST, name, pack(...))
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
local printed, printed_bytes, PRINT_MAX = {}, 0, ...
print = function(...)
  local parts = {}
  for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
  local line = concat(parts, "\t")
  if printed_bytes < PRINT_MAX then printed[#printed + 1] = line printed_bytes = printed_bytes + #line end
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

-- step(nil, source) starts the script, step(co, status, value) answers its library call. Answers
-- "call", name, args | "done", printed, count, values... | "syntax" | "error", message.
local function finish(ok, ...)
  if not ok then return "error", tostring((...)) end
  if rawequal((...), HOST) then return "call", select(2, ...) end
  return "done", concat(printed, "\n"), select("#", ...), ...
end
return function(co, ...)
  if co == nil then
    local chunk, why = load_raw((...), "<python>", "t")
    if not chunk then return nil, "syntax", why end
    co = create_raw(chunk)
    MAIN = co
    return co, finish(resume_raw(co))
  end
  return co, finish(resume_raw(co, ...))
end
"""


class ScriptError(Exception):
    """A library function's refusal, answered to Lua as an error."""


def _unencodable(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} cannot be turned into JSON")


# The json module's own C encoder, as ``json.dumps(value, ensure_ascii=False)`` uses it: importing
# ``json`` itself brings ``re`` and ``enum``, a third of this process's start.
_ENCODER = _json.make_encoder(None, _unencodable, _json.encode_basestring, None, ": ", ", ", False, False, True)


def dumps(value: Any) -> str:
    """``value`` (JSON types only) as JSON text, as ``json.dumps(value, ensure_ascii=False)``."""
    return "".join(_ENCODER(value, 0))


def read_message(reader: Any) -> Any:
    """The parent's next message: a length, then ``marshal`` data (the parent is trusted).

    Raises:
        EOFError: the parent closed the pipe.
    """
    size = int.from_bytes(reader.read(LENGTH_BYTES), "little")
    data = reader.read(size)
    if not size or len(data) < size:
        raise EOFError("the server closed the pipe")
    return marshal.loads(data)  # noqa: S302 - the server is the only writer of this pipe


def to_python(lua: Any, value: Any, depth: int = 0) -> Any:
    """A Lua value as JSON-ready Python: a table with keys 1..n is a list, another an object;
    strings that are not UTF-8 are decoded with replacement characters.

    Raises:
        ValueError: a function, coroutine or userdata, or tables nested too deep (cycles).
    """
    if depth > MAX_DEPTH:
        raise ValueError("tables nested too deep (or a cycle) to turn into JSON")
    kind = lua.lua_type(value)
    if kind is None:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if kind != "table":
        raise ValueError(f"a Lua {kind} cannot be turned into JSON")
    items = list(value.items())
    keys = [k for k, _ in items]
    if keys and keys == list(range(1, len(keys) + 1)):
        return [to_python(lua, v, depth + 1) for _, v in items]
    return {str(k): to_python(lua, v, depth + 1) for k, v in items}


class Child:
    """One script's Lua state and the loop that answers its library calls."""

    def __init__(self, lua: Any, job: dict[str, Any], reader: Any, writer: Any) -> None:
        self.lua, self.job, self.reader, self.writer = lua, job, reader, writer
        self.deadline = time.monotonic() + float(job["seconds"])
        self.runtime = lua.LuaRuntime(
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            max_memory=int(job["max_memory"]),
            attribute_filter=self._refuse,
        )

    @staticmethod
    def _refuse(obj: Any, name: Any, is_setting: bool) -> Any:
        raise AttributeError("Python objects are not reachable from Lua")

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write(dumps(message).encode("utf-8", "surrogatepass") + b"\n")
        self.writer.flush()

    def to_lua(self, value: Any) -> Any:
        """A JSON value as a plain Lua value (tables for lists and objects)."""
        if isinstance(value, dict | list):
            return self.runtime.table_from(value, recursive=True)
        if value is None or isinstance(value, str | int | float | bool):
            return value
        raise ScriptError(f"cannot hand a {type(value).__name__} to Lua")

    def run(self) -> dict[str, Any]:
        """Run the script to its end; the ``done`` message."""
        step = self.runtime.execute(PRELUDE, int(self.job["output_max_bytes"]))
        co, kind, *rest = step(None, self.job["script"])
        while kind == "call":
            name, args = rest
            status, value = self.answer(str(name), args)
            co, kind, *rest = step(co, status, self.to_lua(value))
        if kind == "syntax":
            return {"done": "syntax", "message": str(rest[0])}
        if kind == "error":
            message = str(rest[0])
            if message == "not enough memory":
                return {"done": "memory"}
            return {"done": "runtime", "message": message}
        printed, count, values = rest[0], rest[1], rest[2:]
        try:
            converted = [to_python(self.lua, v) for v in values[:count]]
        except ValueError as error:
            return {"done": "value", "message": str(error)}
        result = converted[0] if len(converted) == 1 else (converted or None)
        if result is None and printed:
            return {"done": "printed", "text": printed}
        return {"done": "result", "value": result}

    def answer(self, name: str, args: Any) -> tuple[str, Any]:
        """Answer a library call: ``("ok" | "nil" | "error", value)``."""
        label = name.replace("_", ".", 1)
        try:
            count = int(args["n"])
            values = [to_python(self.lua, args[i]) for i in range(1, count + 1)]
        except ValueError as error:
            return "error", f"{label}: {error}"
        if name in PARENT_FUNCTIONS:
            self.send({"call": name, "args": values})
            reply = read_message(self.reader)
            return str(reply["status"]), reply.get("value")
        try:
            return "ok", self.local(name, values)
        except (ScriptError, ValueError, TypeError, OverflowError) as error:
            return "error", f"{label}: {error}"

    def local(self, name: str, args: list[Any]) -> Any:
        """The library functions that need no host: ``json.encode`` and ``time``."""
        first: Any = args[0] if args else None
        second: Any = args[1] if len(args) > 1 else None
        if name == "json_encode":
            return dumps(first)
        if name == "time_now":
            return time.time()
        if name == "time_sleep":
            time.sleep(min(max(float(first), 0.0), max(0.0, self.deadline - time.monotonic())))
            return True
        if name == "time_format":
            from datetime import UTC, datetime  # only here: it costs the start of every other script

            moment = datetime.fromtimestamp(time.time() if first is None else float(first), UTC)
            return moment.strftime(str(second) if second else "%Y-%m-%dT%H:%M:%SZ")
        if name == "time_diff":
            return float(first) - float(second)
        raise ScriptError(f"no function {name}")


def limit_self(job: dict[str, Any]) -> None:
    """The OS limits of this process, set before any Lua runs: CPU seconds, address space (when
    ``address_space`` is above 0), no file writes, no core file, no new process."""
    cpu = int(job["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    space = int(job["address_space"])
    if space > 0:
        resource.setrlimit(resource.RLIMIT_AS, (space, space))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def die_with_server(server_pid: int) -> None:
    """Be killed when the server's thread that started this process ends, a crash of the server
    included (``PR_SET_PDEATHSIG``): otherwise a script past its deadline would run on, up to its
    CPU limit, once nobody is left to kill it. Exit at once when the server is already gone: it
    can die between this process's start and the ``prctl`` call, and then no signal comes.

    Args:
        server_pid: the server's process id, passed on the command line by the server (reading
            ``getppid()`` here would read the adopting process once the server is gone).
    """
    import ctypes
    import os
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != server_pid:
        os._exit(1)


def main() -> None:
    """Read the job, limit this process, run the script and write its ``done`` message.

    Arguments: the directory holding ``lupa``, then the server's process id."""
    die_with_server(int(sys.argv[2]))
    sys.path.insert(0, sys.argv[1])
    import lupa.lua54 as lua

    reader, writer = sys.stdin.buffer, sys.stdout.buffer
    job = read_message(reader)
    limit_self(job)
    child = Child(lua, job, reader, writer)
    try:
        done = child.run()
    except lua.LuaMemoryError:
        done = {"done": "memory"}
    except MemoryError:
        done = {"done": "memory"}
    except Exception as error:  # noqa: BLE001 - any failure here is reported, not raised
        done = {"done": "crash", "message": f"{type(error).__name__}: {error}"}
    child.send(done)


if __name__ == "__main__":
    main()
