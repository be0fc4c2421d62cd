"""Checking, loading and caching stored agents (docs/api.md §12, docs/agents.md §9).

A stored agent is an agent's ``contents`` plus ``files`` (relative path -> text). Unlike a file
agent it may not reach the server's own files: every path is relative and stays inside the
files; toolboxes that read other files are refused; helpers are other stored agents, named by
slug, and cycles are refused.

Loading writes the files to a fresh directory (every file executable) and resolves the agent's
paths from there. The directory lives as long as that version's :class:`LoadedAgent`: it is
removed when the last run using the version lets go of it, and at exit; directories left by a
process that died are removed by the next one to start.

:class:`StoredAgentCache` is one process's view of the stored agents, refreshed when the
generation counter in the database moves, so that every server and worker sees an edit at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from agentfiles.builtins import builtin_paths
from agentfiles.loader import AgentLoadError, AgentTree, LoadedAgent, parse_agent_document
from agentfiles.schema import AgentSpec, unwrap_agent_json
from foundation.api import require_unicode
from foundation.errors import (
    AgentFailedToLoad,
    AgentInvalidPaths,
    AgentRunsCommands,
    AgentUsesFiles,
    ApiError,
    BadRequest,
)

log = logging.getLogger("agents.stored")

#: Keys that make an agent read files outside its own ``files`` (docs/api.md §12.2): refused.
FILE_ONLY_KEYS = ("postgrestToolboxes", "skillSources", "autoEnableSkills")


#: The ``mcpServers`` tag whose server is a process this server starts (``executable``).
STDIO_MCP_TAG = "McpSimpleBinary"
#: Sources of a value that run a command (``Command``) or read this server's environment (``EnvVar``).
COMMAND_SOURCE_TAGS = ("Command", "EnvVar")
#: A ``${VAR}`` reference of an OpenAPI toolbox's ``Headers`` or ``Token``: read from the environment.
ENV_REFERENCE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")

#: Limits that keep a stored agent's files writable on any file system.
MAX_SLUG_LENGTH = 100
MAX_PATH_DEPTH = 32
MAX_NAME_BYTES = 200


def split_body(slug: str, body: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``contents`` and ``files`` of a PUT body (the envelope is accepted too).

    The slug comes from the path; a body may omit it, but may not name another one.

    Returns:
        ``(contents, files)``, ``contents`` a copy with ``slug`` set.
    Raises:
        ApiError: 400 ``bad_request`` for a body that is not an object, ``files`` that is not an
            object of strings, or a different ``slug``.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object: the agent's contents, plus an optional 'files'")
    require_unicode(body, "the agent")
    if len(slug) > MAX_SLUG_LENGTH:
        raise BadRequest(f"a stored agent's slug has at most {MAX_SLUG_LENGTH} characters")
    rest = dict(body)
    files = rest.pop("files", None)
    if files is None:
        files = {}
    if not isinstance(files, dict) or not all(isinstance(text, str) for text in files.values()):
        raise BadRequest("'files' must be an object of relative path -> text")
    if "tag" in rest and "contents" in rest:
        try:
            rest, _ = unwrap_agent_json(rest)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        rest = dict(rest)
    named = rest.get("slug")
    if named is not None and named != slug:
        raise BadRequest(f"the body names slug {named!r} but the path says {slug!r}")
    rest["slug"] = slug
    return rest, dict(files)


def check_file_only_keys(contents: dict[str, Any]) -> None:
    """Refuse toolboxes that read files of the server, and helpers named by path: the
    ``FILE_ONLY_KEYS``, and an OpenAPI toolbox whose document is not at an ``http(s)://`` URL
    (docs/api.md §12.2).

    Raises:
        ApiError: 400 ``agent_uses_files``.
    """
    used = [key for key in FILE_ONLY_KEYS if contents.get(key)]
    if used:
        raise AgentUsesFiles(f"stored agents cannot use {', '.join(used)}")
    boxes = contents.get("openApiToolboxes")
    for index, box in enumerate(boxes if isinstance(boxes, list) else []):
        inner = box.get("contents") if isinstance(box, dict) else None
        url = inner.get("SpecUrl") if isinstance(inner, dict) else None
        if isinstance(url, str) and not url.startswith(("http://", "https://")):
            raise AgentUsesFiles(
                f"openApiToolboxes[{index}]: a stored agent's SpecUrl must be an http:// or https:// URL"
            )
    refs = contents.get("extraAgents")
    for index, ref in enumerate(refs if isinstance(refs, list) else []):
        if isinstance(ref, dict) and ref.get("path") is not None:
            raise AgentUsesFiles(f"extraAgents[{index}]: stored agents name their helpers by slug, without 'path'")


def commands_allowed() -> bool:
    """Whether the operator lets stored agents run commands and read the environment
    (``agents serve --allow-stored-commands``, ``AGENTS_ALLOW_STORED_COMMANDS``; docs/agents.md §9)."""
    from django.conf import settings

    return bool(settings.AGENTS.get("ALLOW_STORED_COMMANDS", False))


def _source_tag(value: Any) -> Any:
    return value.get("tag") if isinstance(value, dict) else None


def command_fields(contents: dict[str, Any]) -> list[str]:
    """The field paths of ``contents`` that start a process or read this server's environment
    when the agent is loaded (docs/agents.md §9), in document order.

    Those are an ``McpSimpleBinary`` server's ``executable``, a parameter ``default`` or an OpenAPI
    secret ``source`` tagged ``Command`` or ``EnvVar``, and a ``${VAR}`` in an OpenAPI toolbox's
    ``Headers`` or ``Token``. Read from the raw contents, so that it holds before the schema is
    checked and for rows stored before the rule.

    Returns:
        ``"<field path>: <what it does>"`` lines; empty when there are none.
    """
    found: list[str] = []
    servers = contents.get("mcpServers")
    for index, entry in enumerate(servers if isinstance(servers, list) else []):
        if _source_tag(entry) == STDIO_MCP_TAG:
            found.append(f"mcpServers[{index}].contents.executable: an MCP server started as a process")
    declared = contents.get("parameters")
    for index, decl in enumerate(declared if isinstance(declared, list) else []):
        tag = _source_tag(decl.get("default") if isinstance(decl, dict) else None)
        if tag in COMMAND_SOURCE_TAGS:
            found.append(f"parameters[{index}].default: a {tag} default")
    boxes = contents.get("openApiToolboxes")
    for index, box in enumerate(boxes if isinstance(boxes, list) else []):
        inner: dict[str, Any] = (
            box["contents"] if isinstance(box, dict) and isinstance(box.get("contents"), dict) else {}
        )
        where = f"openApiToolboxes[{index}].contents"
        secrets = inner.get("Secrets")
        for number, secret in enumerate(secrets if isinstance(secrets, list) else []):
            tag = _source_tag(secret.get("source") if isinstance(secret, dict) else None)
            if tag in COMMAND_SOURCE_TAGS:
                found.append(f"{where}.Secrets[{number}].source: a {tag} source")
        headers = inner.get("Headers")
        for name, value in (headers.items() if isinstance(headers, dict) else []):
            if isinstance(value, str) and ENV_REFERENCE.search(value):
                found.append(f"{where}.Headers.{name}: a ${{VAR}} read from the environment")
        token = inner.get("Token")
        if isinstance(token, str) and ENV_REFERENCE.search(token):
            found.append(f"{where}.Token: a ${{VAR}} read from the environment")
    return found


def check_commands(contents: dict[str, Any], *, allowed: bool) -> None:
    """Refuse what :func:`command_fields` finds unless the operator allows it (docs/agents.md §9).

    Raises:
        ApiError: 400 ``agent_runs_commands`` naming every field path.
    """
    found = [] if allowed else command_fields(contents)
    if found:
        raise AgentRunsCommands(
            "; ".join(found) + " (stored agents may not run commands or read the server's environment"
            " unless the server runs with --allow-stored-commands)"
        )


def _path_problem(value: Any, where: str, *, file: bool) -> str | None:
    """Why ``value`` is not an acceptable relative path (``None`` when it is)."""
    if not isinstance(value, str):
        return None  # not a path at all: the schema check reports the type
    if value == "" or "\x00" in value:
        return f"{where}: {value!r} is not a path"
    path = PurePosixPath(value)
    if path.is_absolute():
        return f"{where}: {value!r} is absolute; paths must be relative"
    if ".." in path.parts:
        return f"{where}: {value!r} goes up with '..'"
    if file and not [part for part in path.parts if part != "."]:
        return f"{where}: {value!r} names no file"
    if len(path.parts) > MAX_PATH_DEPTH or any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in path.parts):
        return f"{where}: {value[:80]!r}... is too long (at most {MAX_PATH_DEPTH} levels of {MAX_NAME_BYTES} bytes)"
    return None


def check_paths(contents: dict[str, Any], files: dict[str, str]) -> None:
    """Every path relative and inside the files (docs/api.md §12.2), built-in toolboxes',
    sandboxes' and OpenAPI secrets' ``FileSystem`` sources included; bash toolboxes without ``root``.

    Raises:
        ApiError: 400 ``agent_invalid_paths`` listing every bad path.
    """
    problems: list[str] = []
    normalized: dict[str, str] = {}
    for name in files:
        problem = _path_problem(name, "files", file=True)
        if problem:
            problems.append(problem)
            continue
        clean = str(PurePosixPath(name))
        if clean in normalized:
            problems.append(f"files: {name!r} and {normalized[clean]!r} are the same file")
        normalized[clean] = name
    for clean, name in normalized.items():
        for parent in PurePosixPath(clean).parents:
            if str(parent) in normalized:
                problems.append(f"files: {normalized[str(parent)]!r} is a file, so {name!r} cannot be inside it")
    problem = _path_problem(contents.get("toolDirectory"), "toolDirectory", file=False)
    if problem:
        problems.append(problem)
    boxes = contents.get("bashToolboxes")
    for index, box in enumerate(boxes if isinstance(boxes, list) else []):
        where = f"bashToolboxes[{index}]"
        if not isinstance(box, dict):
            continue
        inner: dict[str, Any] = box["contents"] if isinstance(box.get("contents"), dict) else {}
        if any(key in holder for holder in (box, inner) for key in ("root", "Root")):
            problems.append(f"{where}: stored agents' bash toolboxes take no root")
        problem = _path_problem(inner.get("Path"), f"{where}.contents.Path", file=False)
        if problem:
            problems.append(problem)
    for where, value in builtin_paths(contents):
        problem = _path_problem(value, where, file=False)
        if problem:
            problems.append(problem)
    boxes = contents.get("openApiToolboxes")
    for index, box in enumerate(boxes if isinstance(boxes, list) else []):
        inner = box["contents"] if isinstance(box, dict) and isinstance(box.get("contents"), dict) else {}
        secrets = inner.get("Secrets")
        for number, secret in enumerate(secrets if isinstance(secrets, list) else []):
            source = secret.get("source") if isinstance(secret, dict) else None
            if isinstance(source, dict) and source.get("tag") == "FileSystem":
                where = f"openApiToolboxes[{index}].contents.Secrets[{number}].source"
                problem = _path_problem(source.get("contents"), where, file=True)
                if problem:
                    problems.append(problem)
    declared = contents.get("parameters")
    for index, decl in enumerate(declared if isinstance(declared, list) else []):
        default = decl.get("default") if isinstance(decl, dict) else None
        if isinstance(default, dict) and default.get("tag") == "FileSystem":
            problem = _path_problem(default.get("contents"), f"parameters[{index}].default", file=True)
            if problem:
                problems.append(problem)
    if problems:
        raise AgentInvalidPaths("; ".join(problems))


def parse_contents(slug: str, contents: dict[str, Any]) -> AgentSpec:
    """Validate ``contents`` with the agent-file schema.

    Raises:
        ApiError: 400 ``agent_failed_to_load`` listing the schema problems.
    """
    try:
        spec, _, _ = parse_agent_document(contents, f"agent {slug!r}")
    except AgentLoadError as error:
        raise AgentFailedToLoad("; ".join(error.problems)) from None
    return spec


def helper_slugs(spec: AgentSpec) -> list[str]:
    """The slugs an agent names in ``extraAgents``, in order, without repeats."""
    return list(dict.fromkeys(ref.slug for ref in spec.helper_refs()))


def find_cycle(slug: str, helpers: list[str], graph: dict[str, list[str]]) -> list[str] | None:
    """A helper cycle through ``slug`` once its helpers become ``helpers``, or ``None``.

    Args:
        slug: the agent being stored.
        helpers: its new helper slugs.
        graph: every stored agent's helper slugs (``slug``'s old entry is ignored).
    Returns:
        The cycle as slugs, ``[slug, ..., slug]`` (``[slug, slug]`` for self-reference).
    """
    edges = dict(graph)
    edges[slug] = helpers
    stack: list[tuple[str, list[str]]] = [(helper, [slug, helper]) for helper in reversed(helpers)]
    seen: set[str] = set()
    while stack:
        current, trail = stack.pop()
        if current == slug:
            return trail
        if current in seen:
            continue
        seen.add(current)
        stack.extend((nxt, [*trail, nxt]) for nxt in reversed(edges.get(current, [])))
    return None


#: Every version directory of this process lives in one directory named after the process.
PROCESS_DIR_PREFIX = "agents-stored-"
_process_dir: Path | None = None
_process_dir_lock = threading.Lock()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_directories(parent: Path) -> list[Path]:
    """Remove the stored-agent directories of processes that are gone; return what was removed.

    A process normally removes its own (each version's when released, the rest at exit), but one
    that is killed, or that leaves with ``os._exit``, cannot.
    """
    removed = []
    for candidate in parent.glob(f"{PROCESS_DIR_PREFIX}*-*"):
        pid = candidate.name.removeprefix(PROCESS_DIR_PREFIX).split("-", 1)[0]
        if candidate.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
    return removed


def process_directory() -> Path:
    """This process's directory for stored agents' files, made (and stale ones swept) on first use."""
    global _process_dir
    with _process_dir_lock:
        if _process_dir is None:
            parent = Path(tempfile.gettempdir())
            sweep_stale_directories(parent)
            _process_dir = Path(tempfile.mkdtemp(prefix=f"{PROCESS_DIR_PREFIX}{os.getpid()}-", dir=parent))
            atexit.register(shutil.rmtree, _process_dir, True)
        return _process_dir


def materialize(slug: str, files: dict[str, str]) -> Path:
    """Write ``files`` to a fresh directory, every file executable; return the directory."""
    directory = Path(tempfile.mkdtemp(prefix=f"{slug}-", dir=process_directory()))
    for name, text in files.items():
        target = directory / PurePosixPath(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", errors="surrogatepass")
        target.chmod(0o755)
    return directory


def load_stored_agent(
    slug: str, contents: dict[str, Any], files: dict[str, str], *, allow_commands: bool
) -> LoadedAgent:
    """Load one stored agent version: its files written out, the paths it names checked; nothing
    is run (tools are described, servers started, defaults resolved when it is built for use).

    Its ``helper_slugs`` are the ``extraAgents`` slugs. The directory is removed once the returned
    agent is no longer referenced (or at exit).

    Args:
        allow_commands: the operator's ``--allow-stored-commands`` (:func:`commands_allowed`).
    Raises:
        ApiError: 400 ``agent_runs_commands`` (:func:`check_commands`, for versions stored before
            the rule or under another setting); 400 ``agent_failed_to_load`` (schema, or a named
            directory or file missing).
    """
    check_commands(contents, allowed=allow_commands)
    spec = parse_contents(slug, contents)
    directory = materialize(slug, files)
    loaded = LoadedAgent(spec=spec, contents=contents, path=None, base_dir=directory, helper_slugs=helper_slugs(spec))
    weakref.finalize(loaded, shutil.rmtree, directory, True)
    problems: list[str] = []
    if spec.toolDirectory is not None and not loaded.resolve(spec.toolDirectory).is_dir():
        problems.append(f"toolDirectory {spec.toolDirectory!r} is not a directory of the files")
    for index, box in enumerate(spec.bashToolboxes):
        target = loaded.resolve(box.contents.Path)
        if box.tag == "FileSystemDirectory" and not target.is_dir():
            problems.append(f"bashToolboxes[{index}]: {box.contents.Path!r} is not a directory of the files")
        elif box.tag == "SingleTool" and not target.is_file():
            problems.append(f"bashToolboxes[{index}]: {box.contents.Path!r} is not one of the files")
    if problems:
        raise AgentFailedToLoad("; ".join(problems))
    return loaded


def relative_to(directory: Path, lines: list[str]) -> list[str]:
    """Problem lines with the load directory taken out of paths, so they name the files as given."""
    prefix = f"{directory}/"
    return [line.replace(prefix, "") for line in lines]


@dataclass(frozen=True)
class StoredInfo:
    """What the AgentDescriptor of a stored agent adds (docs/api.md §5.7)."""

    contents: dict[str, Any]
    files: dict[str, str]
    version: int
    updated_at: datetime
    updated_by: str | None

    def config(self) -> dict[str, Any]:
        """The stored contents with ``files``, in a form that can be PUT back."""
        return {**self.contents, "files": self.files}


class StoredAgentCache:
    """One process's stored agents, rebuilt when the generation counter moves.

    Trees are rebuilt only for agents whose version, or one of whose helpers' versions, changed:
    an unchanged tree stays the same object, so ``sessions_app.runtime`` keeps its tools.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = -1  # nothing loaded yet
        self._versions: dict[str, tuple[int, LoadedAgent]] = {}
        self._trees: dict[str, tuple[tuple[tuple[str, int], ...], AgentTree]] = {}
        self._info: dict[str, StoredInfo] = {}
        # slug -> why its stored version may not run here (agent_runs_commands)
        self._refused: dict[str, str] = {}
        # per thread: inside one_look(), whether this block already looked at the generation
        self._looks = threading.local()

    @contextmanager
    def one_look(self) -> Iterator[None]:
        """Within the block, this thread looks at the generation once, at its first lookup.

        A page that lists every agent looks up each slug several times; without this each lookup
        is a query, so the page's queries grow with the number of agents (docs/api.md §12.4). The
        block sees the stored agents as they were at its first lookup, as one request should.
        """
        if getattr(self._looks, "active", False):
            yield
            return
        self._looks.active, self._looks.done = True, False
        try:
            yield
        finally:
            self._looks.active = self._looks.done = False

    def refresh(self, file_slugs: set[str]) -> None:
        """Reload what changed since the last look (one query when nothing did).

        A slug an agent file defines (a root or a helper) is skipped (the file wins), and so is an agent whose helpers
        cannot be resolved: both are logged as ``agents.stored_skipped``. A version that fails to
        load keeps the previous one, logged as ``agents.stored_reload_failed``; one that names
        commands the operator does not allow (:func:`check_commands`) is remembered for
        :meth:`refusal`.
        """
        from agents_app.models import StoredAgent, StoredAgentsGeneration

        if getattr(self._looks, "done", False):
            return
        if getattr(self._looks, "active", False):
            self._looks.done = True
        # no row yet counts as generation 0 (the migration creates it; a flushed test database has none)
        generation = StoredAgentsGeneration.objects.filter(pk=1).values_list("generation", flat=True).first() or 0
        with self._lock:
            if generation == self._generation:
                return
            rows = list(StoredAgent.objects.all())
            allow_commands = commands_allowed()
            versions: dict[str, tuple[int, LoadedAgent]] = {}
            refused: dict[str, str] = {}
            for row in rows:
                if row.slug in file_slugs:
                    log.warning(
                        "stored agent skipped",
                        extra={"kind": "agents.stored_skipped", "agent": row.slug, "reason": "an agent file has it"},
                    )
                    continue
                known = self._versions.get(row.slug)
                if known is not None and known[0] == row.version:
                    versions[row.slug] = known
                    continue
                try:
                    loaded = load_stored_agent(row.slug, row.contents, row.files, allow_commands=allow_commands)
                    versions[row.slug] = (row.version, loaded)
                except ApiError as error:
                    if isinstance(error, AgentRunsCommands):
                        refused[row.slug] = error.message
                    log.warning(
                        "stored agent failed to reload",
                        extra={"kind": "agents.stored_reload_failed", "agent": row.slug, "reason": error.message},
                    )
                    if known is not None:
                        versions[row.slug] = known
            self._versions = versions
            self._refused = {slug: why for slug, why in refused.items() if slug not in versions}
            self._info = {
                row.slug: StoredInfo(row.contents, row.files, row.version, row.updated_at, row.updated_by)
                for row in rows
                if row.slug in versions
            }
            self._trees = self._build_trees()
            self._generation = generation

    def _build_trees(self) -> dict[str, tuple[tuple[tuple[str, int], ...], AgentTree]]:
        trees = {}
        for slug, (_, root) in self._versions.items():
            agents = {slug: root}
            queue = list(root.helper_slugs)
            missing = []
            while queue:
                helper = queue.pop(0)
                if helper in agents:
                    continue
                if helper not in self._versions:
                    missing.append(helper)
                    continue
                agents[helper] = self._versions[helper][1]
                queue.extend(agents[helper].helper_slugs)
            if missing:
                log.warning(
                    "stored agent skipped",
                    extra={"kind": "agents.stored_skipped", "agent": slug, "reason": f"unknown helpers {missing}"},
                )
                continue
            fingerprint = tuple(sorted((name, self._versions[name][0]) for name in agents))
            previous = self._trees.get(slug)
            if previous is not None and previous[0] == fingerprint:
                trees[slug] = previous
            else:
                trees[slug] = (fingerprint, AgentTree(root=root, agents=agents, warnings=[]))
        return trees

    def tree(self, slug: str) -> AgentTree | None:
        """The tree of stored agent ``slug`` as of the last refresh, or ``None``."""
        entry = self._trees.get(slug)
        return entry[1] if entry else None

    def refusal(self, slug: str) -> ApiError | None:
        """400 ``agent_runs_commands`` when the stored version of ``slug`` names commands the
        operator does not allow (as of the last refresh), else ``None``."""
        why = self._refused.get(slug)
        return AgentRunsCommands(why) if why is not None else None

    def slugs(self) -> list[str]:
        """The slugs of the usable stored agents, sorted."""
        return sorted(self._trees)

    def info(self, slug: str) -> StoredInfo | None:
        """The stored row's contents and metadata, or ``None``."""
        return self._info.get(slug)
