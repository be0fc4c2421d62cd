"""Reading an ``OpenAPIServer`` or ``PostgRESTServer`` entry (docs/tools.md §9.1).

Keys are the agent file's PascalCase ones: ``SpecUrl``, ``BaseUrl``, ``Headers``, ``Token``,
``Secrets``, ``Bindings``, ``Activation``, and ``Name`` (ours: the toolbox's name in its tools'
names; without it the host and port of ``BaseUrl``). Secrets whose source is a ``SecretSource``
are resolved once here; a ``ParamSource`` secret is read from the call's parameters on every
request (``tools_app.openapi.http``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from agentfiles.parameters import resolve_default
from agentfiles.schema import Activation, ActivationError, Binding, SecretSource, parse_activation
from foundation.toolenv import unreadable

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SERIALIZERS = ("Header", "Query")


class HttpToolboxError(ValueError):
    """An HTTP toolbox entry cannot be used; the message names the entry (``openApiToolboxes[0]...``)."""


@dataclass(frozen=True)
class Secret:
    """One ``Secrets`` entry, its value resolved unless it comes from a parameter.

    Attributes:
        kind: ``Header`` or ``Query``: where the value goes.
        name: the header or query parameter's name.
        template: the text sent, ``{{secret}}`` replaced by the value.
        value: the value when it came from a ``SecretSource`` (``None`` when it could not be read).
        param: the parameter the value is read from at each request (a ``ParamSource``), else ``None``.
    """

    kind: str
    name: str
    template: str
    value: str | None = field(default=None, repr=False)
    param: str | None = None

    def render(self, value: str) -> str:
        """The header or query value carrying ``value``."""
        return self.template.replace("{{secret}}", value)


@dataclass(frozen=True)
class HttpToolboxConfig:
    """An HTTP toolbox as configured.

    Attributes:
        where: how problems name the entry (``openApiToolboxes[0]``).
        name: the toolbox's name as written or derived (not yet made LLM-valid).
        spec_url: where the document is: an ``http(s)://`` URL, or a file (``file://`` or a path).
        base_url: the requests' base, without a trailing ``/``.
        headers: fixed headers (``${VAR}`` expanded from the environment).
        token: the bearer token (``${VAR}`` expanded), or ``None``.
        secrets: the ``Secrets`` entries.
        bindings: the ``Bindings`` entries, as ``(where, binding)`` pairs.
        activation: when the tools are visible (``tools_app.activation``).
    """

    where: str
    name: str
    spec_url: str
    base_url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    token: str | None = field(default=None, repr=False)
    secrets: tuple[Secret, ...] = ()
    bindings: tuple[tuple[str, Binding], ...] = ()
    activation: Activation = field(default_factory=Activation)


def is_remote(url: str) -> bool:
    """Whether ``url`` is an ``http://`` or ``https://`` URL."""
    return url.startswith(("http://", "https://"))


