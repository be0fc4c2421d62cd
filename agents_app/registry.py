"""The agents this process serves: the agent files named in settings, loaded once.

Each process (server or worker) loads the same files (``AGENTS_AGENT_FILES``), so every process
agrees on the agents without sharing memory (spec/server-api.md §0 startup order, step 3).
"""

from __future__ import annotations

import threading

from django.conf import settings

from agents_app.keys import load_api_keys
from agents_app.loader import AgentTree, LoadedAgent, load_agent_files


class AgentRegistry:
    """Root agents by slug, with their trees, and the shared API keys.

    Args:
        trees: root slug -> :class:`AgentTree`, as :func:`load_agent_files` returns.
        api_keys: key id -> secret, from the API keys file.
    """

    def __init__(self, trees: dict[str, AgentTree], api_keys: dict[str, str]) -> None:
        self.trees = trees
        self.api_keys = api_keys

    def roots(self) -> list[LoadedAgent]:
        """The root agents, sorted by slug."""
        return [self.trees[slug].root for slug in sorted(self.trees)]

    def get(self, slug: str) -> LoadedAgent | None:
        """The root agent with ``slug``, or ``None``."""
        tree = self.trees.get(slug)
        return tree.root if tree else None

    def find(self, slug: str) -> LoadedAgent | None:
        """The agent with ``slug``: a root, else a helper of some root's tree; ``None`` if unknown.

        Child sessions run helpers, which need not be roots.
        """
        root = self.get(slug)
        if root is not None:
            return root
        for tree_slug in sorted(self.trees):
            helper = self.trees[tree_slug].agents.get(slug)
            if helper is not None:
                return helper
        return None


_lock = threading.Lock()
_registry: AgentRegistry | None = None


def load_registry_from_settings() -> AgentRegistry:
    """Load the agent files and keys file named in ``settings.AGENTS``.

    Raises:
        agents_app.loader.AgentLoadError: an agent file fails to load.
        agents_app.keys.ApiKeysError: the keys file is missing or malformed.
    """
    config = settings.AGENTS
    return AgentRegistry(load_agent_files(config["AGENT_FILES"]), load_api_keys(config["API_KEYS_FILE"] or None))


def get_registry() -> AgentRegistry:
    """This process's registry, loaded on first use."""
    global _registry
    with _lock:
        if _registry is None:
            _registry = load_registry_from_settings()
        return _registry


def set_registry(registry: AgentRegistry | None) -> None:
    """Install an already-loaded registry (the CLI validates files before serving), or reset."""
    global _registry
    with _lock:
        _registry = registry
