"""Bash / binary tools, protocol v1 (spec/tools.md §1).

A bash tool is any executable that answers two sub-commands:

* ``<exe> describe`` prints a ``ScriptInfo`` JSON document (§1.3) on stdout;
* ``<exe> run <args...>`` does the work and prints its result on stdout (§1.4-1.6).

This module parses ``describe`` output (:func:`describe_script`), turns it into a :class:`BashTool`
whose wire name is ``bash_<slug>``, translates the LLM's JSON arguments into argv / stdin /
environment, and runs the process with a timeout that kills its whole process group.

Choices where the spec leaves room (tools.md §16 item 3-4, 7):

* Flags are spelled literally ``--<name>`` (no ``_`` → ``-`` rewriting).
* Arguments are emitted in the order the script declares them, whatever the JSON key order.
* ``stdin``-mode values (all stdin arguments, in declaration order) are joined with a blank line
  (``"\\n\\n"``), written once, and stdin is closed. Without any stdin argument, stdin is
  ``/dev/null``.
* ``multiple`` arity: the schema type is an array; each item repeats the transport (one
  positional per item, ``--name item`` per item, ``--name=item`` per item, one stdin part per
  item); for ``env`` mode the items are joined with ``"\\n"``. A bare scalar counts as a list of
  one. A ``multiple`` argument is never required.
* Values: strings are passed as they are; numbers and booleans as their JSON text (``3``,
  ``2.5``, ``true``); ``null`` counts as absent; objects and arrays (except the items list of a
  ``multiple`` argument) are a tool error returned to the LLM. Keys the script does not declare
  are ignored, as agents-exe does.
* A missing ``single`` argument is a tool error; the process is not started.
* ``BasenameFilter`` keeps the files whose basename ends with it (``".sh"``), or, when it holds
  glob characters, whose basename matches it as a glob (:func:`list_tool_files`).
* ``AGENT_*`` variables are set after the ``env``-mode arguments, so an LLM-supplied value can
  never overwrite them. An inherited ``AGENT_SESSION_JSON`` is removed unless the call asks for
  the full session.
* On a non-zero exit the LLM gets ``Error: tool <name> exited with code <n>: <stderr tail>``
  (the last ~2000 characters of stderr; stdout's tail instead, labelled, when stderr is empty).
  stderr never appears in a successful result.
* When the main process has exited but a background grandchild still holds stdout/stderr open,
  the call waits at most :data:`EXIT_DRAIN_GRACE` seconds for end-of-file and then returns with
  what it has; such detached children are left running (only a timeout or a cancellation kills
  the process group).
* stdout is kept up to :data:`MAX_STDOUT_BYTES`; beyond that it is drained and dropped, and a
  text result says it was truncated.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import Tool, ToolContext, ToolResult
from .names import normalize_tool_name

#: Seconds a ``describe`` call may take before the script is dropped.
DESCRIBE_TIMEOUT = 10.0
#: Seconds between SIGTERM and SIGKILL to the process group (tools.md §1.6).
KILL_GRACE = 0.1
#: Seconds to wait for end-of-file on stdout/stderr after the main process exited.
EXIT_DRAIN_GRACE = 0.5
#: Characters of stderr (or stdout) quoted in an error text.
ERROR_TAIL_CHARS = 2000
#: Bytes of stdout kept for the result.
MAX_STDOUT_BYTES = 16 * 1024 * 1024
#: Bytes of stderr kept (only its tail is ever used).
_STDERR_KEEP = 64 * 1024
#: How often (seconds) the wait loop checks for process exit, deadline and cancellation.
_POLL_INTERVAL = 0.05
#: How many ``describe`` calls run at once when loading a directory.
_DESCRIBE_WORKERS = 8

ARITIES = ("single", "optional", "multiple")
MODES = ("positional", "dashdashspace", "dashdashequal", "stdin", "env")
#: ``describe`` types passed through to the JSON schema; others are declared as ``string``
#: (values reach the script as text anyway, and LLM APIs reject unknown schema types).
_SCHEMA_TYPES = {"string", "number", "integer", "boolean"}
#: File suffixes that mark sub-agent files in a ``toolDirectory`` (agent-files.md), never tools.
AGENT_FILE_SUFFIXES = (".json", ".tramaj")


class DescribeError(Exception):
    """A script could not be loaded: ``describe`` failed, timed out or printed a bad document."""


class BashToolLoadError(Exception):
    """A toolbox path is unusable: the directory or file is missing or not executable."""


class _ArgumentError(Exception):
    """The LLM's arguments cannot be turned into a command line (message shown to the LLM)."""