def _expand(text: str, where: str) -> str:
    """``${VAR}`` replaced by the environment's value (docs/tools.md §9.1): only a variable tool
    processes receive (docs/tools.md, "Tool environments"), never the server's own configuration.

    Raises:
        HttpToolboxError: naming the variable (never a value) that is refused or not set.
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        refused = unreadable(name)
        if refused is not None:
            raise HttpToolboxError(f"{where}: ${{{name}}} refused: {refused}")
        if name not in os.environ:
            raise HttpToolboxError(f"{where}: environment variable {name} is not set")
        return os.environ[name]

    return _ENV_REFERENCE.sub(value, text)


def _text(contents: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = contents.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise HttpToolboxError(f"{where}.{key} must be a non-empty string")
    return value


def _secret(entry: Any, where: str, base_dir: Path, api_keys: Mapping[str, str]) -> Secret:
    if not isinstance(entry, Mapping):
        raise HttpToolboxError(f"{where} must be an object with source, decoder and serializer")
    decoder = entry.get("decoder")
    if decoder is not None and (not isinstance(decoder, Mapping) or decoder.get("tag") != "Clear"):
        raise HttpToolboxError(f'{where}.decoder: only {{"tag": "Clear", "contents": true}} is supported')
    serializer = entry.get("serializer")
    contents = serializer.get("contents") if isinstance(serializer, Mapping) else None
    if (
        not isinstance(serializer, Mapping)
        or serializer.get("tag") not in SERIALIZERS
        or not isinstance(contents, list)
        or len(contents) != 2
        or not all(isinstance(part, str) and part for part in contents)
    ):
        raise HttpToolboxError(
            f'{where}.serializer must be {{"tag": "Header" or "Query", '
            '"contents": [<name>, <template with {{secret}}>]}'
        )
    kind, (name, template) = serializer["tag"], contents
    source = entry.get("source")
    if isinstance(source, Mapping) and source.get("tag") == "ParamSource":
        param = source.get("contents")
        if not isinstance(param, str) or not param:
            raise HttpToolboxError(f"{where}.source: a ParamSource names a parameter")
        return Secret(kind, name, template, param=param)
    try:
        parsed = SecretSource.model_validate(source)
    except ValidationError:
        raise HttpToolboxError(
            f"{where}.source must be a ParamSource or a Given, EnvVar, FileSystem, Command or ApiKey source"
        ) from None
    resolved = resolve_default(parsed, base_dir=base_dir, api_keys=api_keys)
    if not resolved.resolved:
        raise HttpToolboxError(f"{where}.source: {resolved.problem}")
    value = resolved.value if isinstance(resolved.value, str) else json.dumps(resolved.value)
    return Secret(kind, name, template, value=value)


def parse_http_toolbox(
    entry: Any,
    where: str,
    *,
    tag: str,
    base_dir: Path,
    api_keys: Mapping[str, str] | None = None,
    resolve: Callable[[str], Path] | None = None,
) -> HttpToolboxConfig:
    """Read one ``openApiToolboxes`` or ``postgrestToolboxes`` entry.

    Args:
        entry: the entry (a schema ``Tagged`` or its JSON).
        where: how problems name it (``openApiToolboxes[0]``).
        tag: the expected tag, ``OpenAPIServer`` or ``PostgRESTServer``.
        base_dir: where relative ``FileSystem`` and ``Command`` secret sources run from.
        api_keys: the API keys file's entries, for ``ApiKey`` secret sources.
        resolve: turns a relative ``SpecUrl`` path into a file path (the agent's lookup).
    Returns:
        the :class:`HttpToolboxConfig`.
    Raises:
        HttpToolboxError: another tag, a missing or ill-typed key, an unset ``${VAR}``, a secret
            whose source cannot be read.
    """
    entry_tag = entry.get("tag") if isinstance(entry, Mapping) else getattr(entry, "tag", None)
    contents = entry.get("contents") if isinstance(entry, Mapping) else getattr(entry, "contents", None)
    if entry_tag != tag:
        raise HttpToolboxError(f"{where}: expected a {tag} entry, got tag {entry_tag!r}")
    if not isinstance(contents, Mapping):
        raise HttpToolboxError(f"{where}: {tag} needs an object under 'contents'")
    inner = f"{where}.contents"
    spec_url = _text(contents, "SpecUrl", inner)
    base_url = _text(contents, "BaseUrl", inner)
    assert spec_url is not None and base_url is not None  # noqa: S101 - narrows the type (never checks input)
    if not is_remote(base_url):
        raise HttpToolboxError(f"{inner}.BaseUrl must be an http:// or https:// URL")
    if not is_remote(spec_url) and resolve is not None:
        spec_url = str(resolve(spec_url.removeprefix("file://")))
    name = _text(contents, "Name", inner, required=False) or (urlsplit(base_url).netloc or "api")
    headers = contents.get("Headers") or {}
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise HttpToolboxError(f"{inner}.Headers must be an object of header name -> text, or null")
    token = _text(contents, "Token", inner, required=False)
    secrets = contents.get("Secrets") or []
    if not isinstance(secrets, list):
        raise HttpToolboxError(f"{inner}.Secrets must be a list")
    bindings_raw = contents.get("Bindings") or []
    if not isinstance(bindings_raw, list):
        raise HttpToolboxError(f"{inner}.Bindings must be a list")
    bindings = []
    for index, raw in enumerate(bindings_raw):
        try:
            bindings.append((f"{inner}.Bindings[{index}]", Binding.model_validate(raw)))
        except ValidationError as error:
            raise HttpToolboxError(f"{inner}.Bindings[{index}]: {error.errors()[0]['msg']}") from None
    try:
        activation = parse_activation(contents)
    except ActivationError as error:
        raise HttpToolboxError(f"{inner}.{error}") from None
    return HttpToolboxConfig(
        where=where,
        name=name,
        spec_url=spec_url,
        base_url=base_url.rstrip("/"),
        headers=tuple((str(k), _expand(v, f"{inner}.Headers.{k}")) for k, v in headers.items()),
        token=_expand(token, f"{inner}.Token") if token is not None else None,
        secrets=tuple(_secret(s, f"{inner}.Secrets[{i}]", base_dir, api_keys or {}) for i, s in enumerate(secrets)),
        bindings=tuple(bindings),
        activation=activation,
    )
