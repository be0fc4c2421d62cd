"""The environment of every tool process (docs/tools.md, "Tool environments").

Bash tools (``describe`` and ``run``), MCP stdio servers, the ``--isolate-tools`` worker, the
skills' ``git``, the commands and command filters of the System and Developer toolboxes, and the
``Command`` sources of parameter defaults all start from :func:`base_environment`:

* ``clean`` (the default): this process's environment without the server's own configuration
  (:func:`foundation.env.is_server_variable`: ``DJANGO_SECRET_KEY``, ``DATABASE_URL``,
  ``REDIS_URL``, ``AGENTS_*``, ``OPENAI_*``, ...);
* ``strict`` (``agents serve|worker --tool-env strict``, ``AGENTS_TOOL_ENV=strict``): only
  :data:`STRICT_VARIABLES` and :data:`STRICT_PREFIXES`.

What the agent declares (bash ``env``-mode arguments and the values bound to them, MCP ``env``)
is added on top by the caller: it is the agent's own, not the server's. The same rule decides
which variables an agent file may read by name (OpenAPI ``${VAR}``, ``EnvVar`` sources):
:func:`unreadable`, so that a variable no tool receives cannot be read that way either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from foundation.env import env, is_server_variable

#: The modes of ``--tool-env`` / ``AGENTS_TOOL_ENV``; the first is the default.
MODES = ("clean", "strict")
DEFAULT_MODE = MODES[0]
#: What the strict mode passes on, by name and by prefix.
STRICT_VARIABLES = frozenset({"PATH", "HOME", "LANG", "TZ", "TMPDIR"})
STRICT_PREFIXES = ("LC_",)


def parse_mode(value: str) -> str:
    """Check a ``--tool-env`` / ``AGENTS_TOOL_ENV`` value.

    Returns:
        ``value``, one of :data:`MODES`.
    Raises:
        ImproperlyConfigured: any other value (the settings refuse to load: the commands exit 2).
    """
    if value not in MODES:
        raise ImproperlyConfigured(f"AGENTS_TOOL_ENV (--tool-env) takes clean or strict, not {value!r}")
    return value


def current_mode() -> str:
    """The configured mode: ``settings.AGENTS["TOOL_ENV"]``, or ``AGENTS_TOOL_ENV`` itself before
    the settings are loaded (the command line resolving parameter defaults).

    Raises:
        ImproperlyConfigured: ``AGENTS_TOOL_ENV`` is neither ``clean`` nor ``strict``.
    """
    if settings.configured:
        return parse_mode(settings.AGENTS["TOOL_ENV"])
    return parse_mode(env.str("AGENTS_TOOL_ENV", default=DEFAULT_MODE))


def passes(name: str, mode: str) -> bool:
    """Whether the variable ``name`` of the server's environment reaches tool processes in ``mode``."""
    if is_server_variable(name):
        return False
    return mode == "clean" or name in STRICT_VARIABLES or name.startswith(STRICT_PREFIXES)


def base_environment(source: Mapping[str, str] | None = None, *, mode: str | None = None) -> dict[str, str]:
    """The environment a tool process starts from, before what the agent declares.

    Args:
        source: the environment to filter; ``None`` for this process's (``os.environ``).
        mode: ``clean`` or ``strict``; ``None`` for :func:`current_mode`.
    Returns:
        A new dict: ``source`` without the variables that do not pass (:func:`passes`).
    """
    mode = mode or current_mode()
    given = os.environ if source is None else source
    return {name: value for name, value in given.items() if passes(name, mode)}


def tool_environment(declared: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a tool process: :func:`base_environment`, then ``declared`` (the
    agent's own variables: ``env``-mode arguments, bound values, MCP ``env``), which wins."""
    return {**base_environment(), **(declared or {})}


def unreadable(name: str, *, mode: str | None = None) -> str | None:
    """Why an agent file may not read the server's variable ``name`` (OpenAPI ``${VAR}``, an
    ``EnvVar`` source), or ``None`` when it may: exactly the variables tool processes receive.

    Returns:
        A sentence naming the variable (never its value), or ``None``.
    """
    if is_server_variable(name):
        return f"{name} is the server's own configuration, which agents may not read"
    if not passes(name, mode or current_mode()):
        return f"{name} is not passed to tools (--tool-env strict passes only PATH, HOME, LANG, LC_*, TZ and TMPDIR)"
    return None
