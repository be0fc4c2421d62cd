"""The System toolbox: ``system_<Name>_system_info {capability, ...}`` (docs/guide-toolboxes.md §1).

One tool; ``capability`` picks what it does, among those the toolbox lists in ``Capabilities``.
Answers are ``{"capability", "data", "executionTime"}`` (JSON), except ``attach-file`` whose answer
is the file itself as a media result. A capability the toolbox does not list, a missing
argument, a refused path or command: an error the model sees, naming the tool.

* Information: ``date``, ``operating-system``, ``env-vars`` (names containing ``EnvVarFilter``,
  of the environment tool processes get: never the server's own configuration, and only the
  allow-list under ``--tool-env strict``; docs/tools.md, "Tool environments"), ``running-user``,
  ``hostname``, ``working-directory``, ``process-info``, ``uptime``.
* Files, through the toolbox's sandbox: ``attach-file`` (at most 50 MiB and the sandbox's limit)
  and ``list-directory``.
* ``execute-command``: ``sh -c COMMAND`` in the working directory, its process group ended with
  the call. With ``CommandFilter``, the filter program gets the command on stdin and must print
  ``{"acceptance": "allowed", "note": ...}``; anything else refuses it and nothing runs.
* The calling session's tool calls and the sessions it may see: ``tools_app.builtin.introspection``.
* Mail between sessions (``send-message``, ``spawn-session``, ``watch-session``,
  ``unwatch-session``, ``wait``): ``tools_app.builtin.agentmail``.
"""

from __future__ import annotations

import base64
import getpass
import json
import mimetypes
import os
import platform
import pwd
import socket
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentfiles.builtins import DEFAULT_MAX_FILE_SIZE, BuiltinToolbox, SystemConfig
from foundation.toolenv import base_environment

from ..base import ToolContext, ToolResult
from ..bash.process import run_process, tail_text
from . import agentmail, introspection
from .common import BuiltinTool, ShellError, json_result, run_shell
from .sandbox import FileSandbox, SandboxError

#: Seconds a CommandFilter may take to answer.
FILTER_TIMEOUT = 30.0
#: Entries list-directory returns at most.
MAX_LIST_ENTRIES = 1000

#: Media types by extension for attach-file, beyond what ``mimetypes`` knows everywhere.
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".svg": "image/svg+xml",
    ".mp3": "audio/mpeg",
    ".wav": "audio/wav",
    ".ogg": "audio/ogg",
    ".aac": "audio/aac",
    ".flac": "audio/flac",
    ".mp4": "video/mp4",
    ".webm": "video/webm",
    ".mov": "video/quicktime",
    ".avi": "video/x-msvideo",
    ".pdf": "application/pdf",
    ".json": "application/json",
    ".xml": "application/xml",
}

#: The arguments each capability takes besides ``capability`` (JSON schema properties).
ARGUMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "attach-file": {"filepath": {"type": "string", "description": "attach-file: the file to attach"}},
    "list-directory": {
        "path": {"type": "string", "description": "list-directory: the directory"},
        "recursive": {"type": "boolean", "description": "list-directory: descend into subdirectories (false)"},
        "include_hidden": {"type": "boolean", "description": "list-directory: include dot files (false)"},
    },
    "execute-command": {"command": {"type": "string", "description": "execute-command: the shell command"}},
    **introspection.ARGUMENTS,
    **agentmail.ARGUMENTS,
}


