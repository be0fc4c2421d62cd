"""The agent-file schema (docs/agents.md §1, §2; docs/decisions.md §5, §6).

An agent file is ``{"tag": "OpenAIAgentDescription", "contents": {...}}``; a bare ``contents``
object is accepted too. Agent-level keys are camelCase, toolbox keys PascalCase (except the
lower-case ``McpSimpleBinary`` contents). Unknown keys are ignored; :func:`unknown_keys` lists
them so that ``agents check`` can warn about them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator

ENVELOPE_TAG = "OpenAIAgentDescription"

#: What a slug may hold (docs/agents.md §2): characters safe in URLs and in tool names.
SLUG_PATTERN = re.compile(r"[A-Za-z0-9_.:-]+")

#: Which sessions an agent may mail (``mailScope``) or interrupt (``interruptScope``): itself only,
#: its descendants, its ancestors and descendants, or every session of its owner.
MailScope = Literal["own", "children", "subtree", "all"]

#: Flavors we know (docs/agents.md §7.1). ``openai`` and ``OpenAI`` are older spellings of OpenAIv1.
KNOWN_FLAVORS = {"OpenAIv1", "KimiV1", "MistralV1", "OllamaV1", "openai", "OpenAI"}


#: Bounds of the agent-file numbers (docs/agents.md §2): a value outside is a validation error, so
#: that no count or duration reaches a database column, a timer or a loop it could overflow.
MAX_SECONDS = 86_400.0
MAX_CALL_TIMEOUT_SECONDS = 7 * 86_400.0
MAX_CONCURRENCY = 256
MAX_MAILBOX_UNREAD = 100_000
MAX_MAIL_HOPS = 1_000


class _Lenient(BaseModel):
    """Base for every schema object: unknown keys are kept aside, never an error."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=False)


class Tagged(_Lenient):
    """Aeson's tagged encoding: ``{"tag": ..., "contents": ...}`` or a record with inline fields."""

    tag: str
    contents: Any = None


#: What a parameter's name may be (docs/guide-parameters.md §1): lower-case, digits, ``_``.
PARAM_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")


class BindingValue(_Lenient):
    """A binding's value: ``{"tag": "Literal", "contents": <JSON>}`` or ``{"tag": "Param", "contents": <name>}``."""

    tag: Literal["Literal", "Param"]
    contents: Any = None

    @field_validator("contents")
    @classmethod
    def _param_names_a_parameter(cls, value: Any, info: Any) -> Any:
        if info.data.get("tag") == "Param" and not isinstance(value, str):
            raise ValueError("a Param value names a parameter: a string")
        return value

    @property
    def param(self) -> str | None:
        """The parameter a ``Param`` value names, ``None`` for a ``Literal``."""
        return self.contents if self.tag == "Param" else None


class Binding(_Lenient):
    """A toolbox's ``Bindings`` entry, or an agent's ``bindings`` entry: one tool argument bound.

    ``tool`` is a glob (``*`` any run of characters; absent: every tool), ``arg`` the argument as
    the tool declares it, ``whenUnbound`` what a ``Param`` without a value does.
    """

    tool: str | None = None
    arg: str
    value: BindingValue
    whenUnbound: Literal["fail", "omit", "expose"] = "fail"


class ActivationError(ValueError):
    """An ``Activation`` value of another shape; the message starts with the key as written."""


@dataclass(frozen=True)
class Activation:
    """When a toolbox's tools are visible: ``group`` is ``None`` for always, else the tool group."""

    group: str | None = None

    @property
    def gate(self) -> str | None:
        """The gate of the toolbox's tools (``group:<G>``), ``None`` for always visible."""
        return f"group:{self.group}" if self.group is not None else None


def parse_activation(contents: Mapping[str, Any]) -> Activation:
    """Read a toolbox's ``Activation`` (or ``activation``) key (docs/tools.md §11).

    Args:
        contents: the toolbox's ``contents`` object.
    Returns:
        the :class:`Activation`; always visible when the key is absent or null.
    Raises:
        ActivationError: a value other than ``"always"`` or ``{"tag": "on-demand", "toolgroup": <name>}``.
    """
    key = "Activation" if "Activation" in contents else "activation"
    value = contents.get(key)
    if value is None or value == "always" or value == {"tag": "always"}:
        return Activation()
    if isinstance(value, Mapping) and value.get("tag") == "on-demand":
        group = value.get("toolgroup")
        if isinstance(group, str) and group.strip():
            return Activation(group)
    raise ActivationError(f'{key} must be "always" or {{"tag": "on-demand", "toolgroup": <name>}}')


class BashDirectoryContents(_Lenient):
    """``FileSystemDirectory`` contents: a directory of describe/run executables."""

    Path: str
    BasenameFilter: str | None = None
    Bindings: list[Binding] = Field(default_factory=list)


