"""The agents this process serves: the agent files named in settings, then the stored agents.

Each process (server or worker) loads the same files (``AGENTS_AGENT_FILES``), so every process
agrees on the agents without sharing memory (docs/api.md §14.1). Stored agents (docs/api.md §12)
come from the database and are checked for changes on every lookup of a slug that no file
defines, so an edit made through one process is used by all of them at once.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

from django.conf import settings

from agentfiles.keys import load_api_keys, load_owner_api_keys
from agentfiles.loader import AgentTree, LoadedAgent, load_agent_files
from agents_app.stored import StoredAgentCache, StoredInfo


class AgentRegistry:
    """Root agents by slug, with their trees, and the shared API keys.

    Args:
        trees: root slug -> :class:`AgentTree`, as :func:`load_agent_files` returns.
        api_keys: key id -> secret, from the API keys file.
        owner_api_keys: owner -> (key id -> secret), from ``--owner-api-keys``: these replace
            ``api_keys`` for that owner's sessions (docs/api.md §10.6).
        files_only: serve the agent files' agents only and never read the database (``agents
            check``, which opens no database: docs/cli.md §6.1).
    """

    def __init__(
        self,
        trees: dict[str, AgentTree],
        api_keys: dict[str, str],
        owner_api_keys: dict[str, dict[str, str]] | None = None,
        *,
        files_only: bool = False,
    ) -> None:
        self.trees = trees
        self.api_keys = api_keys
        self.owner_api_keys = owner_api_keys or {}
        self.stored = StoredAgentCache()
        self.files_only = files_only

    def one_look(self) -> AbstractContextManager[None]:
        """A block in which the stored agents are read from the database once, at the first
        lookup: listing every agent makes as many queries for 30 agents as for one
        (:meth:`StoredAgentCache.one_look`)."""
        return self.stored.one_look()

    def file_slugs(self) -> set[str]:
        """Every slug an agent file defines, helpers included: no stored agent may take one."""
        return {slug for tree in self.trees.values() for slug in tree.agents}

    def tree(self, slug: str) -> AgentTree | None:
        """The tree of root agent ``slug``: a file's, else the current stored version's, else ``None``."""
        tree = self.trees.get(slug)
        if tree is not None or self.files_only:
            return tree
        self.stored.refresh(self.file_slugs())
        return self.stored.tree(slug)

    def source(self, slug: str) -> str | None:
        """``"file"`` or ``"database"`` for a known root agent, else ``None``."""
        if slug in self.trees:
            return "file"
        return "database" if self.tree(slug) is not None else None

    def stored_info(self, slug: str) -> StoredInfo | None:
        """The stored contents and metadata of a stored agent, ``None`` for others."""
        if slug in self.trees or self.files_only:
            return None
        self.stored.refresh(self.file_slugs())
        return self.stored.info(slug)

    def roots(self) -> list[LoadedAgent]:
        """The root agents, files and stored ones, sorted by slug."""
        if self.files_only:
            return [self.trees[slug].root for slug in sorted(self.trees)]
        self.stored.refresh(self.file_slugs())
        slugs = sorted({*self.trees, *self.stored.slugs()})
        return [tree.root for tree in (self.tree(slug) for slug in slugs) if tree is not None]

    def get(self, slug: str) -> LoadedAgent | None:
        """The root agent with ``slug``, or ``None``.

        Raises:
            ApiError: 400 ``agent_runs_commands`` for a stored agent that names commands the
                operator does not allow (docs/agents.md §9); a kind of ``UnknownAgent``, so what
                handles a gone agent handles it too.
        """
        tree = self.tree(slug)
        if tree is None and slug not in self.trees and not self.files_only:
            refusal = self.stored.refusal(slug)
            if refusal is not None:
                raise refusal
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
        agentfiles.loader.AgentLoadError: an agent file fails to load.
        agentfiles.keys.ApiKeysError: a keys file (shared or an owner's) is missing or malformed.
    """
    config = settings.AGENTS
    return AgentRegistry(
        load_agent_files(config["AGENT_FILES"]),
        load_api_keys(config["API_KEYS_FILE"] or None),
        load_owner_api_keys(config["OWNER_API_KEYS"]),
    )


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
