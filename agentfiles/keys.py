"""The API keys file (docs/agents.md §6, docs/decisions.md §5).

An agent's ``apiKeyId`` names an entry of this file; the entry's value is sent as the bearer
token to the model endpoint. Two shapes are read:

* the agents-exe shape, a flat object ``{"openai": "sk-...", "mistral": "..."}``;
* a list shape, ``{"keys": [{"id": "openai", "value": "sk-..."}, ...]}``.

A key id that the file lacks is not an error: the request simply goes without an
``Authorization`` header (local endpoints such as Ollama need none). Secret values never appear
in error messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from foundation.env import env


class ApiKeysError(Exception):
    """The API keys file is missing, unreadable or malformed; the message names the file."""


def load_api_keys(path: str | Path | None) -> dict[str, str]:
    """Read an API keys file.

    Args:
        path: the file; ``None`` or ``""`` means no keys file. ``~`` is expanded, since the
            default location lives in the home directory.
    Returns:
        key id -> secret value (``{}`` when there is no file to read).
    Raises:
        ApiKeysError: the file does not exist or cannot be read, is not JSON, or has neither
            accepted shape (including a non-string id or value, or an id given twice).
    """
    if path is None or str(path) == "":
        return {}
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ApiKeysError(f"{file}: API keys file not found") from None
    except IsADirectoryError:
        raise ApiKeysError(f"{file}: is a directory, not an API keys file") from None
    except UnicodeDecodeError as exc:
        raise ApiKeysError(f"{file}: not UTF-8 text (bad byte at offset {exc.start})") from None
    except OSError as exc:
        raise ApiKeysError(f"{file}: cannot read API keys file: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiKeysError(
            f"{file}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    try:
        return _parse(document)
    except ValueError as exc:
        raise ApiKeysError(f"{file}: {exc}") from None


def fallback_api_key() -> str | None:
    """``AGENTS_API_KEY``: the key of an agent whose ``apiKeyId`` the keys file lacks (docs/cli.md
    §2.3), or ``None`` when it is not set."""
    return env.str("AGENTS_API_KEY", default="") or None


def api_key_for(keys: dict[str, str], key_id: str) -> str | None:
    """The secret for ``key_id``, or ``None`` when the file has none (or an empty one).

    ``None`` means: send no ``Authorization`` header. It is not an error (docs/decisions.md §5).
    """
    return keys.get(key_id) or None


#: The key id the console stored for "no key" before the rule of :func:`keyless_id`
#: (docs/agents.md §6.1); read as "no key" wherever the editor shows an agent.
LEGACY_NO_KEY = "none"


def keyless_id(slug: str, current: str | None, known: set[str]) -> str:
    """The ``apiKeyId`` an agent file names when it is to send no key (docs/agents.md §6.1).

    agents-exe requires a non-empty ``apiKeyId`` and sends no key for an id the keys file lacks, so
    "no key" is an id that no keys file holds. The agent's own id is kept when it already is one
    (nothing changes in its versions); otherwise the id is ``<slug>-key``, the shape of
    agents-exe's own presets, so an exported file names a key its user can add later.

    Args:
        slug: the agent's slug.
        current: the agent's stored ``apiKeyId`` (``None`` for a new agent).
        known: every key id of the server's keys files (shared and owners').
    Returns:
        a non-empty id that is not in ``known`` and is not :data:`LEGACY_NO_KEY`.
    """
    if current and current not in known and current != LEGACY_NO_KEY:
        return current
    candidate, number = f"{slug}-key", 1
    while candidate in known:
        number += 1
        candidate = f"{slug}-key-{number}"
    return candidate


def _parse(document: Any) -> dict[str, str]:
    """Read either shape; raise ``ValueError`` with a message that names the offending entry."""
    shape_hint = 'expected {"<id>": "<value>", ...} or {"keys": [{"id": ..., "value": ...}, ...]}'
    if not isinstance(document, dict):
        raise ValueError(f"{shape_hint}, got {_json_kind(document)}")
    # A flat file may well hold a key whose id is "keys"; only a list there means the list shape.
    if isinstance(document.get("keys"), list):
        return _parse_list(document["keys"])
    keys: dict[str, str] = {}
    for key_id, value in document.items():
        if not isinstance(value, str):
            raise ValueError(
                f"key '{key_id}': expected a string value, got {_json_kind(value)} ({shape_hint})"
            )
        keys[key_id] = value
    return keys


def _parse_list(entries: list[Any]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for index, entry in enumerate(entries):
        where = f"keys[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(
                f'{where}: expected an object {{"id": ..., "value": ...}}, got {_json_kind(entry)}'
            )
        for name in ("id", "value"):
            if name not in entry:
                raise ValueError(f"{where}: missing '{name}'")
            if not isinstance(entry[name], str):
                raise ValueError(f"{where}.{name}: expected a string, got {_json_kind(entry[name])}")
        key_id = entry["id"]
        if not key_id:
            raise ValueError(f"{where}.id: must not be empty")
        if key_id in keys:
            raise ValueError(f"{where}: id '{key_id}' is given twice")
        keys[key_id] = entry["value"]
    return keys


def _json_kind(value: Any) -> str:
    """The JSON type of ``value`` (never the value itself: it may be a secret)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "a string"


def load_owner_api_keys(entries: list[str]) -> dict[str, dict[str, str]]:
    """Read the ``--owner-api-keys OWNER=FILE`` entries (docs/api.md §10.6).

    Each owner's file replaces the shared keys file for that owner's sessions: there is no merge.

    Args:
        entries: ``"OWNER=FILE"`` strings (the owner is everything before the first ``=``).
    Returns:
        owner -> (key id -> secret).
    Raises:
        ApiKeysError: an entry without ``OWNER=``, an owner given twice, or a file that
            :func:`load_api_keys` refuses.
    """
    owners: dict[str, dict[str, str]] = {}
    for entry in entries:
        owner, separator, path = entry.partition("=")
        owner = owner.strip()
        if not separator or not owner or not path.strip():
            raise ApiKeysError(f"--owner-api-keys {entry!r}: expected OWNER=FILE")
        if owner in owners:
            raise ApiKeysError(f"--owner-api-keys: owner {owner!r} is given twice")
        owners[owner] = load_api_keys(path.strip())
    return owners