class SystemTool(BuiltinTool):
    """``system_<Name>_system_info``: the capabilities a SystemToolbox lists.

    Args:
        box: the parsed ``SystemToolbox`` entry.
        sandbox: its file sandbox.
        command_filter: the resolved ``CommandFilter`` program, if any.
    """

    def __init__(self, box: BuiltinToolbox, sandbox: FileSandbox, command_filter: Path | None) -> None:
        config = box.config
        assert isinstance(config, SystemConfig)  # noqa: S101 - narrows the type (never checks input)
        self.config = config
        self.sandbox = sandbox
        self.command_filter = command_filter
        self.capabilities = box.capabilities
        properties: dict[str, Any] = {
            "capability": {"type": "string", "enum": self.capabilities, "description": "what to do"}
        }
        for capability in self.capabilities:
            properties.update(ARGUMENTS.get(capability, {}))
        super().__init__(
            box,
            f"system_{config.Name}_system_info",
            f"{config.Description or config.Name}. Capabilities: {', '.join(self.capabilities) or 'none'}."
            " Pass the capability and its arguments.",
            {"type": "object", "properties": properties, "required": ["capability"]},
        )
        self._handlers: dict[str, Callable[[dict[str, Any], ToolContext], Any]] = {
            "date": lambda a, c: _date(),
            "operating-system": lambda a, c: _operating_system(),
            "env-vars": lambda a, c: self._env_vars(),
            "running-user": lambda a, c: _running_user(),
            "hostname": lambda a, c: {"hostname": socket.gethostname(), "fqdn": socket.getfqdn()},
            "working-directory": lambda a, c: {"path": os.getcwd()},
            "process-info": lambda a, c: _process_info(),
            "uptime": lambda a, c: _uptime(),
            "list-directory": self._list_directory,
            "execute-command": self._execute_command,
        }

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the capability named in ``arguments["capability"]`` (module docstring)."""
        capability = arguments.get("capability") if isinstance(arguments, dict) else None
        if not isinstance(capability, str) or not capability:
            return self.fail(f'the argument "capability" is required (one of: {", ".join(self.capabilities)})')
        if capability not in self.capabilities:
            enabled = ", ".join(self.capabilities) or "none"
            return self.fail(f"capability {capability!r} is not enabled in this toolbox (enabled: {enabled})")
        started = time.monotonic()
        try:
            if capability == "attach-file":
                return self._attach_file(arguments)
            handler = self._handlers.get(capability)
            if handler is not None:
                data = handler(arguments, ctx)
            elif capability in agentmail.CAPABILITIES:
                data = agentmail.run(capability, arguments, ctx)
            else:
                data = introspection.run(self.config, capability, arguments, ctx)
        except (SandboxError, introspection.CapabilityError) as error:
            return self.fail(str(error))
        except OSError as error:
            return self.fail(f"{capability}: {error.strerror or error}")
        if isinstance(data, ToolResult):
            return data
        return json_result(
            {"capability": capability, "data": data, "executionTime": round(time.monotonic() - started, 6)}
        )

    def _env_vars(self) -> dict[str, Any]:
        wanted = self.config.EnvVarFilter
        # what a tool process would get (docs/tools.md, "Tool environments"), not the server's
        variables = {
            name: value
            for name, value in sorted(base_environment().items())
            if wanted is None or wanted.lower() in name.lower()
        }
        return {"variables": variables, "count": len(variables), "filter": wanted}

    def _attach_file(self, arguments: dict[str, Any]) -> ToolResult:
        given = _string_argument(arguments, "filepath")
        path = self.sandbox.check_read(given)
        if not path.is_file():
            raise SandboxError(f"{given!r} is not a file")
        size = path.stat().st_size
        if size > DEFAULT_MAX_FILE_SIZE:
            raise SandboxError(f"{given!r} is {size} bytes; attach-file takes at most {DEFAULT_MAX_FILE_SIZE}")
        media_type = MEDIA_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0]
        return ToolResult(
            {
                "type": "media",
                "mimeType": media_type or "application/octet-stream",
                "base64Data": base64.b64encode(path.read_bytes()).decode("ascii"),
                "filename": path.name,
            }
        )

    def _list_directory(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        given = arguments.get("path") or "."
        if not isinstance(given, str):
            raise introspection.CapabilityError('"path" must be a string')
        root = self.sandbox.check_read(given)
        if not root.is_dir():
            raise SandboxError(f"{given!r} is not a directory")
        recursive = arguments.get("recursive") is True
        hidden = arguments.get("include_hidden") is True
        entries: list[dict[str, Any]] = []
        truncated = False
        pending = [root]
        while pending and not truncated:
            directory = pending.pop(0)
            for child in sorted(directory.iterdir(), key=lambda p: p.name):
                if not hidden and child.name.startswith("."):
                    continue
                real = Path(os.path.realpath(child))
                if not self.sandbox.allows(str(real), None):
                    continue
                if len(entries) == MAX_LIST_ENTRIES:
                    truncated = True
                    break
                stat = real.stat() if real.exists() else child.lstat()
                is_dir = real.is_dir()
                entries.append(
                    {
                        "name": str(child.relative_to(root)),
                        "type": "directory" if is_dir else "file",
                        "size": 0 if is_dir else stat.st_size,
                        "modified": datetime.fromtimestamp(stat.st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                )
                if recursive and is_dir and not child.is_symlink():
                    pending.append(child)
        result: dict[str, Any] = {"path": given, "entries": entries, "total": len(entries)}
        if truncated:
            result["truncated"] = True
        return result

    def _execute_command(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        command = _string_argument(arguments, "command")
        if self.command_filter is not None:
            self._ask_filter(command, ctx)
        try:
            return run_shell(command, ctx)
        except ShellError as error:
            raise introspection.CapabilityError(str(error)) from None

    def _ask_filter(self, command: str, ctx: ToolContext) -> None:
        """Run the CommandFilter; return only when it answers ``allowed``.

        Raises:
            introspection.CapabilityError: refused, with the filter's note or what was wrong.
        """
        assert self.command_filter is not None  # noqa: S101 - narrows the type (never checks input)
        timeout = FILTER_TIMEOUT if ctx.timeout is None else min(FILTER_TIMEOUT, ctx.timeout)
        try:
            outcome = run_process(
                [str(self.command_filter)],
                stdin_data=command.encode("utf-8", "surrogatepass"),
                env=base_environment(),
                timeout=timeout,
                max_stdout=64 * 1024,
                cancel=ctx.cancel,
            )
        except (OSError, ValueError) as error:
            raise introspection.CapabilityError(f"command refused: the command filter could not run: {error}") from None
        if outcome.timed_out or outcome.cancelled or outcome.returncode != 0:
            why = "timed out" if outcome.timed_out else f"exited with {outcome.returncode}: {tail_text(outcome.stderr)}"
            raise introspection.CapabilityError(f"command refused: the command filter {why}")
        try:
            answer = json.loads(bytes(outcome.stdout))
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or "acceptance" not in answer or "note" not in answer:
            raise introspection.CapabilityError(
                'command refused: the command filter must print {"acceptance": "allowed" | "refused", "note": ...}'
            )
        if answer["acceptance"] != "allowed":
            raise introspection.CapabilityError(f"command refused by the command filter: {answer['note']}")


def _string_argument(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise introspection.CapabilityError(f'the argument "{key}" is required')
    return value


def _date() -> dict[str, Any]:
    now = datetime.now(UTC)
    local = now.astimezone()
    return {
        "utc": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "local": local.strftime("%Y-%m-%dT%H:%M:%S.%f"),
        "timezone": local.tzname(),
        "timezoneOffset": local.strftime("%z"),
    }


def _operating_system() -> dict[str, Any]:
    distribution = None
    try:
        distribution = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        pass
    return {
        "name": platform.system(),
        "version": platform.version(),
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "distribution": distribution,
    }


def _running_user() -> dict[str, Any]:
    uid, gid = os.getuid(), os.getgid()
    shell: str | None
    try:
        entry = pwd.getpwuid(uid)
        name, home, shell = entry.pw_name, entry.pw_dir, entry.pw_shell
    except KeyError:
        name, home, shell = getpass.getuser(), os.path.expanduser("~"), os.environ.get("SHELL")
    return {"username": name, "uid": uid, "gid": gid, "home": home, "shell": shell}


def _process_info() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "parentPid": os.getppid(),
        "processName": Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python",
        "executable": sys.executable,
    }


def _uptime() -> dict[str, Any]:
    seconds = float(Path("/proc/uptime").read_text().split()[0])
    boot = datetime.fromtimestamp(time.time() - seconds, UTC)
    return {"uptimeSeconds": round(seconds, 2), "bootTime": boot.strftime("%Y-%m-%dT%H:%M:%SZ")}
