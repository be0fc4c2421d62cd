"""The stored-agent editor: an agent's fields as form fields, its files as rows (docs/guide-console.md §1).

The form turns what the operator typed into the body of ``PUT /v1/agents/:slug`` and runs the
same checks (:func:`agents_app.services.stored_agent_prepare`); a refusal is split into its
problems and each is shown next to the field it names. Keys the form has no field for stay in
"Other keys" as JSON, so editing an agent never drops part of it.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from django import forms
from pydantic import TypeAdapter, ValidationError

from agentfiles.keys import LEGACY_NO_KEY, keyless_id
from agentfiles.schema import BashToolbox, Binding, ParameterDecl, PolicyRule, Tagged
from agentfiles.validation_messages import format_validation_errors
from agents_app import services
from agents_app.models import StoredAgent
from agents_app.registry import get_registry
from agents_app.report import stored_check_lines
from foundation.errors import ApiError

#: The flavors offered (docs/agents.md; ``openai`` and ``OpenAI`` are older spellings of OpenAIv1).
FLAVORS = [
    ("OpenAIv1", "OpenAIv1: OpenAI and compatible endpoints"),
    ("KimiV1", "KimiV1: reads reasoning_content"),
    ("MistralV1", "MistralV1"),
    ("OllamaV1", "OllamaV1"),
]
#: The API key choice that sends no key; stored as :func:`agentfiles.keys.keyless_id` names it.
NO_KEY = ""
DISPOSITIONS = [
    ("", "no policy: every call runs at once"),
    ("runSync", "runSync: run in the step"),
    ("runAsync", "runAsync: run in the background"),
    ("runIsolated", "runIsolated: run in a process of its own"),
    ("defer", "defer: wait for a continuation"),
    ("decorate", "decorate: keeps the stored decorators (set them over the API)"),
]
MONOSPACE = {"style": "font-family: monospace; width: 100%", "spellcheck": "false"}

#: Structured editors: the contents key, its form field, the schema each value must fit.
JSON_EDITORS: dict[str, tuple[Any, str]] = {
    "bashToolboxes": (TypeAdapter(list[BashToolbox]), "a list of FileSystemDirectory or SingleTool toolboxes"),
    "mcpServers": (TypeAdapter(list[Tagged]), 'a list of {"tag", "contents"} MCP servers'),
    "builtinToolboxes": (TypeAdapter(list[Tagged]), 'a list of {"tag", "contents"} built-in toolboxes'),
    "fileSandboxes": (TypeAdapter(dict[str, Any]), "an object: sandbox name -> sandbox"),
    "parameters": (TypeAdapter(list[ParameterDecl]), "a list of parameter declarations"),
    "bindings": (TypeAdapter(list[Binding]), "a list of bindings"),
}
POLICY_RULES = TypeAdapter(list[PolicyRule])
#: Keys with a scalar field of their own, and their defaults (a default is left out of the contents
#: unless the stored agent had the key).
SCALARS: dict[str, Any] = {
    "toolDirectory": None,
    "executionMode": "synchronous",
    "maxConcurrency": 4,
    "asyncCallTimeoutSeconds": None,
    "mailInToolResult": False,
    "interruptCompletions": False,
    "pauseCancelsCalls": False,
    "resumeOnAnyMail": False,
}
REQUIRED = ("modelUrl", "modelName", "flavor", "apiKeyId", "announce")
#: Every contents key a field owns; the others go to "Other keys".
OWNED = {"slug", *REQUIRED, "systemPrompt", *SCALARS, *JSON_EDITORS, "extraAgents", "toolCallPolicyConfig"}
#: Which field shows a loader problem that names a contents key.
FIELD_OF_KEY = {
    **{key: key for key in OWNED},
    "extraAgents": "helpers",
    "toolCallPolicyConfig": "policy_rules",
    "files": "files",
}
_PREFIX = re.compile(r"^agent '[^']*': ")
_KEY = re.compile(r"[A-Za-z]+")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


class JsonEditor(forms.CharField):
    """A JSON text box checked against a schema; empty means the key is left out."""

    def __init__(self, schema: Any, expected: str, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 6, **MONOSPACE}))
        super().__init__(required=False, strip=False, **kwargs)
        self.schema, self.expected = schema, expected

    def clean(self, value: Any) -> Any:
        """The decoded value, or ``None`` when the box is empty.

        Raises:
            forms.ValidationError: not JSON, or one line per place the schema refuses.
        """
        text = super().clean(value)
        if not text.strip():
            return None
        try:
            decoded = json.loads(text)
        except ValueError as error:
            raise forms.ValidationError(f"not JSON: {error}") from None
        try:
            self.schema.validate_python(decoded)
        except ValidationError as error:
            lines = format_validation_errors(error)
            raise forms.ValidationError([f"expected {self.expected}", *lines]) from None
        return decoded


class FileRowForm(forms.Form):
    """One file of the agent: a relative path and its text."""

    path = forms.CharField(required=False, widget=forms.TextInput(attrs={"size": 50, **MONOSPACE}))
    content = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 10, **MONOSPACE}))

    def clean_content(self) -> str:
        """The text with Unix line ends: browsers send a text box's lines ended by CRLF, which
        would break every script (``#!/bin/sh\r``)."""
        return self.cleaned_data.get("content", "").replace("\r\n", "\n")


class BaseFileRows(forms.BaseFormSet):
    """The file rows: a row with a path is a file; two rows may not name the same path."""

    def clean(self) -> None:
        """Raises: forms.ValidationError for a path given twice or text without a path."""
        seen: set[str] = set()
        for form in self.forms:
            if not hasattr(form, "cleaned_data") or self._should_delete_form(form):  # type: ignore[attr-defined]  # Django's own private helper, which django-stubs leaves out
                continue
            path, content = form.cleaned_data.get("path", ""), form.cleaned_data.get("content", "")
            if not path and content:
                form.add_error("path", "a file needs a path")
            if path in seen:
                form.add_error("path", f"{path!r} is given twice")
            seen.add(path)

    def file_map(self) -> dict[str, str]:
        """relative path -> text, for the rows that have a path and are not deleted."""
        return {
            form.cleaned_data["path"]: form.cleaned_data.get("content", "")
            for form in self.forms
            if hasattr(form, "cleaned_data") and form.cleaned_data.get("path") and not self._should_delete_form(form)  # type: ignore[attr-defined]  # Django's own private helper, which django-stubs leaves out
        }


# a subclass of BaseFileRows; django-stubs' formset_factory says only BaseFormSet
FileRows = cast(
    type[BaseFileRows], forms.formset_factory(FileRowForm, formset=BaseFileRows, extra=1, can_delete=True)
)


def _known_key_ids() -> set[str]:
    """The key ids of the server's keys files: the shared one and the owners'."""
    registry = get_registry()
    return {*registry.api_keys, *(key for keys in registry.owner_api_keys.values() for key in keys)}


def _key_ids(slug: str | None, current: str | None) -> list[tuple[str, str]]:
    """The API key ids the server knows, then the no-key choice, labelled with the id it stores
    (docs/agents.md §6.1)."""
    known = _known_key_ids()
    stored = keyless_id(slug, current, known) if slug else "<slug>-key"
    return [*((key, key) for key in sorted(known)), (NO_KEY, f"no key is sent (stored as {stored})")]


class StoredAgentForm(forms.ModelForm):
    """A stored agent as form fields, checked by the stored-agent service on ``clean``."""

    modelUrl = forms.CharField(label="model URL", help_text="OpenAI-compatible base URL, e.g. https://api.openai.com/v1")
    modelName = forms.CharField(label="model name", help_text="the model the endpoint serves, e.g. gpt-4.1-mini")
    flavor = forms.ChoiceField(choices=FLAVORS, help_text="how requests are formed and answers read")
    apiKeyId = forms.ChoiceField(
        label="API key id",
        required=False,
        help_text="an id of the server's API keys file, or no key (local endpoints need none)",
    )
    announce = forms.CharField(help_text="one line saying what the agent does (shown to callers and helpers)")
    systemPrompt = forms.CharField(
        label="system prompt",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "cols": 100}),
        help_text="sent as the system message; stored as a list of lines",
    )
    helpers = forms.ModelMultipleChoiceField(
        queryset=StoredAgent.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="stored agents this agent may call as tools (extraAgents)",
    )
    toolDirectory = forms.CharField(
        label="tool directory", required=False, help_text="a directory of the files below whose executables are tools"
    )
    bashToolboxes = JsonEditor(*JSON_EDITORS["bashToolboxes"], label="bash toolboxes", help_text="JSON list")
    mcpServers = JsonEditor(*JSON_EDITORS["mcpServers"], label="MCP servers", help_text="JSON list")
    builtinToolboxes = JsonEditor(*JSON_EDITORS["builtinToolboxes"], label="built-in toolboxes", help_text="JSON list")
    fileSandboxes = JsonEditor(*JSON_EDITORS["fileSandboxes"], label="file sandboxes", help_text="JSON object")
    parameters = JsonEditor(*JSON_EDITORS["parameters"], help_text="JSON list of parameter declarations")
    bindings = JsonEditor(*JSON_EDITORS["bindings"], help_text="JSON list of argument bindings")
    policy_default = forms.ChoiceField(
        choices=DISPOSITIONS, required=False, label="default disposition", help_text="for calls no rule matches"
    )
    policy_reason = forms.CharField(required=False, label="default reason", help_text="why (shown with deferred calls)")
    policy_rules = JsonEditor(
        POLICY_RULES,
        'a list of {"tool": wire name, "disposition": {"tag", ...}}',
        label="policy rules",
        help_text='JSON list, first match wins: [{"tool": "bash_x", "disposition": {"tag": "defer"}}]',
    )
    executionMode = forms.ChoiceField(
        label="execution mode", choices=[("synchronous", "synchronous"), ("asynchronous", "asynchronous")]
    )
    maxConcurrency = forms.IntegerField(label="max concurrency", min_value=1, help_text="tool calls run at once")
    asyncCallTimeoutSeconds = forms.FloatField(
        label="call timeout (s)", required=False, min_value=0, help_text="empty: the server's AGENTS_TOOL_TIMEOUT"
    )
    mailInToolResult = forms.BooleanField(label="mail in tool results", required=False)
    interruptCompletions = forms.BooleanField(label="interrupt completions", required=False)
    pauseCancelsCalls = forms.BooleanField(label="pause cancels calls", required=False)
    resumeOnAnyMail = forms.BooleanField(label="resume on any mail", required=False)
    other = JsonEditor(
        TypeAdapter(dict[str, Any]),
        "a JSON object",
        label="other keys",
        help_text="JSON object of the contents keys without a field above (kept as they are)",
    )

    class Meta:
        model = StoredAgent
        fields = ["slug"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prepared: services.PreparedAgent | None = None
        self.problems: list[str] = []
        contents: dict[str, Any] = dict(self.instance.contents or {}) if self.instance.pk else {}
        self.original = contents
        if "slug" in self.fields:
            self.fields["slug"].help_text = "letters, digits and _ . : - (fixed once stored)"
        self.known_keys = _known_key_ids()
        cast(forms.ChoiceField, self.fields["apiKeyId"]).choices = _key_ids(
            self.instance.pk or None, contents.get("apiKeyId")
        )
        flavor = contents.get("flavor")
        if isinstance(flavor, str) and flavor not in dict(FLAVORS):
            cast(forms.ChoiceField, self.fields["flavor"]).choices = [*FLAVORS, (flavor, f"{flavor} (as stored)")]
        helpers = StoredAgent.objects.all()
        cast(forms.ModelMultipleChoiceField, self.fields["helpers"]).queryset = (
            helpers.exclude(pk=self.instance.pk) if self.instance.pk else helpers
        )
        self.initial.update(self._initial_of(contents))
        prefix = "files"
        rows = [{"path": path, "content": text} for path, text in sorted((self.instance.files or {}).items())]
        self.file_rows = FileRows(self.data or None, prefix=prefix, initial=rows or None)

    def _initial_of(self, contents: dict[str, Any]) -> dict[str, Any]:
        initial: dict[str, Any] = {key: contents.get(key) for key in REQUIRED if key in contents}
        key_id = contents.get("apiKeyId")
        if "apiKeyId" in contents and (key_id not in self.known_keys or key_id == LEGACY_NO_KEY):
            initial["apiKeyId"] = NO_KEY
        initial["systemPrompt"] = "\n".join(str(line) for line in contents.get("systemPrompt") or [])
        initial.update({key: contents.get(key, default) for key, default in SCALARS.items()})
        initial.update({key: _pretty(contents[key]) for key in JSON_EDITORS if key in contents})
        initial["helpers"] = [ref.get("slug") for ref in contents.get("extraAgents") or [] if isinstance(ref, dict)]
        policy = contents.get("toolCallPolicyConfig") or {}
        default = policy.get("default") or {}
        initial["policy_default"] = default.get("tag", "") if policy else ""
        initial["policy_reason"] = default.get("reason") or ""
        if policy.get("rules"):
            initial["policy_rules"] = _pretty(policy["rules"])
        rest = {key: value for key, value in contents.items() if key not in OWNED}
        initial["other"] = _pretty(rest) if rest else ""
        return initial

    def contents(self) -> dict[str, Any]:
        """The agent's contents built from the cleaned fields (after ``is_valid``)."""
        data, original = self.cleaned_data, self.original
        contents: dict[str, Any] = dict(data.get("other") or {})
        contents.update({key: data.get(key) for key in REQUIRED})
        if not data.get("apiKeyId"):
            slug = str(self.instance.pk or data.get("slug") or "")
            contents["apiKeyId"] = keyless_id(slug, original.get("apiKeyId"), self.known_keys)
        contents["systemPrompt"] = (data.get("systemPrompt") or "").replace("\r\n", "\n").split("\n")
        for key, default in SCALARS.items():
            value = data.get(key)
            if value in ("", None) and default is None:
                value = None
            if key in original or value != default:
                if value is not None or key in original:
                    contents[key] = value
        contents.update({key: data[key] for key in JSON_EDITORS if data.get(key) is not None})
        helpers = [helper.slug for helper in data.get("helpers") or []]
        kept = {ref.get("slug"): ref for ref in original.get("extraAgents") or [] if isinstance(ref, dict)}
        if helpers or "extraAgents" in original:
            order = [slug for slug in kept if slug in helpers] + [slug for slug in helpers if slug not in kept]
            contents["extraAgents"] = [kept.get(slug, {"slug": slug}) for slug in order]
        policy = self._policy()
        if policy is not None:
            contents["toolCallPolicyConfig"] = policy
        return contents

    def _policy(self) -> dict[str, Any] | None:
        data = self.cleaned_data
        tag, reason, rules = data.get("policy_default"), data.get("policy_reason"), data.get("policy_rules")
        if not tag and not rules:
            return None
        old = dict((self.original.get("toolCallPolicyConfig") or {}).get("default") or {})
        default = old if old.get("tag") == tag else {}
        default = {**default, "tag": tag or "runSync"}
        if reason:
            default["reason"] = reason
        else:
            default.pop("reason", None)
        return {**(self.original.get("toolCallPolicyConfig") or {}), "default": default, "rules": rules or []}

    def clean_other(self) -> Any:
        """Raises: forms.ValidationError when it names a key a field owns."""
        other = self.cleaned_data.get("other") or {}
        owned = sorted(key for key in other if key in OWNED)
        if owned:
            raise forms.ValidationError(f"set {', '.join(owned)} with the field{'s' if len(owned) > 1 else ''} above")
        return other

    def is_valid(self) -> bool:
        """The fields, the file rows, then the stored-agent checks."""
        rows_valid = self.file_rows.is_valid()
        return super().is_valid() and rows_valid and not self.problems

    def clean(self) -> dict[str, Any]:
        """Load the agent as ``PUT /v1/agents/:slug`` would; each problem goes to its field."""
        data = super().clean()
        assert data is not None  # noqa: S101 - narrows the type (Form.clean answers cleaned_data)
        slug = self.instance.pk or data.get("slug")
        # a JSON box that does not parse or fit its schema is left out, and the loader still
        # checks the rest: one save reports every problem it can, not only the first
        if set(self.errors) - set(JSON_EDITORS) or not slug or not self.file_rows.is_valid():
            return data
        try:
            self.prepared = services.stored_agent_prepare(slug, {**self.contents(), "files": self.file_rows.file_map()})
        except ApiError as error:
            for problem in error.message.split("; "):
                self._place(str(error.code), _PREFIX.sub("", problem))
        return data

    def _place(self, code: str, problem: str) -> None:
        """Show one problem of the loader next to the field it names (else above the form)."""
        message = f"{code}: {problem}"
        self.problems.append(message)
        field = next((FIELD_OF_KEY[word] for word in _KEY.findall(problem) if word in FIELD_OF_KEY), None)
        if field == "policy_rules" and "toolCallPolicyConfig.default" in problem:
            field = "policy_default"
        if field == "slug" and "slug" not in self.fields:
            field = None
        if field == "files":
            self.file_rows.non_form_errors().append(message)
            self.add_error(None, message)
        else:
            self.add_error(field, message)

    def check_report(self) -> list[str]:
        """The check's lines of the prepared agent (after a successful ``is_valid``), from what it
        declares: checking runs nothing (docs/agents.md §9)."""
        if self.prepared is None:
            return []
        return stored_check_lines(self.prepared.loaded, self.prepared.parameters)
