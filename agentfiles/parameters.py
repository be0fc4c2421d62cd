"""Agent parameters: declarations, values, their resolution and the checks on them (docs/agents.md §8).

An agent declares named parameters; whoever runs it supplies their values, never the model:

* the operator, per process (:func:`parse_process_flags`: ``--set``, ``--set-json``, ``--pin``,
  ``--pin-json``, ``--params-file``; installed with :func:`install_process_values`);
* a client, per session or per run (``params`` on the API; :meth:`AgentParameters.check_request`
  checks them: docs/api.md §7.15);
* the agent file, as a ``default`` (:func:`resolve_default`, once per loaded agent).

For one parameter the first of these wins (:meth:`AgentParameters.resolve`): a pinned process
value, the run's message-scope value, the session's value, a process value, the default;
otherwise the parameter is unbound. A value is any JSON; a secret one is a string, and
:class:`ParamValue` never shows it. Values reach tools through ``ToolContext.params`` and the
bindings of ``tools_app.bound``.

This module reads files and runs commands (defaults) but imports no Django model.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfiles.keys import api_key_for
from agentfiles.schema import AgentSpec, ParameterDecl, SecretSource
from foundation.errors import ForbiddenParams, InvalidParams, UnknownParams
from foundation.toolenv import base_environment, unreadable

#: Seconds a ``Command`` default may run.
COMMAND_TIMEOUT = 10.0
#: Scopes a client may set (``process`` is the operator's).
CLIENT_SCOPES = ("session", "message")


@dataclass(frozen=True)
class ParamValue:
    """A parameter's value as tools receive it (``ToolContext.params``).

    Attributes:
        value: any JSON value (a string when ``secret``).
        secret: never persisted, traced or returned; ``repr`` and ``str`` show ``<secret>``.
    """

    value: Any
    secret: bool = False

    def __repr__(self) -> str:
        return "ParamValue(<secret>)" if self.secret else f"ParamValue({self.value!r})"

    __str__ = __repr__

    def to_json(self) -> dict[str, Any]:
        """``{"value", "secret"}``, for the stores that keep values (never the database for a secret)."""
        return {"value": self.value, "secret": self.secret}

    @classmethod
    def from_json(cls, data: Any) -> ParamValue:
        """The inverse of :meth:`to_json`."""
        return cls(data.get("value"), bool(data.get("secret"))) if isinstance(data, dict) else cls(data)


@dataclass(frozen=True)
class ProcessValue:
    """A value the operator gave the process: ``pinned`` ones cannot be overridden by clients."""

    value: Any = field(repr=False)
    pinned: bool = False


class ParamsConfigError(ValueError):
    """The process's parameter flags or file are unusable; the message names the flag or file, never a value."""


def _split_flag(flag: str, entry: str) -> tuple[str, str]:
    name, separator, value = entry.partition("=")
    name = name.strip()
    if not separator or not name:
        raise ParamsConfigError(f"{flag} {name or entry[:40]!r}: expected NAME=VALUE")
    return name, value