# --------------------------------------------------------------------------- describe document


@dataclass(frozen=True)
class ScriptArg:
    """One argument declared by ``describe`` (tools.md §1.3).

    ``arity`` is ``single`` (required), ``optional`` or ``multiple`` (a list, never required);
    ``mode`` is ``positional``, ``dashdashspace``, ``dashdashequal``, ``stdin`` or ``env``.
    """

    name: str
    description: str
    type: str
    backing_type: str
    arity: str
    mode: str

    @property
    def required(self) -> bool:
        """Whether the LLM must supply this argument."""
        return self.arity == "single"

    @property
    def env_name(self) -> str:
        """The variable name used in ``env`` mode: upper-cased, ``-`` → ``_``."""
        return self.name.upper().replace("-", "_")

    def json_schema(self) -> dict[str, Any]:
        """The JSON-schema property for this argument."""
        scalar = self.type if self.type in _SCHEMA_TYPES else "string"
        if self.arity == "multiple":
            return {"description": self.description, "type": "array", "items": {"type": scalar}}
        return {"description": self.description, "type": scalar}


@dataclass(frozen=True)
class ScriptInfo:
    """A parsed ``describe`` document (tools.md §1.3).

    ``empty_message`` is ``None`` for ``{"tag": "DoNothing"}`` (the default) and the text of
    ``{"tag": "AddMessage", "contents": text}`` otherwise. ``output_media_type`` is the MIME type
    of stdout when the script prints binary data.
    """

    slug: str
    description: str
    args: tuple[ScriptArg, ...] = ()
    empty_message: str | None = None
    output_media_type: str | None = None

    @classmethod
    def parse(cls, data: Any) -> ScriptInfo:
        """Validate a decoded ``describe`` document.

        Raises:
            DescribeError: naming the first problem found (missing/ill-typed field, unknown
                arity or mode, duplicate argument name, bad ``empty-result``).
        """
        if not isinstance(data, dict):
            raise DescribeError("describe must print a JSON object")
        slug = _require_str(data, "slug", "describe")
        if not slug:
            raise DescribeError("describe: 'slug' must not be empty")
        description = _require_str(data, "description", "describe")
        raw_args = data.get("args")
        if not isinstance(raw_args, list):
            raise DescribeError("describe: 'args' must be a list")
        args: list[ScriptArg] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_args):
            where = f"describe: args[{index}]"
            if not isinstance(raw, dict):
                raise DescribeError(f"{where} must be an object")
            arg = ScriptArg(
                name=_require_str(raw, "name", where),
                description=_require_str(raw, "description", where),
                type=_require_str(raw, "type", where),
                backing_type=_require_str(raw, "backing_type", where),
                arity=_require_str(raw, "arity", where),
                mode=_require_str(raw, "mode", where),
            )
            if not arg.name:
                raise DescribeError(f"{where}: 'name' must not be empty")
            if arg.arity not in ARITIES:
                expected = ", ".join(ARITIES)
                raise DescribeError(f"{where}: unknown arity {arg.arity!r} (expected one of {expected})")
            if arg.mode not in MODES:
                expected = ", ".join(MODES)
                raise DescribeError(f"{where}: unknown mode {arg.mode!r} (expected one of {expected})")
            if arg.name in seen:
                raise DescribeError(f"{where}: duplicate argument name {arg.name!r}")
            seen.add(arg.name)
            args.append(arg)
        media_type = data.get("output-media-type")
        if media_type is not None and (not isinstance(media_type, str) or not media_type):
            raise DescribeError("describe: 'output-media-type' must be a non-empty string")
        return cls(
            slug=slug,
            description=description,
            args=tuple(args),
            empty_message=_parse_empty_result(data.get("empty-result")),
            output_media_type=media_type,
        )


def _require_str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        state = "missing" if key not in obj else f"a {type(value).__name__}, not a string"
        raise DescribeError(f"{where}: '{key}' is {state}")
    return value