class SingleToolContents(_Lenient):
    """``SingleTool`` contents: one describe/run executable."""

    Path: str
    Bindings: list[Binding] = Field(default_factory=list)


class BashToolbox(_Lenient):
    """An entry of ``bashToolboxes``: ``FileSystemDirectory`` or ``SingleTool``."""

    tag: Literal["FileSystemDirectory", "SingleTool"]
    contents: BashDirectoryContents | SingleToolContents

    @field_validator("contents", mode="before")
    @classmethod
    def _contents_need_path(cls, value: Any) -> Any:
        if not isinstance(value, dict) or "Path" not in value:
            raise ValueError("a bash toolbox needs contents with a 'Path'")
        return value


class ExtraAgentRef(_Lenient):
    """An entry of ``extraAgents``: a helper agent, by slug and (for files) path."""

    slug: str
    path: str | None = None
    with_: dict[str, BindingValue] | None = Field(default=None, alias="with")
    narrowable: bool = True


class Disposition(_Lenient):
    """A tool-call disposition: ``runSync``, ``runAsync``, ``runIsolated``, ``defer``, ``decorate``."""

    tag: Literal["runSync", "runAsync", "runIsolated", "defer", "decorate"]
    reason: str | None = None
    attachSeconds: float | None = Field(default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    # ours (ignored by agents-exe): a ``defer`` whose calls are published to this Celery queue
    # (docs/guide-deferred.md §1)
    queue: str | None = None
    spec: Any = None
    decorators: list[Any] | None = None
    inner: Disposition | None = None


class PolicyRule(_Lenient):
    """One ``toolCallPolicyConfig`` rule: an exact LLM-visible tool name and its disposition."""

    tool: str
    disposition: Disposition


class ToolCallPolicyConfig(_Lenient):
    """``toolCallPolicyConfig`` (docs/tools.md §5.1): first matching rule wins, else default."""

    default: Disposition = Field(default_factory=lambda: Disposition(tag="runSync"))
    rules: list[PolicyRule] = Field(default_factory=list)


#: What an external tool's name may be: a name every LLM API accepts as is (docs/agents.md §10).
EXTERNAL_TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ExternalToolDecl(_Lenient):
    """An entry of ``externalTools`` (ours, docs/agents.md §10): a tool the outside world runs.

    ``parameters`` is the JSON schema of its arguments (an object schema, checked against the
    JSON-schema meta-schema); its calls are deferred unless a policy rule names the tool.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @field_validator("name")
    @classmethod
    def _llm_name(cls, value: str) -> str:
        if not EXTERNAL_TOOL_NAME_PATTERN.fullmatch(value):
            raise ValueError("must be 1 to 64 letters, digits, _ or -")
        return value

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as error:
            raise ValueError(f"not a valid JSON schema: {error.message}") from None
        if value.get("type") != "object":
            raise ValueError('must be a JSON schema of "type": "object" (the arguments of a call)')
        return value


class SecretSource(_Lenient):
    """Where a parameter's default comes from (docs/agents.md §8): ``Given`` (a JSON value),
    ``EnvVar`` (a variable name), ``FileSystem`` (a path), ``Command`` (an argv list) or
    ``ApiKey`` (an entry of the API keys file)."""

    tag: Literal["Given", "EnvVar", "FileSystem", "Command", "ApiKey", "ApiKeySource"]
    contents: Any = None

    @field_validator("contents")
    @classmethod
    def _contents_fit_the_tag(cls, value: Any, info: Any) -> Any:
        tag = info.data.get("tag")
        if tag == "Command":
            if not isinstance(value, list) or not value or not all(isinstance(a, str) for a in value):
                raise ValueError("a Command default is a non-empty list of strings (the argv)")
        elif tag in ("EnvVar", "FileSystem", "ApiKey", "ApiKeySource") and (not isinstance(value, str) or not value):
            raise ValueError(f"a {tag} default names its source with a non-empty string")
        return value

    @property
    def kind(self) -> str:
        """The tag, ``ApiKeySource`` read as ``ApiKey``."""
        return "ApiKey" if self.tag == "ApiKeySource" else self.tag


class ParameterDecl(_Lenient):
    """A declared parameter (docs/agents.md §8)."""

    name: str
    description: str | None = None
    secret: bool = False
    scope: Literal["process", "session", "message"] = "process"
    required: bool = True
    default: SecretSource | None = None

    @field_validator("name")
    @classmethod
    def _name_pattern(cls, value: str) -> str:
        if not PARAM_NAME_PATTERN.fullmatch(value):
            raise ValueError("must match [a-z][a-z0-9_]* (lower-case letters, digits and _)")
        return value


class AgentSpec(_Lenient):
    """The ``contents`` of an agent file.

    ``systemPrompt`` is a list of lines joined with newlines (:meth:`system_prompt_text`).
    Only the fields this server acts on are typed; the others are kept as plain JSON.
    """

    slug: str
    apiKeyId: str
    flavor: str
    modelUrl: str
    modelName: str
    announce: str
    systemPrompt: list[str]
    toolDirectory: str | None = None
    bashToolboxes: list[BashToolbox] = Field(default_factory=list)
    mcpServers: list[Tagged] | None = None
    openApiToolboxes: list[Tagged] | None = None
    postgrestToolboxes: list[Tagged] | None = None
    builtinToolboxes: list[Tagged] | None = None
    fileSandboxes: dict[str, Any] | None = None
    skillSources: list[Any] | None = None
    autoEnableSkills: list[str] = Field(default_factory=list)
    extraAgents: list[ExtraAgentRef] | None = None
    parameters: list[ParameterDecl] = Field(default_factory=list)
    bindings: list[Binding] = Field(default_factory=list)
    executionMode: Literal["synchronous", "asynchronous"] = "synchronous"
    toolCallPolicyConfig: ToolCallPolicyConfig | None = None
    asyncYieldStrategy: Any = "yieldWhenAllDone"
    maxConcurrency: int = Field(default=4, ge=1, le=MAX_CONCURRENCY)
    asyncCallTimeoutSeconds: float | None = Field(default=None, ge=0, le=MAX_CALL_TIMEOUT_SECONDS, allow_inf_nan=False)
    mailInToolResult: bool = False
    wakeOn: list[str] | None = None
    interruptCompletions: bool = False
    pauseCancelsCalls: bool = False
    resumeOnAnyMail: bool = False
    # agent-to-agent mail (docs/guide-sessions.md §3): who this agent may mail or interrupt,
    # how much unread mail it holds, how long a reply chain runs, how long ``wait`` blocks
    mailScope: MailScope = "subtree"
    interruptScope: MailScope = "children"
    mailboxMaxUnread: int = Field(default=256, ge=1, le=MAX_MAILBOX_UNREAD)
    maxMailHops: int = Field(default=16, ge=0, le=MAX_MAIL_HOPS)
    maxWaitSeconds: float = Field(default=300.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    # ours (ignored by agents-exe): tools (LLM-visible names) whose calls may run again when a
    # crash left it unknown whether they ran (docs/tools.md §5.4)
    safeToRetry: list[str] = Field(default_factory=list)
    # ours (ignored by agents-exe): tools declared with a schema, run by the outside world (docs/agents.md §10)
    externalTools: list[ExternalToolDecl] = Field(default_factory=list)

    @field_validator("slug", "apiKeyId", "modelUrl", "modelName")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("slug")
    @classmethod
    def _slug_characters(cls, value: str) -> str:
        # slugs appear in URLs and in tool names: letters, digits and _ . : - only
        if not SLUG_PATTERN.fullmatch(value):
            raise ValueError("may hold only letters, digits and _ . : -")
        # "." and ".." would be path segments in /v1/agents/<slug>, which clients normalise away
        if not value.strip("."):
            raise ValueError("must hold a character other than '.'")
        return value

    @field_validator("modelUrl")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    def system_prompt_text(self) -> str:
        """The system prompt sent to the LLM: the ``systemPrompt`` lines joined with newlines."""
        return "\n".join(self.systemPrompt)

    def helper_refs(self) -> list[ExtraAgentRef]:
        """The ``extraAgents`` entries, an empty list when absent."""
        return list(self.extraAgents or [])


def unwrap_agent_json(document: Any) -> tuple[dict[str, Any], bool]:
    """Return the agent ``contents`` of a decoded agent file and whether it had the envelope.

    Args:
        document: the decoded JSON of an agent file.
    Returns:
        ``(contents, enveloped)``.
    Raises:
        ValueError: when the document is neither the envelope nor a bare agent object, or when
            the envelope names another constructor.
    """
    if not isinstance(document, dict):
        raise ValueError("an agent file must hold a JSON object")
    if "tag" in document and "contents" in document:
        if document["tag"] != ENVELOPE_TAG:
            raise ValueError(f"unknown agent description tag {document['tag']!r}; expected {ENVELOPE_TAG!r}")
        if not isinstance(document["contents"], dict):
            raise ValueError("'contents' must be a JSON object")
        return document["contents"], True
    if "slug" in document:
        return document, False
    raise ValueError(f"expected {{\"tag\": \"{ENVELOPE_TAG}\", \"contents\": {{...}}}} or a bare agent object")


def unknown_keys(contents: dict[str, Any]) -> list[str]:
    """Agent-level keys that this schema does not know, sorted (warned about by ``check``)."""
    known = set(AgentSpec.model_fields)
    return sorted(k for k in contents if k not in known)
