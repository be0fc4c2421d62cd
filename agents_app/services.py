"""Writes of stored agents: the one path for the API and the Django admin (docs/api.md §12).

A store is two steps. :func:`stored_agent_prepare` checks the body and loads the agent (its files
written out) without touching the database; the admin runs it to validate its form. Storing runs
nothing (docs/agents.md §9): no tool's ``describe``, no MCP server, no ``Command`` default, no
fetch of an OpenAPI document; those happen when the agent is built for use.
:func:`stored_agent_commit` stores it under the lock of the generation row, checking again what
other writers may have changed meanwhile (file agents, helpers, cycles), and moves the generation
so every process reloads. :func:`stored_agent_put` does both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentfiles.loader import LoadedAgent
from agentfiles.parameters import AgentParameters, process_values, with_problems
from agents_app import stored
from agents_app.models import StoredAgent, StoredAgentsGeneration, StoredAgentVersion
from agents_app.registry import get_registry
from foundation.common import db_now
from foundation.errors import (
    AgentDefinedByFile,
    AgentFailedToLoad,
    AgentInUse,
    ApiError,
    HelperCycle,
    NotFound,
    UnknownAgent,
    UnknownHelper,
)


def _failed_to_load(problems: list[str]) -> AgentFailedToLoad:
    return AgentFailedToLoad("; ".join(problems))


@dataclass
class PreparedAgent:
    """A checked agent, ready to store; its tools are not built (storing runs nothing).

    Attributes:
        slug: the agent's slug (from the path).
        contents: its contents, ``slug`` included.
        files: relative path -> text.
        helpers: the slugs of its ``extraAgents``.
        loaded: the loaded agent (keeps its files' directory alive).
        parameters: its parameters in this process (``Command`` defaults pending).
    """

    slug: str
    contents: dict[str, Any]
    files: dict[str, str]
    helpers: list[str]
    loaded: LoadedAgent
    parameters: AgentParameters


def defined_by_file(slug: str) -> ApiError:
    """409 ``agent_defined_by_file``: the slug belongs to an agent file (files win)."""
    return AgentDefinedByFile(slug)


def _check_helpers(slug: str, helpers: list[str], graph: dict[str, list[str]]) -> None:
    """Helpers must be stored agents, and no cycle may go through ``slug``.

    Raises:
        ApiError: 400 ``unknown_helper``; 400 ``helper_cycle``.
    """
    file_slugs = get_registry().file_slugs()
    unknown = [helper for helper in helpers if helper != slug and helper not in graph]
    if unknown:
        named = ", ".join(repr(h) for h in unknown)
        hint = " (agents from files cannot be helpers of stored agents)" if set(unknown) & file_slugs else ""
        raise UnknownHelper(f"{named} is not a stored agent{hint}")
    cycle = stored.find_cycle(slug, helpers, graph)
    if cycle:
        raise HelperCycle(' -> '.join(cycle))


def _helper_graph() -> dict[str, list[str]]:
    return dict(StoredAgent.objects.values_list("slug", "helpers"))


def _check_parameters(loaded: LoadedAgent) -> AgentParameters:
    """The agent's parameters in this process, and its helpers' (docs/agents.md §8): a required
    process-scope parameter needs a value, and each ``with`` must fit its helper.

    Raises:
        ApiError: 400 ``agent_failed_to_load``.
    """
    parameters = AgentParameters.load(
        loaded.spec, base_dir=loaded.base_dir, api_keys=get_registry().api_keys, run_commands=False
    )
    problems = list(parameters.process_problems())
    get_registry().stored.refresh(get_registry().file_slugs())
    for index, ref in enumerate(loaded.spec.helper_refs()):
        tree = get_registry().stored.tree(ref.slug)
        if tree is not None:
            problems += with_problems(f"extraAgents[{index}]", ref.with_ or {}, tree.root.spec, process_values())
    if problems:
        raise _failed_to_load(problems)
    return parameters


def stored_agent_prepare(slug: str, body: Any) -> PreparedAgent:
    """Check a stored agent and load it, storing and running nothing (docs/api.md §12.2,
    docs/agents.md §9).

    Args:
        slug: the slug of the path.
        body: the agent's contents plus an optional ``files`` (path -> text).
    Returns:
        The loaded agent.
    Raises:
        ApiError: in this order, 400 ``bad_request`` (the body's shape), 409
            ``agent_defined_by_file``, 400 ``agent_uses_files``, 400 ``agent_invalid_paths``,
            400 ``agent_runs_commands`` (unless the operator allows them), 400
            ``agent_failed_to_load`` (schema, parameters and bindings), 400 ``unknown_helper``,
            400 ``helper_cycle``, 400 ``agent_failed_to_load`` (a directory or tool file missing
            from the files, a required process parameter without value, a ``with`` its helper
            does not fit).
    """
    contents, files = stored.split_body(slug, body)
    if slug in get_registry().file_slugs():
        raise defined_by_file(slug)
    stored.check_file_only_keys(contents)
    stored.check_paths(contents, files)
    allowed = stored.commands_allowed()
    stored.check_commands(contents, allowed=allowed)
    spec = stored.parse_contents(slug, contents)
    helpers = stored.helper_slugs(spec)
    _check_helpers(slug, helpers, _helper_graph())
    loaded = stored.load_stored_agent(slug, contents, files, allow_commands=allowed)
    parameters = _check_parameters(loaded)
    return PreparedAgent(slug, contents, files, helpers, loaded, parameters)


def version_changes(before: StoredAgentVersion | None, contents: dict[str, Any], files: dict[str, str]) -> list[str]:
    """What a new version changes against ``before`` (``None``: the first version).

    Returns:
        The top-level ``contents`` keys whose value differs, sorted, then ``files/<path>`` for each
        file added, removed or changed, sorted; ``["created"]`` for a first version.
    """
    if before is None:
        return ["created"]
    keys = sorted(key for key in {*before.contents, *contents} if before.contents.get(key) != contents.get(key))
    paths = sorted(path for path in {*before.files, *files} if before.files.get(path) != files.get(path))
    return [*keys, *(f"files/{path}" for path in paths)]


def stored_agent_commit(
    prepared: PreparedAgent, updated_by: str | None, restored_from: int | None = None
) -> tuple[StoredAgent, bool]:
    """Store a prepared agent, replacing the slug's agent and all its files, and keep the
    version (:class:`StoredAgentVersion`, in the same transaction).

    Args:
        prepared: what :func:`stored_agent_prepare` returned.
        updated_by: who stores it (an owner, or ``admin:<user>``).
        restored_from: the version a restore copies, recorded on the new version.
    Returns:
        ``(row, created)``: ``created`` is true when the slug had no stored agent. A slug stored
        again after a delete goes on from its last kept version number.
    Raises:
        ApiError: 409 ``agent_defined_by_file``, 400 ``unknown_helper``, 400 ``helper_cycle``
            when another writer changed things since :func:`stored_agent_prepare`.
    """

    slug = prepared.slug
    with transaction.atomic():
        generation, _ = StoredAgentsGeneration.objects.select_for_update().get_or_create(pk=1)
        if slug in get_registry().file_slugs():
            raise defined_by_file(slug)
        _check_helpers(slug, prepared.helpers, _helper_graph())
        now = db_now()
        previous = StoredAgentVersion.objects.filter(slug=slug).order_by("-version").first()
        row = StoredAgent.objects.select_for_update().filter(pk=slug).first()
        created = row is None
        if row is None:
            row = StoredAgent(slug=slug, version=previous.version if previous else 0, created_at=now)
        row.contents = prepared.contents
        row.files = prepared.files
        row.helpers = prepared.helpers
        row.version += 1
        row.updated_at = now
        row.updated_by = updated_by
        row.save()
        StoredAgentVersion.objects.create(
            slug=slug,
            version=row.version,
            contents=prepared.contents,
            files=prepared.files,
            changes=version_changes(previous, prepared.contents, prepared.files),
            restored_from=restored_from,
            created_at=now,
            created_by=updated_by,
        )
        generation.generation += 1
        generation.save(update_fields=["generation"])
    return row, created


def stored_agent_restore(slug: str, version: int, updated_by: str | None) -> tuple[PreparedAgent, StoredAgent]:
    """Store a kept version of a stored agent again, as a new version, through every check of
    ``PUT /v1/agents/:slug`` (docs/guide-console.md §1).

    Returns:
        ``(prepared, row)``: the loaded agent and the stored row (its new version).
    Raises:
        ApiError: 404 ``not_found`` (no such version); any refusal of :func:`stored_agent_prepare` (a helper
            deleted since, a slug now defined by a file, ...).
    """
    kept = StoredAgentVersion.objects.filter(slug=slug, version=version).first()
    if kept is None:
        raise NotFound.agent_version(slug, version)
    prepared = stored_agent_prepare(slug, {**kept.contents, "files": kept.files})
    row, _ = stored_agent_commit(prepared, updated_by, restored_from=version)
    return prepared, row


def stored_agent_put(slug: str, body: Any, updated_by: str | None) -> tuple[PreparedAgent, StoredAgent, bool]:
    """``PUT /v1/agents/:slug``: check, load and store (see :func:`stored_agent_prepare`).

    Returns:
        ``(prepared, row, created)``.
    """
    prepared = stored_agent_prepare(slug, body)
    row, created = stored_agent_commit(prepared, updated_by)
    return prepared, row, created


def stored_agent_dependents(slug: str) -> list[str]:
    """The stored agents that name ``slug`` as a helper, sorted."""
    return sorted(other for other, helpers in _helper_graph().items() if slug in helpers and other != slug)


def stored_agent_delete(slug: str) -> StoredAgent:
    """``DELETE /v1/agents/:slug``: remove a stored agent (docs/api.md §12.3).

    Sessions of the agent stay; their runs fail with ``unknown_agent`` until the slug exists
    again.

    Returns:
        The row as it was.
    Raises:
        ApiError: 409 ``agent_defined_by_file``; 404 ``unknown_agent``; 409 ``agent_in_use``
            (other stored agents name it as a helper).
    """
    with transaction.atomic():
        generation, _ = StoredAgentsGeneration.objects.select_for_update().get_or_create(pk=1)
        row = StoredAgent.objects.filter(pk=slug).first()
        if row is None:
            if slug in get_registry().file_slugs():
                raise defined_by_file(slug)
            raise UnknownAgent(slug)
        dependents = stored_agent_dependents(slug)
        if dependents:
            raise AgentInUse(slug, ', '.join(dependents))
        row.delete()
        generation.generation += 1
        generation.save(update_fields=["generation"])
    return row
