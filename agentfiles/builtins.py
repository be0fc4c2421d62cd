"""Built-in toolboxes in agent files: what ``builtinToolboxes`` and ``fileSandboxes`` may hold
(docs/guide-toolboxes.md §1).

Four kinds: ``SqliteToolbox``, ``SystemToolbox``, ``DeveloperToolbox`` and ``LuaToolbox``, each
``{"tag": KIND, "contents": {...}}`` with PascalCase keys. System, Developer and Lua toolboxes
take a ``FileSandbox``: inline ``{"fsbPredicate", "fsbMaxFileSize", "fsbName"}``, or
``{"ref": NAME}`` naming an entry of the agent's ``fileSandboxes``.

:func:`parse_builtin_toolboxes` checks all of it when an agent is loaded and hands the parsed
toolboxes to ``tools_app.builtin``, which builds the tools. This module only reads JSON: the
predicates are evaluated by ``tools_app.builtin.sandbox``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentfiles.schema import MAX_SECONDS, ActivationError, parse_activation

#: The size limit of a sandbox that does not set ``fsbMaxFileSize`` (50 MiB), and of attach-file.
DEFAULT_MAX_FILE_SIZE = 50 * 1024 * 1024

#: Predicate tags whose ``contents`` is a path.
PATH_TAGS = frozenset({"FileExactly", "DirectoryExactly", "DirectoryRecursive", "DirectoryShallow", "ChildOf"})
#: Predicate tags without ``contents``.
CONSTANT_TAGS = frozenset({"AlwaysAllow", "AlwaysDeny"})
#: Predicate tags whose ``contents`` is a list of predicates (``And``/``Or`` take two, as Aeson
#: writes a two-field constructor, but any number is read as ``All``/``Any``).
LIST_TAGS = frozenset({"And", "Or", "Any", "All"})
PREDICATE_TAGS = PATH_TAGS | CONSTANT_TAGS | LIST_TAGS | {"FilePattern", "FileExtension", "FileSizeLessThan", "Not"}

#: What a SystemToolbox offers, in the order it is documented.
SYSTEM_CAPABILITIES = (
    "date",
    "operating-system",
    "env-vars",
    "running-user",
    "hostname",
    "working-directory",
    "process-info",
    "uptime",
    "attach-file",
    "list-directory",
    "execute-command",
    "get-tool-call-status",
    "list-running-tool-calls",
    "cancel-tool-call",
    "list-sessions",
    "search-sessions",
    "read-session",
    "get-session-stats",
    "send-message",
    "spawn-session",
    "watch-session",
    "unwatch-session",
    "wait",
)
#: System capabilities that read files through the toolbox's sandbox.
SYSTEM_FILE_CAPABILITIES = ("attach-file", "list-directory")

#: What a DeveloperToolbox offers; ``build-command`` runs the toolbox's ``BuildCommand``.
DEVELOPER_CAPABILITIES = (
    "show-spec",
    "validate-agent",
    "create-agent",
    "create-tool",
    "read-file-range",
    "write-file-range",
    "patch-file",
    "build-command",
)
#: Developer capabilities that read or write files through the toolbox's sandbox.
DEVELOPER_FILE_CAPABILITIES = (
    "validate-agent",
    "create-agent",
    "create-tool",
    "read-file-range",
    "write-file-range",
    "patch-file",
)

INTROSPECTION_SCOPES = ("parents-only", "children-only", "subtree", "all")


@dataclass(frozen=True)
class PathPredicate:
    """One node of the path-predicate language.

    Attributes:
        tag: one of :data:`PREDICATE_TAGS`.
        value: the path (path tags), the glob (``FilePattern``), the extensions without a dot
            (``FileExtension``, a tuple) or the byte count (``FileSizeLessThan``); else ``None``.
        children: the operands of ``And``/``Or``/``Any``/``All``/``Not``.
    """

    tag: str
    value: Any = None
    children: tuple[PathPredicate, ...] = ()


@dataclass(frozen=True)
class SandboxConfig:
    """A file sandbox as declared: a predicate, a size limit in bytes (``None``: none), a name."""

    predicate: PathPredicate
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE
    name: str | None = None


#: No FileSandbox: every path refused.
DENY_ALL = SandboxConfig(PathPredicate("AlwaysDeny"))


def parse_predicate(value: Any, where: str = "fsbPredicate") -> PathPredicate:
    """Read one predicate (Aeson's ``{"tag", "contents"}`` encoding).

    Raises:
        ValueError: naming ``where`` (a dotted path into the file) and what is wrong.
    """
    if not isinstance(value, dict) or not isinstance(value.get("tag"), str):
        raise ValueError(f'{where}: expected a predicate {{"tag": ..., "contents": ...}}')
    tag, contents = value["tag"], value.get("contents")
    if tag not in PREDICATE_TAGS:
        raise ValueError(f"{where}: unknown predicate {tag!r} (known: {', '.join(sorted(PREDICATE_TAGS))})")
    if tag in CONSTANT_TAGS:
        return PathPredicate(tag)
    if tag in PATH_TAGS or tag == "FilePattern":
        if not isinstance(contents, str) or not contents or "\x00" in contents:
            raise ValueError(f"{where}: {tag} takes a non-empty string")
        return PathPredicate(tag, contents)
    if tag == "FileExtension":
        if not isinstance(contents, list) or not all(isinstance(e, str) and e for e in contents):
            raise ValueError(f"{where}: FileExtension takes a list of extensions without the dot")
        return PathPredicate(tag, tuple(e.removeprefix(".") for e in contents))
    if tag == "FileSizeLessThan":
        if not isinstance(contents, int) or isinstance(contents, bool) or contents < 0:
            raise ValueError(f"{where}: FileSizeLessThan takes a number of bytes")
        return PathPredicate(tag, contents)
    if tag == "Not":
        return PathPredicate(tag, children=(parse_predicate(contents, f"{where}.contents"),))
    if not isinstance(contents, list) or (tag in ("And", "Or") and len(contents) < 2):
        more = " (two or more)" if tag in ("And", "Or") else ""
        raise ValueError(f"{where}: {tag} takes a list of predicates{more}")
    children = tuple(parse_predicate(item, f"{where}.contents[{i}]") for i, item in enumerate(contents))
    return PathPredicate(tag, children=children)


def predicate_paths(value: Any) -> list[str]:
    """Every path named in a raw (JSON) predicate, in order; malformed parts are skipped."""
    if not isinstance(value, dict):
        return []
    tag, contents = value.get("tag"), value.get("contents")
    if tag in PATH_TAGS:
        return [] if contents is None else [contents]
    if tag == "Not":
        return predicate_paths(contents)
    if tag in LIST_TAGS and isinstance(contents, list):
        return [path for item in contents for path in predicate_paths(item)]
    return []


_SANDBOX_KEYS = ("fsbPredicate", "fsbMaxFileSize", "fsbName")


def parse_sandbox(value: Any, where: str, warnings: list[str]) -> SandboxConfig:
    """Read an inline sandbox ``{"fsbPredicate", "fsbMaxFileSize"?, "fsbName"?}``.

    An absent ``fsbMaxFileSize`` means the 50 MiB default; ``null`` means no limit. Unknown keys
    are ignored with a warning appended to ``warnings``.

    Raises:
        ValueError: naming ``where``.
    """
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object with fsbPredicate")
    if "fsbPredicate" not in value:
        raise ValueError(f"{where}: fsbPredicate is required")
    predicate = parse_predicate(value["fsbPredicate"], f"{where}.fsbPredicate")
    size = value.get("fsbMaxFileSize", DEFAULT_MAX_FILE_SIZE)
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ValueError(f"{where}.fsbMaxFileSize: expected a number of bytes or null")
    name = value.get("fsbName")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"{where}.fsbName: expected a string or null")
    extra = sorted(k for k in value if k not in _SANDBOX_KEYS)
    if extra:
        warnings.append(f"{where}: unknown keys ignored: {', '.join(extra)}")
    return SandboxConfig(predicate, size, name)


class _Contents(BaseModel):
    """Common fields of every built-in toolbox's ``contents``; other keys are kept aside."""

    model_config = ConfigDict(extra="allow")

    Name: str
    Description: str = ""
    FileSandbox: Any = None

    @field_validator("Name")
    @classmethod
    def _name_not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class SqliteVersioning(BaseModel):
    """``Versioning`` of a SqliteToolbox: ``{"tag": "SqliteReadOnly" | "SqliteReadWrite", "path"}``."""

    model_config = ConfigDict(extra="forbid")

    tag: Literal["SqliteReadOnly", "SqliteReadWrite"]
    path: str


class SqliteConfig(_Contents):
    """``SqliteToolbox`` contents. ``Path`` with ``Access`` (``read-only``/``read-write``) is the
    older shape, read as the matching ``Versioning`` with a warning."""

    Versioning: SqliteVersioning | None = None
    Path: str | None = None
    Access: str | None = None

    @property
    def read_only(self) -> bool:
        """Whether the database is opened read-only."""
        assert self.Versioning is not None  # noqa: S101 - narrows the type (never checks input)
        return self.Versioning.tag == "SqliteReadOnly"


class SystemConfig(_Contents):
    """``SystemToolbox`` contents."""

    Capabilities: list[str] = Field(default_factory=list)
    EnvVarFilter: str | None = None
    SessionIntrospectionScope: Literal["parents-only", "children-only", "subtree", "all"] = "subtree"
    SessionIntrospectionMaxResults: int = Field(default=50, ge=1, le=10_000)
    SessionIntrospectionIncludeToolOutputs: bool = True
    CommandFilter: str | None = None


class DeveloperConfig(_Contents):
    """``DeveloperToolbox`` contents; ``BuildCommand`` is the shell command of ``build-command``."""

    Capabilities: list[str] = Field(default_factory=list)
    BuildCommand: str | None = None


class LuaConfig(_Contents):
    """``LuaToolbox`` contents (memory in MiB, 0 for no limit; time in seconds)."""

    MaxMemoryMB: int = Field(default=256, ge=0, le=65_536)
    MaxExecutionTimeSeconds: float = Field(default=300, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    AllowedTools: list[str] = Field(default_factory=list)
    AllowedHosts: list[str] = Field(default_factory=list)


ToolboxConfig = SqliteConfig | SystemConfig | DeveloperConfig | LuaConfig

_KINDS: dict[str, type[ToolboxConfig]] = {
    "SqliteToolbox": SqliteConfig,
    "SystemToolbox": SystemConfig,
    "DeveloperToolbox": DeveloperConfig,
    "LuaToolbox": LuaConfig,
}
_CAPABILITIES = {"SystemToolbox": SYSTEM_CAPABILITIES, "DeveloperToolbox": DEVELOPER_CAPABILITIES}
_FILE_CAPABILITIES = {"SystemToolbox": SYSTEM_FILE_CAPABILITIES, "DeveloperToolbox": DEVELOPER_FILE_CAPABILITIES}


@dataclass
class BuiltinToolbox:
    """One parsed ``builtinToolboxes`` entry.

    Attributes:
        index: its position in ``builtinToolboxes``.
        tag: the kind (``SqliteToolbox``, ...).
        config: its contents.
        sandbox: its FileSandbox with any ``ref`` resolved (deny-all when it has none).
    """

    index: int
    tag: str
    config: ToolboxConfig
    sandbox: SandboxConfig = field(default=DENY_ALL)

    @property
    def label(self) -> str:
        """How messages name it: ``builtinToolboxes[0] (SqliteToolbox memory)``."""
        return f"builtinToolboxes[{self.index}] ({self.tag} {self.config.Name})"

    @property
    def capabilities(self) -> list[str]:
        """The capabilities it lists that this server knows (System and Developer; else empty)."""
        known = _CAPABILITIES.get(self.tag, ())
        return [c for c in dict.fromkeys(getattr(self.config, "Capabilities", [])) if c in known]


def parse_builtin_toolboxes(
    entries: list[Any] | None, sandboxes: dict[str, Any] | None
) -> tuple[list[BuiltinToolbox], list[str], list[str]]:
    """Check and read ``builtinToolboxes`` and ``fileSandboxes`` (docs/guide-toolboxes.md §1).

    Args:
        entries: the ``builtinToolboxes`` entries (``{"tag", "contents"}`` objects or models
            with those attributes).
        sandboxes: the agent's ``fileSandboxes``.
    Returns:
        ``(toolboxes, problems, warnings)``: problems refuse the agent (a bad shape, an unknown
        kind, a ``ref`` to an undeclared sandbox, a ``ref`` mixed with inline keys, bindings);
        warnings do not (unknown keys, unknown capabilities, the older SQLite shape, a file
        capability without a sandbox). Each line names the toolbox.
    """
    problems: list[str] = []
    warnings: list[str] = []
    named: dict[str, SandboxConfig] = {}
    if sandboxes is not None and not isinstance(sandboxes, dict):
        problems.append("fileSandboxes: expected an object of name -> sandbox")
        sandboxes = {}
    for name, value in (sandboxes or {}).items():
        try:
            config = parse_sandbox(value, f"fileSandboxes.{name}", warnings)
        except ValueError as error:
            problems.append(str(error))
            continue
        named[name] = config if config.name is not None else SandboxConfig(config.predicate, config.max_file_size, name)
    toolboxes: list[BuiltinToolbox] = []
    for index, entry in enumerate(entries or []):
        raw = entry if isinstance(entry, dict) else {"tag": getattr(entry, "tag", None), "contents": entry.contents}
        box = _parse_entry(index, raw, named, problems, warnings)
        if box is not None:
            toolboxes.append(box)
    return toolboxes, problems, warnings


def _parse_entry(
    index: int, raw: dict[str, Any], named: dict[str, SandboxConfig], problems: list[str], warnings: list[str]
) -> BuiltinToolbox | None:
    where = f"builtinToolboxes[{index}]"
    # a str whenever kind is found
    tag: Any = raw.get("tag")
    contents = raw.get("contents")
    kind = _KINDS.get(tag) if isinstance(tag, str) else None
    if kind is None:
        problems.append(f"{where}: unknown built-in toolbox {tag!r} (known: {', '.join(_KINDS)})")
        return None
    if not isinstance(contents, dict):
        problems.append(f"{where} ({tag}): contents must be an object")
        return None
    label = f"{where} ({tag} {contents.get('Name')})"
    try:
        config = kind.model_validate(contents)
    except ValidationError as error:
        for detail in error.errors():
            loc = ".".join(str(part) for part in detail["loc"])
            problems.append(f"{label}: {loc}: {detail['msg'][:1].lower()}{detail['msg'][1:]}")
        return None
    box = BuiltinToolbox(index, tag, config)
    extra = sorted(config.model_extra or {})
    if "Bindings" in extra:
        problems.append(f"{label}: Bindings on built-in toolboxes are not supported by this server yet")
    try:
        parse_activation(config.model_extra or {})
    except ActivationError as error:
        problems.append(f"{label}: {error}")
    ignored = [key for key in extra if key not in ("Bindings", "Activation", "activation")]
    if ignored:
        warnings.append(f"{label}: unknown keys ignored: {', '.join(ignored)}")
    if isinstance(config, SqliteConfig):
        _sqlite_versioning(config, label, problems, warnings)
    else:
        _resolve_sandbox(box, contents, named, label, problems, warnings)
        _check_capabilities(box, label, warnings)
    return box


def _sqlite_versioning(config: SqliteConfig, label: str, problems: list[str], warnings: list[str]) -> None:
    """Settle ``Versioning``, reading the older ``Path``/``Access`` shape as an alias."""
    older = config.Path is not None or config.Access is not None
    if config.Versioning is not None:
        if older:
            problems.append(f"{label}: give Versioning alone, without the older Path/Access")
        return
    tags: dict[str, Literal["SqliteReadOnly", "SqliteReadWrite"]] = {
        "read-only": "SqliteReadOnly",
        "read-write": "SqliteReadWrite",
    }
    access = tags.get(config.Access or "")
    if config.Path is None or access is None:
        problems.append(
            f'{label}: Versioning is required: {{"tag": "SqliteReadOnly" | "SqliteReadWrite", "path": ...}}'
            + (' (the older Path needs Access "read-only" or "read-write")' if older else "")
        )
        return
    config.Versioning = SqliteVersioning(tag=access, path=config.Path)
    warnings.append(
        f'{label}: Path/Access is the older shape; read as Versioning {{"tag": "{access}", "path": "{config.Path}"}}'
    )


def _resolve_sandbox(
    box: BuiltinToolbox,
    contents: dict[str, Any],
    named: dict[str, SandboxConfig],
    label: str,
    problems: list[str],
    warnings: list[str],
) -> None:
    value = contents.get("FileSandbox")
    if value is None:
        return
    if isinstance(value, dict) and "ref" in value:
        if len(value) > 1:
            problems.append(f"{label}: FileSandbox: ref stands alone; it cannot be mixed with inline keys")
        elif value["ref"] not in named:
            declared = ", ".join(sorted(named)) or "none"
            problems.append(
                f"{label}: FileSandbox refers to sandbox {value['ref']!r}, which fileSandboxes does not declare"
                f" (declared: {declared})"
            )
        else:
            box.sandbox = named[value["ref"]]
        return
    try:
        box.sandbox = parse_sandbox(value, f"{label}: FileSandbox", warnings)
    except ValueError as error:
        problems.append(str(error))


def _check_capabilities(box: BuiltinToolbox, label: str, warnings: list[str]) -> None:
    listed = getattr(box.config, "Capabilities", None)
    if listed is None:
        return
    known = _CAPABILITIES[box.tag] if box.tag in _CAPABILITIES else ()
    for capability in dict.fromkeys(listed):
        if capability not in known:
            warnings.append(f"{label}: unknown capability {capability!r} ignored (known: {', '.join(known)})")
    file_caps = [c for c in box.capabilities if c in _FILE_CAPABILITIES.get(box.tag, ())]
    if file_caps and box.sandbox.predicate.tag == "AlwaysDeny":
        warnings.append(f"{label}: no FileSandbox allows anything; every path is refused to {', '.join(file_caps)}")
    if isinstance(box.config, DeveloperConfig) and "build-command" in box.capabilities and not box.config.BuildCommand:
        warnings.append(f"{label}: build-command without BuildCommand; calls are refused")


def builtin_paths(contents: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every path named by the built-in toolboxes and file sandboxes of raw agent ``contents``.

    Returns:
        ``(where, value)`` pairs, ``where`` a dotted path into the contents (for the stored
        agents' path rules); values are whatever the JSON holds.
    """
    found: list[tuple[str, Any]] = []
    sandboxes = contents.get("fileSandboxes")
    for name, sandbox in sandboxes.items() if isinstance(sandboxes, dict) else []:
        predicate = sandbox.get("fsbPredicate") if isinstance(sandbox, dict) else None
        found += [(f"fileSandboxes.{name}.fsbPredicate", path) for path in predicate_paths(predicate)]
    boxes = contents.get("builtinToolboxes")
    for index, box in enumerate(boxes if isinstance(boxes, list) else []):
        inner = box.get("contents") if isinstance(box, dict) else None
        if not isinstance(inner, dict):
            continue
        where = f"builtinToolboxes[{index}].contents"
        versioning = inner.get("Versioning")
        if isinstance(versioning, dict) and "path" in versioning:
            found.append((f"{where}.Versioning.path", versioning["path"]))
        for key in ("Path", "CommandFilter"):
            if inner.get(key) is not None:
                found.append((f"{where}.{key}", inner[key]))
        sandbox = inner.get("FileSandbox")
        if isinstance(sandbox, dict):
            found += [(f"{where}.FileSandbox", path) for path in predicate_paths(sandbox.get("fsbPredicate"))]
    return found
