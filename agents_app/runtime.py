"""Runtime agents: a loaded agent with its tools, policy and API keys, built once per version.

Building an agent runs every bash tool's ``describe``, so the result is cached per slug: for the
life of the process for a file agent (agent files are not reloaded while serving), until a newer
version of it or of one of its helpers is stored for a stored agent. The cached agent's
``toolDirectory`` stays live (``tools_app.bash.live``, docs/tools.md §3.9): every step reads its
current tools.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from agentfiles.endpoints import api_key_id
from agentfiles.keys import api_key_for, fallback_api_key
from agentfiles.loader import AgentTree, LoadedAgent
from agentfiles.parameters import AgentParameters, ParamValue
from agents_app.narrowing import helper_tools
from agents_app.registry import get_registry
from agents_app.stored import relative_to
from foundation.errors import AgentFailedToLoad, UnknownAgent
from tools_app.activation import HistorySource
from tools_app.base import VisibleParams
from tools_app.policy import ToolCallPolicy
from tools_app.subagent import SubAgentTool
from tools_app.toolset import ToolBuildError, ToolSet, build_toolset


@dataclass
class RuntimeAgent:
    """Everything a run needs from an agent.

    Attributes:
        loaded: the agent as loaded from its file.
        toolset: its tools (wire names -> tools).
        policy: its tool-call policy (docs/tools.md §5).
        api_key: the key for its ``apiKeyId``, or ``None`` (no Authorization header).
        owner_api_keys: owner -> keys, from ``--owner-api-keys`` (see :meth:`api_key_for`).
        parameters: its declared parameters, defaults resolved when it was built (docs/agents.md §8).
    """

    loaded: LoadedAgent
    toolset: ToolSet
    policy: ToolCallPolicy
    api_key: str | None
    owner_api_keys: dict[str, dict[str, str]] = field(default_factory=dict)
    parameters: AgentParameters = field(default_factory=lambda: AgentParameters([]))

    def api_key_for(self, owner: str | None) -> str | None:
        """The key a session of ``owner`` calls the LLM with (docs/api.md §10.6).

        An owner with a keys file of their own uses that file only (a key id missing from it
        means no key); other owners, and sessions without one, use the shared file (``api_key``).
        """
        keys = self.owner_api_keys.get(owner) if owner is not None else None
        if keys is None:
            return self.api_key
        key_id = api_key_id(self.loaded.spec.apiKeyId)
        return api_key_for(keys, key_id) if key_id else None

    @property
    def slug(self) -> str:
        """The agent's slug."""
        return self.loaded.spec.slug

    @property
    def system_prompt(self) -> str:
        """The system prompt text."""
        return self.loaded.spec.system_prompt_text()

    def system_tools(self, params: VisibleParams = None, history: HistorySource = None) -> list[dict[str, Any]]:
        """The ``userTools`` entries stored on each user turn (``params``: the session's values,
        which hide the exposed arguments they bind; ``history``: the session's answered calls,
        which open gated tools, ``tools_app.activation``)."""
        return self.toolset.system_tools(params, history)

    def openai_tools(self, params: VisibleParams = None, history: HistorySource = None) -> list[dict[str, Any]]:
        """The ``tools`` of a chat-completions request (arguments as for :meth:`system_tools`)."""
        return self.toolset.openai_tools(params, history)

    def resolve_params(
        self, given: dict[str, ParamValue] | None = None, message: dict[str, ParamValue] | None = None
    ) -> dict[str, ParamValue]:
        """Its parameter values for a session (``given``) and a run (``message``): see
        ``AgentParameters.resolve``."""
        return self.parameters.resolve(given, message)


_lock = threading.Lock()
_cache: dict[str, RuntimeAgent] = {}
#: slug -> the stored agent's tree its cached runtime agent was built from (file agents have none)
_built_from: dict[str, AgentTree] = {}


def runtime_agent(slug: str) -> RuntimeAgent:
    """The runtime agent for ``slug`` (a root, or a helper of one), built on first use.

    Its tools are its own plus one ``io_prompt_agent_<helper>`` per helper, and ``describe_agent``
    and ``derive_agent`` when it has helpers (docs/tools.md §8.6).

    Raises:
        ApiError: 404 ``unknown_agent`` when no root agent has that slug; 400
            ``agent_runs_commands`` (``AgentRegistry.get``); 400 ``agent_failed_to_load`` when a
            stored agent's tools cannot be built (a server that does not start, a binding that
            cannot apply, an OpenAPI document that cannot be fetched).
        tools_app.toolset.ToolBuildError: a file agent's tools cannot be built.
    """
    _forget_if_stale(slug)
    with _lock:
        cached = _cache.get(slug)
        if cached is not None:
            return cached
        registry = get_registry()
        loaded = registry.find(slug)
        if loaded is None:
            raise UnknownAgent(slug)
        helpers = [registry.find(h) for h in loaded.helper_slugs]
        refs = {ref.slug: ref for ref in loaded.spec.helper_refs()}
        parameters = AgentParameters.load(loaded.spec, base_dir=loaded.base_dir, api_keys=registry.api_keys)
        subagents = [
            SubAgentTool(
                h.spec.slug,
                h.spec.announce,
                refs[h.spec.slug].with_ if h.spec.slug in refs else None,
                refs[h.spec.slug].narrowable if h.spec.slug in refs else True,
            )
            for h in helpers
            if h is not None
        ]
        try:
            toolset = build_toolset(loaded, parameters.resolve(), registry.api_keys)
        except ToolBuildError as error:
            if loaded.path is not None:
                raise
            # a stored agent is checked without building its tools (docs/agents.md §9): here they are
            raise AgentFailedToLoad("; ".join(relative_to(loaded.base_dir, error.problems))) from None
        toolset = toolset.with_extra_tools(helper_tools(subagents, runtime_agent))
        agent = RuntimeAgent(
            loaded=loaded,
            toolset=toolset,
            policy=ToolCallPolicy.from_config(
                loaded.spec.toolCallPolicyConfig, frozenset(tool.name for tool in loaded.spec.externalTools)
            ),
            api_key=_shared_key(registry.api_keys, loaded.spec.apiKeyId),
            owner_api_keys=registry.owner_api_keys,
            parameters=parameters,
        )
        _cache[slug] = agent
        return agent


def _shared_key(keys: dict[str, str], key_id: str) -> str | None:
    """The shared keys file's key for ``key_id`` once ``--api-key-id`` has mapped it; a key id
    mapped to nothing has no key, not even ``AGENTS_API_KEY``, which stands in for a key id the
    file lacks (docs/cli.md §2.3, §2.3.2)."""
    mapped = api_key_id(key_id)
    if not mapped:
        return None
    return api_key_for(keys, mapped) or fallback_api_key()


def _forget_if_stale(slug: str) -> None:
    """Drop the cached runtime agent of a stored agent once another version of its tree is stored.

    The registry's lookup is the freshness check (one query while nothing changed). File agents
    never change while serving and are not looked at.
    """
    registry = get_registry()
    if slug in registry.trees:
        return
    tree = registry.tree(slug)
    with _lock:
        if _built_from.get(slug) is not tree:
            _cache.pop(slug, None)
            _built_from.pop(slug, None)
            if tree is not None:
                _built_from[slug] = tree


def reset_runtime_agents() -> None:
    """Forget every built agent (tests and the CLI, after installing a new registry)."""
    with _lock:
        _cache.clear()
        _built_from.clear()
