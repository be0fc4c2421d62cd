"""Fetching, validating and dereferencing an HTTP toolbox's document (docs/tools.md §9.2).

The document is JSON or YAML, OpenAPI 3.x or Swagger 2.0 (what PostgREST serves). It is checked
with ``openapi-spec-validator``, and every ``$ref`` is replaced by what it points to with
``referencing``'s resolver (refs inside refs, array items, ``allOf``/``anyOf``/``oneOf`` members):
the model needs whole schemas, it cannot follow references. A reference that leads back to
itself is cut where it would repeat, into an object schema that says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from foundation.redaction import redact_url, redact_urls

from .calls import http_client
from .config import is_remote

#: Seconds the document may take to arrive.
FETCH_TIMEOUT = 30.0
_BASE_URI = "urn:agents-server:http-toolbox"


class DocumentError(ValueError):
    """The document cannot be used: not fetched, not JSON or YAML, not a valid OpenAPI or Swagger
    document, or a ``$ref`` that leads nowhere. The message says which, never a secret."""


def fetch_text(url: str, headers: Mapping[str, str], params: Mapping[str, str]) -> str:
    """The document's text, from an ``http(s)://`` URL (with ``headers`` and ``params``) or a file.

    Raises:
        DocumentError: the request failed, answered 400 or more, or the file cannot be read.
    """
    if not is_remote(url):
        try:
            return Path(url).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise DocumentError(f"cannot read {url}: {type(error).__name__}") from None
    try:
        answer = http_client().get(url, headers=dict(headers), params=dict(params), timeout=FETCH_TIMEOUT)
    except httpx.HTTPError as error:
        raise DocumentError(redact_urls(f"cannot fetch {url}: {type(error).__name__}: {error}")) from None
    if answer.status_code >= 400:
        raise DocumentError(f"cannot fetch {redact_url(url)}: HTTP {answer.status_code}")
    return answer.text


def parse_document(text: str, label: str) -> dict[str, Any]:
    """Decode, validate and dereference a document.

    Args:
        text: the document as fetched.
        label: its URL, for messages.
    Returns:
        the document with every ``$ref`` of its ``paths`` (and Swagger's ``definitions``) replaced;
        the rest is left as it is, so a large document is expanded only where tools are made from.
    Raises:
        DocumentError: see the class.
    """
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError:
        try:
            decoded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise DocumentError(f"{label} is neither JSON nor YAML: {error}") from None
    if not isinstance(decoded, dict):
        raise DocumentError(f"{label} does not hold an object")
    try:
        validate(decoded)
    except OpenAPIValidationError as error:
        where = error.json_path if error.json_path != "$" else "the document"
        raise DocumentError(f"{label} is not a valid OpenAPI document: {where}: {_short(error.message)}") from None
    except Exception as error:  # the validator raises its own kinds (unknown version, unresolvable $ref)
        raise DocumentError(f"{label} is not a valid OpenAPI document: {_short(str(error))}") from None
    resolver = Registry().with_resource(_BASE_URI, Resource.opaque(decoded)).resolver(base_uri=_BASE_URI)
    expanded = dict(decoded)
    for key in ("paths", "definitions"):
        if isinstance(decoded.get(key), dict):
            expanded[key] = dereference(decoded[key], resolver, ())
    return expanded


def _short(text: str, limit: int = 300) -> str:
    """A validator's message held to ``limit`` characters (it may quote the whole document)."""
    return text if len(text) <= limit else text[:limit] + "..."


def dereference(node: Any, resolver: Any, seen: tuple[str, ...]) -> Any:
    """``node`` with every ``$ref`` replaced, recursively.

    Args:
        node: a part of the document.
        resolver: a ``referencing`` resolver for the references ``node`` holds.
        seen: the references being expanded around ``node``, outermost first (a reference found
            again among them is circular).
    Returns:
        the expanded copy; keys written beside a ``$ref`` (a ``description``) are kept over it.
    Raises:
        DocumentError: a reference that cannot be resolved.
    """
    if isinstance(node, list):
        return [dereference(item, resolver, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return {key: dereference(value, resolver, seen) for key, value in node.items()}
    siblings = {key: dereference(value, resolver, seen) for key, value in node.items() if key != "$ref"}
    if ref in seen:
        name = ref.rsplit("/", 1)[-1]
        return {"type": "object", "description": f"{name} (a recursive structure, not expanded again)", **siblings}
    try:
        resolved = resolver.lookup(ref)
    except Unresolvable:
        raise DocumentError(f"reference {ref} cannot be resolved") from None
    target = dereference(resolved.contents, resolved.resolver, (*seen, ref))
    return {**target, **siblings} if isinstance(target, dict) else target
