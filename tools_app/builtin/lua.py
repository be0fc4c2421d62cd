"""The Lua toolbox: ``lua_<Name>_execute {script, timeout?}`` on Lua 5.4 (``lupa``) in a process
of its own per call (docs/guide-toolboxes.md §1; docs/tools.md, "The Lua toolbox").

Each call starts :mod:`tools_app.builtin.lua_child` as ``python -I -S`` in a new session, with
an empty environment, only its three pipes open and ``/`` as its directory. That process gets a
fresh Lua state whose heap is capped at ``MaxMemoryMB`` (0: no cap), sets its own OS limits
before any Lua runs (CPU seconds, address space, no file writes, no new process) and is killed
with its whole process group at the call's deadline (``timeout``, at most
``MaxExecutionTimeSeconds`` and the call's own limit) or when the call is cancelled, whatever
Lua is doing (a loop in a coroutine, a long pattern match, a growing table). ``pcall``,
``xpcall`` and ``coroutine.resume`` cannot catch the memory limit.

No Python object reaches Lua: the library functions that need the host (``json.decode``,
``http``, ``fs``, ``tools``) travel as JSON lines over the child's pipes and are answered here, by
:class:`_Host`, which treats every request as hostile.

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

The library functions are reached by a coroutine yield, so they cannot be called where Lua cannot
yield (inside a ``string.gsub`` replacement function, a ``table.sort`` comparator or a
``__tostring``/``__gc`` metamethod): there they raise "attempt to yield across a C-call boundary".

The script's return value is the result, as JSON; a script that returns nothing gets what it
printed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import logging
import marshal
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from agentfiles.builtins import BuiltinToolbox, LuaConfig

from ..base import ToolContext, ToolResult
from . import editing
from .common import BuiltinTool, json_result, json_safe
from .lua_child import LENGTH_BYTES, PARENT_FUNCTIONS
from .sandbox import FileSandbox, SandboxError

log = logging.getLogger("tools.lua")

#: The child's program (run as a file: ``-I -S`` puts neither the server nor site-packages on its path).
CHILD = Path(__file__).with_name("lua_child.py")
#: Bytes of address space the child gets on top of ``MaxMemoryMB`` (Python, lupa and their mappings).
BASE_ADDRESS_SPACE = 192 * 1024 * 1024
#: Bytes of address space of a child whose toolbox sets no memory limit (``MaxMemoryMB`` 0).
UNCAPPED_ADDRESS_SPACE = 4096 * 1024 * 1024
#: The longest line (bytes) the parent reads from the child: a library call or the result.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
#: Seconds between two looks at the call's cancellation while the child runs.
POLL_SECONDS = 0.05


@functools.cache
def _lupa_directory() -> str:
    """The directory that holds the ``lupa`` package, for the child's ``sys.path``."""
    spec = importlib.util.find_spec("lupa")
    assert spec is not None and spec.submodule_search_locations is not None  # noqa: S101 - narrows the type (never checks input)
    return str(Path(next(iter(spec.submodule_search_locations))).parent)


class _Stopped(Exception):
    """The child was stopped: its deadline passed, the call was cancelled or it broke the protocol."""


