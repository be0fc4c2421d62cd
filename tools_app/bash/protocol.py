"""The bash-tool protocol v1 itself: the ``describe`` document and the ``run`` command line.

A bash tool is any executable that answers two sub-commands (docs/tools.md §3):

* ``<exe> describe`` prints a ``ScriptInfo`` JSON document on stdout, parsed here into
  :class:`ScriptInfo` and :class:`ScriptArg`;
* ``<exe> run <args...>`` does the work; :func:`build_invocation` turns the LLM's JSON arguments
  into its argv, stdin and ``env``-mode variables, and :func:`tool_environment` gives the whole
  environment of the process.

Choices where agents-exe leaves room (the README lists them too):

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
* ``AGENT_*`` variables are set after the ``env``-mode arguments, so an LLM-supplied value can
  never overwrite them. An inherited ``AGENT_SESSION_JSON`` is removed unless the call asks for
  the full session.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.toolenv import base_environment

from ..base import ToolContext

ARITIES = ("single", "optional", "multiple")
MODES = ("positional", "dashdashspace", "dashdashequal", "stdin", "env")
#: ``describe`` types passed through to the JSON schema; others are declared as ``string``
#: (values reach the script as text anyway, and LLM APIs reject unknown schema types).
_SCHEMA_TYPES = {"string", "number", "integer", "boolean"}


class DescribeError(Exception):
    """A script could not be loaded: ``describe`` failed, timed out or printed a bad document."""


class ArgumentError(Exception):
    """The LLM's arguments cannot be turned into a command line (message shown to the LLM)."""


@dataclass(frozen=True)
class ScriptArg:
    """One argument declared by ``describe``: the six fields of an ``args`` entry.

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
    """A parsed ``describe`` document: ``slug``, ``description``, ``args`` and the optional
    ``empty-result``, ``output-media-type`` and ``safe-to-retry``.

    ``empty_message`` is ``None`` for ``{"tag": "DoNothing"}`` (the default) and the text of
    ``{"tag": "AddMessage", "contents": text}`` otherwise. ``output_media_type`` is the MIME type
    of stdout when the script prints binary data. ``safe_to_retry`` (our extension, ignored by
    agents-exe) says the tool may run again when a crash left it unknown whether a call ran.
    """

    slug: str
    description: str
    args: tuple[ScriptArg, ...] = ()
    empty_message: str | None = None
    output_media_type: str | None = None
    safe_to_retry: bool = False

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
        retry = data.get("safe-to-retry", False)
        if not isinstance(retry, bool):
            raise DescribeError("describe: 'safe-to-retry' must be true or false")
        return cls(
            slug=slug,
            description=description,
            args=tuple(args),
            empty_message=_parse_empty_result(data.get("empty-result")),
            output_media_type=media_type,
            safe_to_retry=retry,
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


@dataclass
class Invocation:
    """The ``run`` command line of one call: ``argv``, bytes for stdin (``None``: ``/dev/null``)
    and the ``env``-mode variables to add to the environment."""

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
    raise ArgumentError(f"argument '{arg.name}' must be a string, a number or a boolean, not {kind}")


def build_invocation(path: Path, info: ScriptInfo, arguments: Mapping[str, Any]) -> Invocation:
    """Translate the LLM's arguments into argv, stdin and ``env``-mode variables.

    Args:
        path: the executable (``argv[0]``).
        info: its ``describe`` document, which says how each argument travels.
        arguments: the LLM's decoded JSON arguments.
    Returns:
        the :class:`Invocation` (``argv`` starts with ``[path, "run"]``).
    Raises:
        ArgumentError: missing required arguments or values of the wrong shape.
    """
    missing = [arg.name for arg in info.args if arg.required and arguments.get(arg.name) is None]
    if missing:
        raise ArgumentError("missing required argument" + ("s" if len(missing) > 1 else "")
                            + ": " + ", ".join(missing))
    argv = [str(path), "run"]
    stdin_parts: list[str] = []
    env: dict[str, str] = {}
    for arg in info.args:
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
    has_stdin = any(arg.mode == "stdin" for arg in info.args)
    stdin_data = "\n\n".join(stdin_parts).encode("utf-8") if has_stdin else None
    return Invocation(argv=argv, stdin_data=stdin_data, env=env)


def tool_environment(ctx: ToolContext, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``run`` process: the tool environment (docs/tools.md, "Tool
    environments": ours without the server's configuration, or the strict allow-list), then
    ``extra`` (the ``env``-mode arguments), then the ``AGENT_*`` variables of ``ctx``, which
    therefore always win.

    ``AGENT_SESSION_JSON`` is set only when ``ctx.session_json`` is given, never inherited.
    """
    env = base_environment()
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