def _parse_empty_result(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("tag") == "DoNothing":
            return None
        if value.get("tag") == "AddMessage" and isinstance(value.get("contents"), str):
            return value["contents"]
    raise DescribeError(
        "describe: 'empty-result' must be "
        '{"tag": "DoNothing"} or {"tag": "AddMessage", "contents": "<text>"}'
    )


# --------------------------------------------------------------------------- process runner


@dataclass
class ProcessOutcome:
    """What :func:`run_process` observed.

    ``returncode`` is negative when a signal ended the process (``-9`` for SIGKILL) and ``None``
    only if the process could not be reaped. ``stderr`` holds at most the last 64 KiB.
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    cancelled: bool = False
    stdout_truncated: bool = False


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it ``KILL_GRACE`` seconds later (tools.md §1.6).

    SIGKILL goes to the group even when the leader died of SIGTERM, because grandchildren may
    ignore SIGTERM. The group id is the leader's pid (``start_new_session=True``).
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return  # nobody left in the group
    try:
        proc.wait(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass
    else:
        # The leader is gone, but members that ignore SIGTERM may remain: give them the rest of
        # the grace, polling whether anyone is left (signal 0 only checks).
        until = time.monotonic() + KILL_GRACE
        while time.monotonic() < until:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.01)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    argv: list[str],
    *,
    stdin_data: bytes | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    cancel: Any = None,
) -> ProcessOutcome:
    """Run ``argv`` in a new session (own process group) and collect stdout and stderr.

    Args:
        argv: the command line; ``argv[0]`` is the executable.
        stdin_data: bytes written to stdin before it is closed; ``None`` means ``/dev/null``.
        env: the full environment of the child (``None`` inherits ours).
        timeout: seconds before the whole group is killed; ``None`` for no limit.
        cancel: an optional ``threading.Event``; when set, the group is killed as on timeout.
    Returns:
        a :class:`ProcessOutcome`; never raises for the child's behaviour.
    Raises:
        OSError / ValueError: when the process cannot be started (missing file, no execute
            permission, environment too large, NUL byte in an argument).
    """
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        close_fds=True,
    )
    started = time.monotonic()
    deadline = started + timeout if timeout is not None else None
    stdout = bytearray()
    stderr = bytearray()
    truncated = False
    timed_out = cancelled = False
    killed = False
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    try:
        pending = memoryview(stdin_data or b"")
        if proc.stdin is not None:
            if pending:
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)

        def pump(wait: float) -> None:
            nonlocal pending, truncated
            for key, _ in sel.select(wait):
                stream = key.fileobj
                if stream is proc.stdin:
                    try:
                        # At most PIPE_BUF bytes: such a write to a pipe reported writable
                        # does not block.
                        written = os.write(key.fd, pending[: select.PIPE_BUF])
                    except OSError:
                        written = len(pending)  # the child stopped reading; drop the rest
                    pending = pending[written:]
                    if not pending:
                        sel.unregister(stream)
                        stream.close()  # type: ignore[union-attr]
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(stream)
                    stream.close()  # type: ignore[union-attr]
                elif stream is proc.stdout:
                    room = MAX_STDOUT_BYTES - len(stdout)
                    if len(data) > room:
                        truncated = True
                    stdout.extend(data[: max(room, 0)])
                else:
                    stderr.extend(data)
                    if len(stderr) > _STDERR_KEEP:
                        del stderr[: len(stderr) - _STDERR_KEEP]

        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                # The main process is done: read what is left, but do not wait forever on pipes
                # a detached grandchild may keep open.
                if exited_at is None:
                    exited_at = now
                if not sel.get_map() or now - exited_at >= EXIT_DRAIN_GRACE:
                    break
            else:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                if deadline is not None and now >= deadline:
                    timed_out = True
                    break
            wait = _POLL_INTERVAL
            if deadline is not None and exited_at is None:
                wait = max(0.0, min(wait, deadline - now))
            if sel.get_map():
                pump(wait)
            else:
                # Pipes closed but the process still runs (it closed its own stdout/stderr).
                try:
                    proc.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    pass

        if timed_out or cancelled:
            _kill_group(proc)
            killed = True
            # Collect whatever the dying group flushed, briefly.
            drain_until = time.monotonic() + KILL_GRACE
            while sel.get_map() and time.monotonic() < drain_until:
                pump(max(0.0, drain_until - time.monotonic()))
        try:
            returncode: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
    except BaseException:
        if not killed:
            _kill_group(proc)
        raise
    finally:
        for key in list(sel.get_map().values()):
            sel.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
    return ProcessOutcome(
        returncode=returncode,
        stdout=bytes(stdout),
        stderr=bytes(stderr),
        timed_out=timed_out,
        cancelled=cancelled,
        stdout_truncated=truncated,
    )


def _tail(data: bytes, limit: int = ERROR_TAIL_CHARS) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    if len(text) > limit:
        return "…" + text[-limit:]
    return text


def _format_seconds(seconds: float | None) -> str:
    return f"{seconds:g}s" if seconds is not None else "?s"


# --------------------------------------------------------------------------- loading


def _is_executable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def describe_script(path: Path, *, timeout: float = DESCRIBE_TIMEOUT) -> ScriptInfo:
    """Run ``<path> describe`` and parse its output.

    Raises:
        DescribeError: the script could not start, exited non-zero, timed out, or printed
            something that is not a valid ``ScriptInfo`` document.
    """
    try:
        outcome = run_process([str(path), "describe"], stdin_data=None, env=None, timeout=timeout)
    except (OSError, ValueError) as exc:
        raise DescribeError(f"describe could not be started: {exc}") from exc
    if outcome.timed_out:
        raise DescribeError(f"describe timed out after {_format_seconds(timeout)}")
    if outcome.returncode != 0:
        detail = _tail(outcome.stderr, 500)
        raise DescribeError(
            f"describe exited with code {outcome.returncode}" + (f": {detail}" if detail else "")
        )
    try:
        data = json.loads(outcome.stdout.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        raise DescribeError(f"describe did not print valid JSON: {exc}") from exc
    return ScriptInfo.parse(data)


def load_single_tool(path: Path, *, timeout: float = DESCRIBE_TIMEOUT) -> BashTool:
    """Load one bash tool (a ``SingleTool`` toolbox, or one file of a directory).

    Raises:
        BashToolLoadError: ``path`` is missing, not a regular file, or not executable.
        DescribeError: ``describe`` failed (see :func:`describe_script`).
    """
    path = Path(path)
    if not path.exists():
        raise BashToolLoadError(f"{path}: no such file")
    if not _is_executable_file(path):
        raise BashToolLoadError(f"{path}: not an executable regular file")
    return BashTool(path, describe_script(path, timeout=timeout))


def _basename_matches(name: str, basename_filter: str) -> bool:
    if any(ch in basename_filter for ch in "*?["):
        return fnmatch.fnmatchcase(name, basename_filter)
    return name.endswith(basename_filter)


def list_tool_files(directory: Path, basename_filter: str | None = None) -> list[Path]:
    """The candidate tools of a directory, sorted by name (not recursive).

    Keeps executable regular files (symlinks followed), skips sub-agent files (``*.json``,
    ``*.tramaj``). ``basename_filter``, when given, keeps only files whose basename *ends with*
    it (``".sh"`` keeps ``read.sh``): the spec leaves the semantics open and every real agent
    file uses it as a suffix. A filter holding glob characters (``*?[``) is matched as a glob
    on the whole basename instead (``"git-*"``), which a suffix could not express.

    Raises:
        BashToolLoadError: ``directory`` is missing or not a directory.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise BashToolLoadError(f"{directory}: tool directory not found")
    found = []
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(AGENT_FILE_SUFFIXES):
            continue
        if basename_filter and not _basename_matches(entry.name, basename_filter):
            continue
        if _is_executable_file(entry):
            found.append(entry)
    return found


def load_bash_directory(
    path: Path, basename_filter: str | None = None, *, timeout: float = DESCRIBE_TIMEOUT
) -> tuple[list[BashTool], list[str]]:
    """Load every tool of a directory with error isolation (tools.md §1.2).

    ``describe`` runs concurrently for the files (see :func:`list_tool_files` for which files).
    A file whose ``describe`` fails is dropped and yields one warning ``"<file>: <reason>"``.

    Returns:
        ``(tools, warnings)``, tools in file-name order.
    Raises:
        BashToolLoadError: the directory is missing.
    """
    files = list_tool_files(path, basename_filter)
    if not files:
        return [], []

    def load(file: Path) -> BashTool | str:
        try:
            return BashTool(file, describe_script(file, timeout=timeout))
        except DescribeError as exc:
            return f"{file}: {exc}"

    with ThreadPoolExecutor(max_workers=min(_DESCRIBE_WORKERS, len(files))) as pool:
        outcomes = list(pool.map(load, files))
    tools = [o for o in outcomes if isinstance(o, BashTool)]
    warnings = [o for o in outcomes if isinstance(o, str)]
    return tools, warnings


# --------------------------------------------------------------------------- the tool


@dataclass
class _Invocation:
    argv: list[str]
    stdin_data: bytes | None
    env: dict[str, str] = field(default_factory=dict)


def _render_value(arg: ScriptArg, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, dict):
        kind = "an object"
    elif isinstance(value, list):
        kind = "an array"
    else:
        kind = type(value).__name__
    raise _ArgumentError(f"argument '{arg.name}' must be a string, a number or a boolean, not {kind}")


class BashTool(Tool):
    """A describe/run executable exposed to the LLM as ``bash_<slug>`` (tools.md §1).

    Attributes:
        path: the executable.
        info: its parsed ``describe`` document.
        slug: ``info.slug``.
        name: the wire name; ``bash_<slug>`` when that is a valid LLM name, else its normalized
            form (names.py). The toolset may assign another one to settle collisions.
    """

    def __init__(self, path: Path, info: ScriptInfo, name: str | None = None) -> None:
        self.path = Path(path)
        self.info = info
        self.slug = info.slug
        self.name = name or normalize_tool_name(self.original_name)
        self.description = info.description
        self.parameters = {
            "type": "object",
            "properties": {arg.name: arg.json_schema() for arg in info.args},
            "required": [arg.name for arg in info.args if arg.required],
            "additionalProperties": False,
        }

    def __repr__(self) -> str:
        return f"BashTool(name={self.name!r}, path={str(self.path)!r})"

    @property
    def original_name(self) -> str:
        """``bash_<slug>``, the name before normalization."""
        return f"bash_{self.slug}"

    def system_properties(self) -> list[dict[str, Any]]:
        """As agents-exe stores bash arguments: ``OpaqueParamType`` carrying the declared type
        (``MultipleParamType`` for ``multiple`` arity)."""
        return [
            {
                "propertyDescription": arg.description,
                "propertyKey": arg.name,
                "propertyRequired": arg.required,
                "propertyType": {
                    "tag": "MultipleParamType" if arg.arity == "multiple" else "OpaqueParamType",
                    "contents": arg.type,
                },
            }
            for arg in self.info.args
        ]

    def build_invocation(self, arguments: Mapping[str, Any]) -> _Invocation:
        """Translate the LLM's arguments into argv, stdin and ``env``-mode variables (§1.4).

        Raises:
            _ArgumentError: missing required arguments or values of the wrong shape.
        """
        missing = [
            arg.name for arg in self.info.args if arg.required and arguments.get(arg.name) is None
        ]
        if missing:
            raise _ArgumentError("missing required argument" + ("s" if len(missing) > 1 else "")
                                 + ": " + ", ".join(missing))
        argv = [str(self.path), "run"]
        stdin_parts: list[str] = []
        env: dict[str, str] = {}
        for arg in self.info.args:
            value = arguments.get(arg.name)
            if value is None:
                continue
            if arg.arity == "multiple":
                items = value if isinstance(value, list) else [value]
                values = [_render_value(arg, item) for item in items if item is not None]
            else:
                values = [_render_value(arg, value)]
            if not values:
                continue
            if arg.mode == "positional":
                argv.extend(values)
            elif arg.mode == "dashdashspace":
                for v in values:
                    argv.extend([f"--{arg.name}", v])
            elif arg.mode == "dashdashequal":
                argv.extend(f"--{arg.name}={v}" for v in values)
            elif arg.mode == "stdin":
                stdin_parts.extend(values)
            else:  # env
                env[arg.env_name] = "\n".join(values)
        has_stdin = any(arg.mode == "stdin" for arg in self.info.args)
        stdin_data = "\n\n".join(stdin_parts).encode("utf-8") if has_stdin else None
        return _Invocation(argv=argv, stdin_data=stdin_data, env=env)

    def environment(self, ctx: ToolContext, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment (§1.5): ours, then ``extra`` (``env``-mode arguments), then
        the ``AGENT_*`` variables, which therefore always win."""
        env = dict(os.environ)
        env.pop("AGENT_SESSION_JSON", None)
        env.update(extra or {})
        env.update(
            {
                "AGENT_SESSION_ID": ctx.session_id,
                "AGENT_CONVERSATION_ID": ctx.conversation_id,
                "AGENT_TURN_ID": ctx.turn_id,
                "AGENT_AGENT_ID": ctx.agent_slug,
            }
        )
        if ctx.session_json is not None:
            env["AGENT_SESSION_JSON"] = ctx.session_json
        else:
            env.pop("AGENT_SESSION_JSON", None)
        return env

    def call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run ``<exe> run ...`` and turn its output into a result (§1.4-1.6).

        Errors (all ``is_error=True``, never raised): bad arguments (``Error: tool <name>: ...``),
        start failure, timeout (``Error: tool <name> timed out after <N>s``), cancellation,
        non-zero exit (``Error: tool <name> exited with code <n>: <stderr tail>``).
        """
        try:
            return self._call(arguments, ctx)
        except Exception as exc:  # a tool failure must reach the LLM, not crash the step
            return ToolResult.error(f"Error: tool {self.name} failed: {type(exc).__name__}: {exc}")

    def _call(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not isinstance(arguments, Mapping):
            return ToolResult.error(f"Error: tool {self.name}: arguments must be a JSON object")
        try:
            invocation = self.build_invocation(arguments)
        except _ArgumentError as exc:
            return ToolResult.error(f"Error: tool {self.name}: {exc}")
        try:
            outcome = run_process(
                invocation.argv,
                stdin_data=invocation.stdin_data,
                env=self.environment(ctx, invocation.env),
                timeout=ctx.timeout,
                cancel=ctx.cancel,
            )
        except (OSError, ValueError) as exc:
            return ToolResult.error(f"Error: tool {self.name} could not be started: {exc}")
        if outcome.cancelled:
            return ToolResult.error(f"Error: tool {self.name} was cancelled")
        if outcome.timed_out:
            return ToolResult.error(f"Error: tool {self.name} timed out after {_format_seconds(ctx.timeout)}")
        if outcome.returncode != 0:
            return ToolResult.error(self._failure_text(outcome))
        if outcome.stdout_truncated and self.info.output_media_type:
            # Cut binary data is useless; text can be cut (see _success_response).
            return ToolResult.error(
                f"Error: tool {self.name} printed more than {MAX_STDOUT_BYTES} bytes of "
                f"{self.info.output_media_type}; the output was dropped"
            )
        return ToolResult(self._success_response(outcome))

    def _failure_text(self, outcome: ProcessOutcome) -> str:
        code = outcome.returncode
        if code is None:
            what = "did not exit"
        elif code < 0:
            try:
                what = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"was killed by signal {-code}"
        else:
            what = f"exited with code {code}"
        stderr_tail = _tail(outcome.stderr)
        if stderr_tail:
            return f"Error: tool {self.name} {what}: {stderr_tail}"
        stdout_tail = _tail(outcome.stdout)
        if stdout_tail:
            return f"Error: tool {self.name} {what} (nothing on stderr); stdout: {stdout_tail}"
        return f"Error: tool {self.name} {what} without any output"

    def _success_response(self, outcome: ProcessOutcome) -> Any:
        if not outcome.stdout:
            return self.info.empty_message if self.info.empty_message is not None else ""
        if self.info.output_media_type:
            return {
                "type": "media",
                "mimeType": self.info.output_media_type,
                "base64Data": base64.b64encode(outcome.stdout).decode("ascii"),
            }
        text = outcome.stdout.decode("utf-8", errors="replace")
        if outcome.stdout_truncated:
            text += f"\n[output truncated: only the first {MAX_STDOUT_BYTES} bytes are kept]"
        return text