def _json_flag(flag: str, name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ParamsConfigError(f"{flag} {name}: the value is not JSON ({error.msg})") from None


def read_params_file(path: str | Path) -> dict[str, ProcessValue]:
    """Read a ``--params-file``: ``{"name": value}`` or ``{"name": {"value": v, "pinned": true}}``.

    Raises:
        ParamsConfigError: missing, unreadable, not JSON, not an object.
    """
    file = Path(path).expanduser()
    try:
        document = json.loads(file.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise ParamsConfigError(f"--params-file {file}: not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ParamsConfigError(f"--params-file {file}: cannot read it ({type(error).__name__})") from None
    except json.JSONDecodeError as error:
        raise ParamsConfigError(f"--params-file {file}: invalid JSON at line {error.lineno}") from None
    if not isinstance(document, dict):
        raise ParamsConfigError(f"--params-file {file}: expected an object of parameter name -> value")
    values: dict[str, ProcessValue] = {}
    for name, entry in document.items():
        if isinstance(entry, dict) and "value" in entry and set(entry) <= {"value", "pinned"}:
            if not isinstance(entry.get("pinned", False), bool):
                raise ParamsConfigError(f"--params-file {file}: {name}.pinned must be true or false")
            values[name] = ProcessValue(entry["value"], bool(entry.get("pinned", False)))
        else:
            values[name] = ProcessValue(entry)
    return values


def parse_process_flags(
    *,
    sets: Sequence[str] = (),
    set_jsons: Sequence[str] = (),
    pins: Sequence[str] = (),
    pin_jsons: Sequence[str] = (),
    params_file: str | Path | None = None,
) -> dict[str, ProcessValue]:
    """The process values given by the operator; the flags win over the file.

    Args:
        sets, set_jsons, pins, pin_jsons: ``NAME=VALUE`` entries of ``--set`` (a string),
            ``--set-json`` (JSON), ``--pin`` and ``--pin-json`` (the same, pinned).
        params_file: ``--params-file`` (:func:`read_params_file`), or ``None``.
    Returns:
        name -> :class:`ProcessValue`.
    Raises:
        ParamsConfigError: a malformed entry, JSON that does not parse, one name given to two flags.
    """
    values = read_params_file(params_file) if params_file else {}
    flagged: dict[str, str] = {}
    for flag, entries, is_json, pinned in (
        ("--set", sets, False, False),
        ("--set-json", set_jsons, True, False),
        ("--pin", pins, False, True),
        ("--pin-json", pin_jsons, True, True),
    ):
        for entry in entries:
            name, text = _split_flag(flag, entry)
            if name in flagged:
                raise ParamsConfigError(f"{flag} {name}: the parameter is already given by {flagged[name]}")
            flagged[name] = flag
            values[name] = ProcessValue(_json_flag(flag, name, text) if is_json else text, pinned)
    return values


_process_values: dict[str, ProcessValue] = {}


def install_process_values(values: Mapping[str, ProcessValue]) -> None:
    """Make ``values`` this process's values (the CLI, before any agent is built; tests)."""
    _process_values.clear()
    _process_values.update(values)


def process_values() -> Mapping[str, ProcessValue]:
    """This process's operator-given values."""
    return _process_values


@dataclass(frozen=True)
class DefaultValue:
    """A declared ``default`` as resolved when the agent was loaded.

    Attributes:
        source: the source's kind (``Given``, ``EnvVar``, ``FileSystem``, ``Command``, ``ApiKey``).
        value: the value, when the source gave one.
        problem: why it gave none (names the source, never a value), else ``None``.
        pending: a ``Command`` not run because the agent is being stored, not loaded: whether it
            gives a value is known only when the agent is built for use (docs/agents.md §9).
    """

    source: str
    value: Any = field(default=None, repr=False)
    problem: str | None = None
    pending: bool = False

    @property
    def resolved(self) -> bool:
        """Whether the default has a value."""
        return self.problem is None


def resolve_default(
    source: SecretSource, *, base_dir: Path, api_keys: Mapping[str, str], run_commands: bool = True
) -> DefaultValue:
    """Resolve a ``default`` once (docs/agents.md §8): never raises, a failure is a :class:`DefaultValue`
    without value.

    With ``run_commands`` false (a stored agent being checked, docs/agents.md §9) a ``Command`` is
    not run: its :class:`DefaultValue` is ``pending``.

    ``EnvVar`` reads this process's environment, only the variables tool processes get (never
    the server's own configuration: docs/tools.md, "Tool environments"); ``FileSystem`` reads a
    file (relative to ``base_dir``, the agent file's directory) without its trailing line break;
    ``Command`` runs an argv (in ``base_dir``, for at most :data:`COMMAND_TIMEOUT` seconds, in the
    tool environment) and takes its stdout without the trailing line break; ``ApiKey`` is an
    entry of the API keys file.
    """
    kind, contents = source.kind, source.contents
    if kind == "Given":
        return DefaultValue(kind, contents)
    if kind == "EnvVar":
        refused = unreadable(contents)
        if refused is not None:
            return DefaultValue(kind, problem=f"EnvVar {refused}")
        if contents not in os.environ:
            return DefaultValue(kind, problem=f"EnvVar {contents} is not set")
        return DefaultValue(kind, os.environ[contents])
    if kind == "ApiKey":
        key = api_key_for(dict(api_keys), contents)
        if key is None:
            return DefaultValue(kind, problem=f"ApiKey {contents}: no such key")
        return DefaultValue(kind, key)
    if kind == "FileSystem":
        path = Path(contents) if os.path.isabs(contents) else base_dir / contents
        try:
            return DefaultValue(kind, path.read_text(encoding="utf-8").rstrip("\r\n"))
        except (OSError, UnicodeDecodeError) as error:
            return DefaultValue(kind, problem=f"FileSystem {path}: {type(error).__name__}")
    if not run_commands:
        return DefaultValue(kind, problem=f"Command {contents[0]} runs when the agent is loaded", pending=True)
    try:
        done = subprocess.run(  # noqa: S603 - a Command source the operator allowed (docs/agents.md §8.2); an argv, no shell
            contents,
            cwd=base_dir,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
            stdin=subprocess.DEVNULL,
            env=base_environment(),
        )
    except (OSError, subprocess.SubprocessError) as error:
        return DefaultValue(kind, problem=f"Command {contents[0]}: {type(error).__name__}")
    if done.returncode != 0:
        return DefaultValue(kind, problem=f"Command {contents[0]} exited with code {done.returncode}")
    return DefaultValue(kind, done.stdout.decode("utf-8", errors="replace").rstrip("\r\n"))


@dataclass
class RequestParams:
    """A client's ``params`` once checked: session-scope changes (``None`` removes) and message-scope values."""

    session: dict[str, Any] = field(default_factory=dict)
    message: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.session or self.message)

    def refuse_message_scope(self) -> None:
        """A request that runs nothing cannot carry message-scope values.

        Raises:
            ApiError: 422 ``invalid_params`` naming them.
        """
        if self.message:
            names = ", ".join(sorted(self.message))
            raise InvalidParams(f"message-scope parameters go with a request that runs the session: {names}")


class AgentParameters:
    """One agent's declared parameters, with its defaults resolved and the process's values.

    Args:
        decls: the agent's ``parameters``.
        defaults: name -> the resolved default, for those that declare one.
        process: the process's values (all of them; those the agent does not declare are ignored).
    """

    def __init__(
        self,
        decls: Sequence[ParameterDecl],
        defaults: Mapping[str, DefaultValue] | None = None,
        process: Mapping[str, ProcessValue] | None = None,
    ) -> None:
        self.decls: dict[str, ParameterDecl] = {decl.name: decl for decl in decls}
        self.defaults: dict[str, DefaultValue] = dict(defaults or {})
        self.process: Mapping[str, ProcessValue] = process if process is not None else process_values()

    @classmethod
    def load(
        cls, spec: AgentSpec, *, base_dir: Path, api_keys: Mapping[str, str], run_commands: bool = True
    ) -> AgentParameters:
        """An agent's parameters, each default resolved now (:func:`resolve_default`; ``run_commands``
        false leaves ``Command`` defaults pending)."""
        defaults = {
            decl.name: resolve_default(decl.default, base_dir=base_dir, api_keys=api_keys, run_commands=run_commands)
            for decl in spec.parameters
            if decl.default is not None
        }
        return cls(spec.parameters, defaults)

    def pinned(self, name: str) -> bool:
        """Whether the operator pinned ``name`` (it then behaves as process scope)."""
        value = self.process.get(name)
        return value is not None and value.pinned

    def process_value(self, name: str) -> ParamValue | None:
        """The value the process alone gives ``name``: its process value, else its default."""
        decl = self.decls[name]
        given = self.process.get(name)
        if given is not None:
            return ParamValue(given.value, decl.secret)
        default = self.defaults.get(name)
        if default is not None and default.resolved:
            return ParamValue(default.value, decl.secret)
        return None

    def resolve(
        self, given: Mapping[str, ParamValue] | None = None, message: Mapping[str, ParamValue] | None = None
    ) -> dict[str, ParamValue]:
        """Every parameter that has a value, first hit wins: pinned, message, session, process, default.

        Args:
            given: the session's values. A client sets session-scope ones only; a helper session's
                come from its caller's ``with`` and may fill any scope (docs/agents.md §8).
            message: the run's message-scope values.
        Returns:
            name -> :class:`ParamValue`; a value is secret when its parameter is, or when it was
            given as a secret (secrecy passes down to helpers).
        """
        given = given or {}
        message = message or {}
        resolved: dict[str, ParamValue] = {}
        for name, decl in self.decls.items():
            if self.pinned(name):
                resolved[name] = ParamValue(self.process[name].value, decl.secret)
            elif decl.scope == "message" and name in message:
                resolved[name] = ParamValue(message[name].value, decl.secret or message[name].secret)
            elif name in given:
                resolved[name] = ParamValue(given[name].value, decl.secret or given[name].secret)
            else:
                value = self.process_value(name)
                if value is not None:
                    resolved[name] = value
        return resolved

    def unbound_required(self, resolved: Mapping[str, ParamValue], scopes: Iterable[str]) -> list[str]:
        """The required parameters of ``scopes`` without a value in ``resolved``, sorted."""
        wanted = set(scopes)
        return sorted(
            name for name, decl in self.decls.items() if decl.required and decl.scope in wanted and name not in resolved
        )

    def check_request(self, params: Mapping[str, Any] | None) -> RequestParams:
        """Check a client's ``params`` (docs/api.md §7.15) and split them by scope.

        Args:
            params: name -> JSON value; ``null`` removes a session-scope value.
        Returns:
            the session-scope changes and the message-scope values.
        Raises:
            ApiError: 422 ``unknown_params`` (undeclared names); 403 ``forbidden_params``
                (process-scope or pinned); 422 ``invalid_params`` (a secret that is not a string).
        """
        checked = RequestParams()
        if not params:
            return checked
        unknown = sorted(name for name in params if name not in self.decls)
        if unknown:
            raise UnknownParams(f"the agent declares no parameter {', '.join(unknown)}")
        operator = sorted(
            name for name in params if self.decls[name].scope not in CLIENT_SCOPES or self.pinned(name)
        )
        if operator:
            raise ForbiddenParams(f"these parameters are the operator's to set, not a client's: {', '.join(operator)}")
        not_text = sorted(
            name for name, value in params.items() if self.decls[name].secret and value is not None
            and not isinstance(value, str)
        )
        if not_text:
            raise InvalidParams(f"secret parameters take a string value: {', '.join(not_text)}")
        for name, value in params.items():
            if self.decls[name].scope == "session":
                checked.session[name] = value
            elif value is not None:
                checked.message[name] = value
        return checked

    def descriptors(self) -> list[dict[str, Any]]:
        """The AgentDescriptor's ``parameters`` (docs/api.md §5.7): declarations, never values."""
        return [
            {
                "name": decl.name,
                "description": decl.description,
                "scope": decl.scope,
                "secret": decl.secret,
                "required": decl.required,
                "bound": self.process_value(decl.name) is not None,
                "pinned": self.pinned(decl.name),
            }
            for decl in self.decls.values()
        ]

    def resolution(self, name: str) -> str:
        """How ``name`` resolves in this process, for ``agents check``: ``pinned``, ``set``,
        ``default:<Source>``, or ``unbound`` (with why a default gave nothing); never a value."""
        given = self.process.get(name)
        if given is not None:
            return "pinned" if given.pinned else "set"
        default = self.defaults.get(name)
        if default is None:
            return "unbound"
        if default.resolved:
            return f"default:{default.source}"
        return f"unbound ({default.problem})"

    def process_problems(self) -> list[str]:
        """What stops a process from starting with this agent: a required process-scope parameter
        without value (one whose ``Command`` default is pending is not counted), and a secret
        parameter given a value that is not a string."""
        problems = []
        for name, decl in self.decls.items():
            value = self.process_value(name)
            default = self.defaults.get(name)
            if default is not None and default.pending and name not in self.process:
                continue
            if value is None and decl.required and (decl.scope == "process" or self.pinned(name)):
                problems.append(
                    f"parameter {name} is required and has no value ({self.resolution(name)}): "
                    f"give --set {name}=... or a default"
                )
            if value is not None and decl.secret and not isinstance(value.value, str):
                problems.append(f"parameter {name} is secret: its value must be a string")
        return problems


def undeclared_process_names(specs: Iterable[AgentSpec], values: Mapping[str, ProcessValue]) -> list[str]:
    """The process values no loaded agent declares (a typo guard), sorted."""
    declared = {decl.name for spec in specs for decl in spec.parameters}
    return sorted(name for name in values if name not in declared)


def spec_problems(spec: AgentSpec) -> list[str]:
    """The parameter rules an agent file breaks on its own (docs/agents.md §5), one line each.

    Two parameters with one name; a ``Param`` naming an undeclared parameter (in ``bindings``,
    a toolbox's ``Bindings``, an MCP server's ``env`` or ``headers``, an ``extraAgents`` ``with``);
    ``expose`` on a secret parameter; a session- or message-scope parameter in an MCP server's
    ``env`` or ``headers`` (a server is started once per process); a secret's ``Given`` default
    that is not a string.
    """
    problems: list[str] = []
    decls: dict[str, ParameterDecl] = {}
    for index, decl in enumerate(spec.parameters):
        if decl.name in decls:
            problems.append(f"parameters[{index}]: parameter {decl.name} is declared twice")
        decls[decl.name] = decl
        if decl.secret and decl.default is not None and decl.default.kind == "Given":
            if not isinstance(decl.default.contents, str):
                problems.append(f"parameters[{index}]: secret parameter {decl.name} takes a string default")

    def check_binding(where: str, binding: Any) -> None:
        param = binding.value.param
        if param is None:
            return
        if param not in decls:
            problems.append(f"{where}: Param {param!r} names no declared parameter")
        elif binding.whenUnbound == "expose" and decls[param].secret:
            problems.append(
                f"{where}: ExposedSecretParameter: secret parameter {param} cannot use whenUnbound \"expose\""
            )

    for index, binding in enumerate(spec.bindings):
        check_binding(f"bindings[{index}]", binding)
    for index, box in enumerate(spec.bashToolboxes):
        for inner, binding in enumerate(box.contents.Bindings):
            check_binding(f"bashToolboxes[{index}].contents.Bindings[{inner}]", binding)
    for index, entry in enumerate(spec.mcpServers or []):
        contents = entry.contents if isinstance(entry.contents, dict) else {}
        for key in ("env", "headers"):
            values = contents.get(key)
            for name, value in (values.items() if isinstance(values, dict) else []):
                param = value.get("contents") if isinstance(value, dict) and value.get("tag") == "Param" else None
                where = f"mcpServers[{index}].contents.{key}.{name}"
                if not isinstance(param, str):
                    continue
                if param not in decls:
                    problems.append(f"{where}: Param {param!r} names no declared parameter")
                elif decls[param].scope != "process":
                    problems.append(
                        f"{where}: parameter {param} has {decls[param].scope} scope; an MCP server is started once"
                        " per process, so only process-scope parameters can be given to it"
                    )
    for index, ref in enumerate(spec.helper_refs()):
        for key, value in (ref.with_ or {}).items():
            if value.param is not None and value.param not in decls:
                problems.append(f"extraAgents[{index}].with.{key}: Param {value.param!r} names no declared parameter")
    return problems


def with_problems(
    ref_where: str, given: Mapping[str, Any], child: AgentSpec, process: Mapping[str, ProcessValue]
) -> list[str]:
    """What is wrong with the ``with`` an agent gives a helper ``child`` (docs/agents.md §4).

    Every key must be a parameter the helper declares, and every required session-scope parameter
    of the helper must be covered: by ``with``, by a process value, or by a default. A helper
    found in a ``toolDirectory`` is given nothing (``given`` is empty).
    """
    declared = {decl.name: decl for decl in child.parameters}
    problems = [
        f"{ref_where}.with.{key}: helper {child.slug} declares no parameter {key}"
        for key in given
        if key not in declared
    ]
    uncovered = sorted(
        name
        for name, decl in declared.items()
        if decl.required and decl.scope == "session" and name not in given and name not in process
        and decl.default is None
    )
    if uncovered:
        problems.append(
            f"{ref_where}: helper {child.slug} requires session parameters its caller does not give with 'with':"
            f" {', '.join(uncovered)}"
        )
    return problems
