"""Model endpoint overrides: agent files pointed at another model endpoint without editing them
(docs/cli.md §2.3.2, docs/api.md §14.4).

Two maps, each ``FROM=TO`` entries, given as flags or environment variables:

* ``--model-url FROM=TO`` / ``AGENTS_MODEL_URLS``: an agent whose ``modelUrl`` is ``FROM``
  (compared without a trailing ``/``) calls ``TO`` instead;
* ``--api-key-id FROM=TO`` / ``AGENTS_API_KEY_IDS``: an agent whose ``apiKeyId`` is ``FROM``
  sends the keys file's ``TO`` entry instead (an empty ``TO``: no key at all).

The variables hold entries separated by white space (neither a URL nor a key id has any). The
agent files, stored agents and session files are never changed: the maps apply where a model is
called. A redirected agent keeps its ``apiKeyId``, so a hosted provider's key would go to the new
endpoint; ``--api-key-id openai=`` keeps it from leaving.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from foundation.env import env


class EndpointMapError(ValueError):
    """An entry of a map is not ``FROM=TO``, names a ``FROM`` twice, or (model URLs) names a URL
    that is not ``http(s)://host...``; the message names the entry."""


def parse_map(entries: list[str], what: str, *, urls: bool) -> dict[str, str]:
    """Read ``FROM=TO`` entries.

    Args:
        entries: the entries, as given (a flag's values, or a variable split on white space).
        what: the flag's name, for messages (``--model-url``).
        urls: both sides are model URLs (``FROM`` is kept without its trailing ``/``), and
            ``TO`` may not be empty; otherwise key ids, and an empty ``TO`` means no key.
    Returns:
        ``FROM`` -> ``TO``.
    Raises:
        EndpointMapError: as the class says.
    """
    mapping: dict[str, str] = {}
    for entry in entries:
        # a URL holds no "=" before its query, so the first "=" after the scheme splits the entry
        source, separator, target = entry.partition("=")
        if not separator or not source:
            raise EndpointMapError(f"{what} {entry!r}: expected FROM=TO")
        if urls:
            for url in (source, target):
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.netloc:
                    raise EndpointMapError(f"{what} {entry!r}: {url!r} is not an http(s):// URL")
            source = source.rstrip("/")
        if source in mapping:
            raise EndpointMapError(f"{what}: {source!r} is mapped twice")
        mapping[source] = target
    return mapping


@functools.cache
def _maps() -> tuple[dict[str, str], dict[str, str]]:
    """The two maps of this process, read once from its environment (the command line set it)."""
    return (
        parse_map(env.str("AGENTS_MODEL_URLS", default="").split(), "AGENTS_MODEL_URLS", urls=True),
        parse_map(env.str("AGENTS_API_KEY_IDS", default="").split(), "AGENTS_API_KEY_IDS", urls=False),
    )


def check_maps() -> None:
    """Read both maps now, so that a bad entry stops a command at its start.

    Raises:
        EndpointMapError: a bad entry.
    """
    _maps.cache_clear()
    _maps()


def model_url(url: str) -> str:
    """The endpoint an agent whose ``modelUrl`` is ``url`` calls: the mapped one, else ``url``."""
    return _maps()[0].get(url.rstrip("/"), url)


def api_key_id(key_id: str) -> str:
    """The keys file entry an agent whose ``apiKeyId`` is ``key_id`` uses: the mapped one (``""``
    for none), else ``key_id``."""
    return _maps()[1].get(key_id, key_id)
