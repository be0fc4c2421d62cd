"""The bash tool: one describe/run executable exposed to the LLM as ``bash_<slug>`` (docs/tools.md §3).

:class:`BashTool` declares the script's arguments as a JSON schema, and on each call builds the
command line (:mod:`.protocol`), runs it (:mod:`.process`) and turns the outcome into a result.

* On a non-zero exit the LLM gets ``Error: tool <name> exited with code <n>: <stderr tail>``
  (the last ~2000 characters of stderr; stdout's tail instead, labelled, when stderr is empty).
  stderr never appears in a successful result.
* While it runs, its newest output line per stream is reported to ``ctx.output`` at most twice a
  second (:mod:`.progress`).
* stdout is the result: text, or a media result when ``describe`` gives ``output-media-type``.
  Only the first ``ctx.output_max_bytes`` bytes are kept while reading; the result then says how
  many there were (``ToolResult.full_bytes``) and ``Tool.call`` cuts it with a note, or drops
  cut binary data.
"""

from __future__ import annotations

import base64
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..base import Tool, ToolContext, ToolResult, VisibleParams
from ..names import normalize_tool_name
from .process import ProcessOutcome, format_seconds, run_process, tail_text
from .progress import LineProgress
from .protocol import ArgumentError, ScriptArg, ScriptInfo, build_invocation, tool_environment


class BashTool(Tool):
    """A describe/run executable exposed to the LLM as ``bash_<slug>``.

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
        self.safe_to_retry = info.safe_to_retry
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

    def system_properties(self, params: VisibleParams = None) -> list[dict[str, Any]]:
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

    def _arg(self, name: str) -> ScriptArg | None:
        return next((arg for arg in self.info.args if arg.name == name), None)

    def bound_value_problem(self, arg: str, value: Any) -> str | None:
        """A bash argument takes a string, number or boolean (a list of them for ``multiple``)."""
        declared = self._arg(arg)
        items = value if isinstance(value, list) and declared is not None and declared.arity == "multiple" else [value]
        if any(isinstance(item, dict | list) for item in items):
            return f"argument {arg} of {self.name} takes a string, a number or a boolean, not an object or a list"
        return None

    def secret_transport_problem(self, arg: str) -> str | None:
        """A secret must travel in ``env`` (or ``stdin``) mode, never on the command line."""
        declared = self._arg(arg)
        if declared is not None and declared.mode in ("positional", "dashdashspace", "dashdashequal"):
            return (
                f"argument {arg} of {self.name} is passed on the command line ({declared.mode}), where it would show"
                ' in ps; a secret must use "mode": "env"'
            )
        return None

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run ``<exe> run ...`` and turn its output into a result (docs/tools.md §3).

        Errors (all ``is_error=True``, never raised): bad arguments (``Error: tool <name>: ...``),
        start failure, timeout (``Error: tool <name> timed out after <N>s``), cancellation,
        non-zero exit (``Error: tool <name> exited with code <n>: <stderr tail>``). At most
        ``ctx.output_max_bytes`` bytes of stdout are kept; beyond them ``full_bytes`` says how
        many there were, for :meth:`Tool.call` to cut the result and say so.
        """
        try:
            return self._run(arguments, ctx)
        except Exception as exc:  # a tool failure must reach the LLM, not crash the step
            return ToolResult.error(f"Error: tool {self.name} failed: {type(exc).__name__}: {exc}")

    def _run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if not isinstance(arguments, Mapping):
            return ToolResult.error(f"Error: tool {self.name}: arguments must be a JSON object")
        try:
            invocation = build_invocation(self.path, self.info, arguments)
        except ArgumentError as exc:
            return ToolResult.error(f"Error: tool {self.name}: {exc}")
        try:
            outcome = run_process(
                invocation.argv,
                stdin_data=invocation.stdin_data,
                env=tool_environment(ctx, invocation.env),
                timeout=ctx.timeout,
                max_stdout=ctx.output_max_bytes,
                cancel=ctx.cancel,
                watcher=LineProgress(ctx.output) if ctx.output is not None else None,
            )
        except (OSError, ValueError) as exc:
            return ToolResult.error(f"Error: tool {self.name} could not be started: {exc}")
        if outcome.cancelled:
            return ToolResult.error(f"Error: tool {self.name} was cancelled")
        if outcome.timed_out:
            return ToolResult.error(f"Error: tool {self.name} timed out after {format_seconds(ctx.timeout)}")
        if outcome.returncode != 0:
            return ToolResult.error(self._failure_text(outcome))
        full_bytes = outcome.stdout_bytes if outcome.stdout_truncated else None
        return ToolResult(self._success_response(outcome), full_bytes=full_bytes)

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
        stderr_tail = tail_text(outcome.stderr)
        if stderr_tail:
            return f"Error: tool {self.name} {what}: {stderr_tail}"
        stdout_tail = tail_text(outcome.stdout)
        if stdout_tail:
            return f"Error: tool {self.name} {what} (nothing on stderr); stdout: {stdout_tail}"
        return f"Error: tool {self.name} {what} without any output"

    def _success_response(self, outcome: ProcessOutcome) -> Any:
        if not outcome.stdout_bytes:
            return self.info.empty_message if self.info.empty_message is not None else ""
        if self.info.output_media_type:
            return {
                "type": "media",
                "mimeType": self.info.output_media_type,
                "base64Data": base64.b64encode(outcome.stdout).decode("ascii"),
            }
        return outcome.stdout.decode("utf-8", errors="replace")