class _Child:
    """One running child: its pipes, the call's deadline, and the group kill.

    Args:
        seconds: the wall-clock limit from now.
        cancel: the call's cancellation, if any.
    """

    def __init__(self, seconds: float, cancel: threading.Event | None) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.cancel = cancel
        self.buffer = bytearray()
        self.proc = subprocess.Popen(  # noqa: S603 - our own child program under this interpreter
            [sys.executable, "-I", "-S", str(CHILD), _lupa_directory(), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={},
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )

    def remaining(self) -> float:
        """Seconds left before the deadline (0 at or past it)."""
        return max(0.0, self.deadline - time.monotonic())

    def check(self) -> None:
        """Raise :class:`_Stopped` once the deadline passed or the call was cancelled."""
        if self.remaining() <= 0 or (self.cancel is not None and self.cancel.is_set()):
            raise _Stopped("limit")

    def send(self, message: dict[str, Any]) -> None:
        """Write one message to the child (its length, then ``marshal`` data) without waiting past
        the deadline; ``message`` holds JSON types only."""
        assert self.proc.stdin is not None  # noqa: S101 - narrows the type (never checks input)
        payload = marshal.dumps(message)
        data = memoryview(len(payload).to_bytes(LENGTH_BYTES, "little") + payload)
        fd = self.proc.stdin.fileno()
        while data:
            self.check()
            _, writable, _ = select.select([], [fd], [], min(POLL_SECONDS, self.remaining()))
            if writable:
                try:
                    data = data[os.write(fd, data[: select.PIPE_BUF]) :]
                except BrokenPipeError:
                    raise _Stopped("gone") from None

    def receive(self) -> dict[str, Any]:
        """Read the child's next JSON line, waiting at most until the deadline.

        Raises:
            _Stopped: the deadline passed, the call was cancelled, the child ended without a
                line, or the line is too long or not a JSON object.
        """
        assert self.proc.stdout is not None  # noqa: S101 - narrows the type (never checks input)
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise _Stopped("protocol")
            self.check()
            readable, _, _ = select.select([fd], [], [], min(POLL_SECONDS, self.remaining()))
            if readable:
                data = os.read(fd, 1 << 16)
                if not data:
                    raise _Stopped("gone")
                self.buffer += data
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        try:
            message = json.loads(line)
        except ValueError:
            raise _Stopped("protocol") from None
        if not isinstance(message, dict):
            raise _Stopped("protocol")
        return message

    def end(self) -> int:
        """SIGKILL the child's process group (it is the group's leader), reap it and close the
        pipes; the child's exit status (negative: the signal that ended it). Once reaped, its pid
        may belong to a stranger: a second call only answers the status."""
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        status = self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        return status


class LuaTool(BuiltinTool):
    """``lua_<Name>_execute``: run a Lua script (module docstring).

    Args:
        box: the parsed ``LuaToolbox`` entry.
        sandbox: its file sandbox (for ``fs``).
    """

    def __init__(self, box: BuiltinToolbox, sandbox: FileSandbox) -> None:
        config = box.config
        assert isinstance(config, LuaConfig)  # noqa: S101 - narrows the type (never checks input)
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
        try:
            child = _Child(seconds, ctx.cancel)
        except OSError as error:
            return self.fail(f"the Lua process could not start: {error}")
        try:
            return self._converse(child, script, ctx)
        except _Stopped as stopped:
            return self._stopped_error(stopped, child.end(), ctx)
        finally:
            child.end()

    def _converse(self, child: _Child, script: str, ctx: ToolContext) -> ToolResult:
        """Hand the child its job, answer its library calls, and turn its last line into the result."""
        megabytes = self.config.MaxMemoryMB
        child.send(
            {
                "script": script,
                "seconds": child.seconds,
                "max_memory": megabytes * 1024 * 1024,
                "address_space": BASE_ADDRESS_SPACE + 2 * megabytes * 1024 * 1024
                if megabytes
                else UNCAPPED_ADDRESS_SPACE,
                # A CPU second past the wall-clock limit: the kill at the deadline comes first.
                "cpu_seconds": math.ceil(child.seconds) + 1,
                "output_max_bytes": ctx.output_max_bytes,
            }
        )
        host = _Host(self, ctx, child)
        while True:
            message = child.receive()
            if "call" not in message:
                break
            name, args = message.get("call"), message.get("args")
            if name not in PARENT_FUNCTIONS or not isinstance(args, list):
                raise _Stopped("protocol")
            child.send(host.answer(str(name), args))
            child.check()
        kind = message.get("done")
        if kind == "result":
            return json_result(json_safe(message.get("value")))
        if kind == "printed":
            return ToolResult(str(message.get("text")))
        if kind == "memory":
            # Without MaxMemoryMB, the address-space limit is the one that ran out.
            limit = megabytes or UNCAPPED_ADDRESS_SPACE // (1024 * 1024)
            return self.fail(f"the script used more than {limit} MB of memory and was stopped")
        if kind == "syntax":
            return self.fail(f"syntax error: {message.get('message')}")
        if kind == "runtime":
            return self.fail(f"runtime error: {message.get('message')}")
        if kind == "value":
            return self.fail(f"the script's return value: {message.get('message')}")
        log.warning("lua child failed", extra={"kind": "tools.lua_child", "error": str(message.get("message"))})
        return self.fail("the Lua process failed; the script was stopped")

    def _stopped_error(self, stopped: _Stopped, status: int, ctx: ToolContext) -> ToolResult:
        """The error for a child that ended without its answer (``status``: its exit status)."""
        if ctx.cancel is not None and ctx.cancel.is_set():
            return self.fail("the call was cancelled; the script was stopped")
        if str(stopped) == "limit" or status == -signal.SIGXCPU:
            return self.fail(f"the script ran longer than its time limit ({self._seconds_text(ctx)}) and was stopped")
        if str(stopped) == "protocol":
            return self.fail("the Lua process broke its protocol and was stopped")
        ended = f"signal {-status}" if status < 0 else f"exit status {status}"
        return self.fail(f"the Lua process ended without an answer ({ended}); the script was stopped")

    def _seconds_text(self, ctx: ToolContext) -> str:
        return f"{self.config.MaxExecutionTimeSeconds:g}s at most" if ctx.timeout is None else "its timeout"


class _Host:
    """The library functions the child asks the server for (``http``, ``fs``, ``tools``).

    Arguments arrive as JSON values from a process that runs hostile code: each function checks
    their types. :meth:`answer` gives ``{"status": "ok" | "nil" | "error", "value": ...}``.
    """

    def __init__(self, tool: LuaTool, ctx: ToolContext, child: _Child) -> None:
        self.tool, self.ctx, self.child = tool, ctx, child
        self.portal_calls = 0

    def answer(self, name: str, args: list[Any]) -> dict[str, Any]:
        """Run library function ``name`` (one of ``PARENT_FUNCTIONS``) on ``args``."""
        function = getattr(self, name)
        try:
            # Through JSON text: the child gets JSON types only (lists, not tuples), whatever a tool answered.
            return {"status": "ok", "value": json.loads(json.dumps(json_safe(function(*args))))}
        except _Missing as missing:
            return {"status": "nil", "value": str(missing)}
        except (SandboxError, editing.EditError, ValueError, TypeError, OSError, httpx.HTTPError) as error:
            return {"status": "error", "value": f"{name.replace('_', '.', 1)}: {error}"}

    # json
    def json_decode(self, text: Any = None) -> Any:
        return json.loads(str(text))

    # http
    def http_get(self, url: Any = None, headers: Any = None) -> Any:
        return self._request("GET", url, headers, None)

    def http_post(self, url: Any = None, body: Any = None, headers: Any = None) -> Any:
        return self._request("POST", url, headers, body)

    def http_request(self, options: Any = None) -> Any:
        spec = options if isinstance(options, dict) else {}
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
        headers = headers if isinstance(headers, dict) else {}
        content = body if isinstance(body, str) or body is None else json.dumps(body)
        limit = self.ctx.output_max_bytes
        with httpx.Client(timeout=max(0.1, self.child.remaining()), follow_redirects=False) as client:
            with client.stream(
                method.upper(), url, headers={str(k): str(v) for k, v in headers.items()}, content=content
            ) as response:
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > limit:
                        raise ValueError(f"the answer is longer than {limit} bytes")
                return {
                    "status": response.status_code,
                    "body": data.decode("utf-8", "replace"),
                    "headers": dict(response.headers),
                }

    # fs
    def fs_read(self, path: Any = None) -> str:
        try:
            target = self.tool.sandbox.check_read(str(path))
        except SandboxError as error:
            if "does not exist" in str(error):
                raise _Missing(str(error)) from None
            raise
        if not target.is_file():
            raise ValueError(f"{path} is not a regular file")
        return target.read_bytes().decode("utf-8", "replace")

    def fs_write(self, path: Any = None, content: Any = None) -> bool:
        data = str(content).encode("utf-8", "surrogatepass")
        editing.write_atomically(self.tool.sandbox.check_write(str(path), len(data)), data)
        return True

    def fs_list(self, path: Any = None) -> list[str]:
        target = self.tool.sandbox.check_read(str(path))
        return sorted(child.name for child in target.iterdir() if self.tool.sandbox.allows(str(child.resolve())))

    def fs_exists(self, path: Any = None) -> bool:
        return self.tool.sandbox.check_access(str(path)).exists()

    def fs_isdir(self, path: Any = None) -> bool:
        return self.tool.sandbox.check_access(str(path)).is_dir()

    def fs_isfile(self, path: Any = None) -> bool:
        return self.tool.sandbox.check_access(str(path)).is_file()

    def fs_mkdir(self, path: Any = None) -> bool:
        target = self.tool.sandbox.check_write(str(path))
        target.mkdir()
        return True

    def fs_patch(self, path: Any = None, patch: Any = None) -> Any:
        arguments = {"path": str(path), "patch": str(patch)}
        return editing.patch_file(self.tool.sandbox, self.tool.name, arguments, self.ctx)

    # tools
    def tools_list(self) -> list[dict[str, str]]:
        lookup = self.ctx.tools
        found = [lookup.get(name) for name in self.tool.config.AllowedTools] if lookup else []
        return [{"name": t.name, "description": t.description} for t in found if t is not None]

    def tools_call(self, name: Any = None, args: Any = None) -> dict[str, Any]:
        allowed = self.tool.config.AllowedTools
        if self.ctx.tools is None:
            raise ValueError("the tool portal is not available here (tools called through it get none)")
        if name not in allowed:
            raise ValueError(f"{name!r} is not in AllowedTools (allowed: {', '.join(allowed) or 'none'})")
        target = self.ctx.tools.get(str(name))
        if target is None:
            raise ValueError(f"no tool {name!r} in this agent")
        arguments = args if args is not None else {}
        if not isinstance(arguments, dict):
            raise ValueError("the arguments must be a table of name = value")
        self.portal_calls += 1
        context = dataclasses.replace(
            self.ctx,
            tools=None,
            timeout=self.child.remaining(),
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
            return {"status": "error", "error": text, "result_txt": text, "duration": duration}
        return {"status": "ok", "data": data, "result_txt": text, "duration": duration}


class _Missing(Exception):
    """A file that is not there: ``fs.read`` answers ``nil, message``."""
