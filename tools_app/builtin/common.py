"""What every built-in tool shares: its base class, results, and where its paths start from."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any, Protocol

from agentfiles.builtins import BuiltinToolbox
from agentfiles.schema import AgentSpec
from foundation.toolenv import base_environment

from ..base import Tool, ToolContext, ToolResult
from ..bash.process import format_seconds, run_process
from ..names import normalize_tool_name
from .sandbox import FileSandbox


class AgentLike(Protocol):
    """What the built-in toolboxes need of ``agentfiles.loader.LoadedAgent``."""

    spec: AgentSpec
    path: Path | None
    base_dir: Path

    def resolve(self, relative: str) -> Path:
        """A path the agent names: from the agent file's directory when it is there, else the
        working directory when it is there, else the agent file's directory; a stored agent's
        paths are always inside its files (docs/guide-toolboxes.md §1)."""
        ...


def is_stored(agent: AgentLike) -> bool:
    """Whether ``agent`` is a stored agent (it has no file; its paths stay inside its files)."""
    return agent.path is None


def make_sandbox(agent: AgentLike, box: BuiltinToolbox) -> FileSandbox:
    """The toolbox's sandbox: relative paths from the working directory for an agent file; from
    its files, and never outside them, for a stored agent."""
    if is_stored(agent):
        return FileSandbox(box.sandbox, base=agent.base_dir, confine=agent.base_dir)
    return FileSandbox(box.sandbox, base=Path.cwd())


class BuiltinTool(Tool):
    """A tool of a built-in toolbox.

    Args:
        box: the parsed toolbox entry.
        original: the name before normalization (``sqlite_<Name>_query``, ...).
        description: what the LLM is told.
        parameters: the JSON schema of the arguments.
    """

    def __init__(self, box: BuiltinToolbox, original: str, description: str, parameters: dict[str, Any]) -> None:
        self.box = box
        self._original = original
        self.name = normalize_tool_name(original)
        self.description = description
        self.parameters = parameters

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def original_name(self) -> str:
        """The name before normalization."""
        return self._original

    def fail(self, message: str) -> ToolResult:
        """An error result ``Error: <tool name>: <message>``."""
        return ToolResult.error(f"Error: {self.name}: {message}")


def json_result(value: Any) -> ToolResult:
    """A JSON result (``{"type": "json", "content": value}``)."""
    return ToolResult({"type": "json", "content": value})


def json_safe(value: Any) -> Any:
    """``value`` with what JSON cannot hold replaced: bytes as ``{"base64": ...}`` and
    non-finite floats as their text (``"inf"``, ``"nan"``)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON text."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


class ShellError(Exception):
    """A shell command that could not run to its end (not started, timed out, cancelled)."""


def run_shell(command: str, ctx: ToolContext, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``sh -c command`` (in ``cwd``, else the working directory) as a bash tool runs: its
    own process group, ended with the call; the call's time limit and cancellation apply.

    Returns:
        ``{"command", "exitCode", "stdout", "stderr", "duration"}`` (seconds), the outputs cut at
        the call's output cap.
    Raises:
        ShellError: the shell did not start, the command timed out or was cancelled.
    """
    argv = ["/bin/sh", "-c", command]
    if cwd is not None:
        argv = ["/bin/sh", "-c", 'cd "$1" && exec /bin/sh -c "$2"', "sh", str(cwd), command]
    started = time.monotonic()
    try:
        outcome = run_process(
            argv,
            stdin_data=None,
            env=base_environment(),
            timeout=ctx.timeout,
            max_stdout=ctx.output_max_bytes,
            cancel=ctx.cancel,
        )
    except (OSError, ValueError) as error:
        raise ShellError(f"the command could not be started: {error}") from None
    if outcome.cancelled:
        raise ShellError("the command was cancelled")
    if outcome.timed_out:
        raise ShellError(f"the command timed out after {format_seconds(ctx.timeout)}")
    return {
        "command": command,
        "exitCode": outcome.returncode,
        "stdout": bytes(outcome.stdout).decode("utf-8", "replace"),
        "stderr": outcome.stderr[-ctx.output_max_bytes :].decode("utf-8", "replace"),
        "duration": round(time.monotonic() - started, 3),
    }
