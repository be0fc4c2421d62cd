"""Loading agent files and the helper trees they define.

Implements docs/agents.md §1, §3, §4 and §5: the file format, relative paths looked for from the
file that names them and then from the working directory, the helper tree (directory and
``extraAgents`` edges, breadth-first discovery, duplicate slugs, cycle warnings) and the
load-time checks; the envelope, bare contents and unknown keys ignored with a warning are
docs/decisions.md §5.

Every problem is one line, ``"<file>: <message>"``, where ``<file>`` is the absolute path of the
file the problem is about. Loading never stops at the first problem: a whole tree (or a whole
set of root files) is checked and everything found is reported together, so that ``agents
check`` can show it all at once.

This module reads files only; it imports no Django models, so it can run anywhere.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentfiles.builtins import parse_builtin_toolboxes
from agentfiles.parameters import process_values, spec_problems, with_problems
from agentfiles.project_config import find_config_file
from agentfiles.schema import ENVELOPE_TAG, KNOWN_FLAVORS, AgentSpec, unknown_keys, unwrap_agent_json
from agentfiles.templates import TemplateError, evaluate_template, project_libraries
from agentfiles.validation_messages import format_validation_errors

#: Suffixes of the files inside a ``toolDirectory`` that are helper agents (docs/agents.md §4).
AGENT_FILE_SUFFIXES = (".json", ".tramaj")


class AgentLoadError(Exception):
    """Agent files failed to load.

    Attributes:
        problems: every error found, one line each, formatted ``"<path>: <message>"``.
        warnings: the warnings gathered before giving up (same format), so that a ``check``
            command can still show them.
    """

    def __init__(self, problems: Iterable[str], warnings: Iterable[str] = ()) -> None:
        self.problems: list[str] = list(problems)
        self.warnings: list[str] = list(warnings)
        super().__init__("\n".join(self.problems))


#: The bases a path can be taken from (docs/agents.md §3), as ``agents check`` names them.
AGENT_DIRECTORY = "the agent file's directory"
WORKING_DIRECTORY = "the working directory"
CONFIG_DIRECTORY = "the directory of agents-exe.cfg.json"
STORED_FILES = "the agent's files"
ABSOLUTE = "absolute"


@dataclass(frozen=True)
class PathLookup:
    """Where a path an agent names was looked for, and which place was taken (docs/agents.md §3).

    Attributes:
        named: the path as the agent writes it.
        path: the path used: the first of ``tried`` that exists, else the first of ``tried``.
        base: what ``path`` was taken relative to: :data:`AGENT_DIRECTORY`,
            :data:`WORKING_DIRECTORY`, :data:`STORED_FILES` or :data:`ABSOLUTE`.
        tried: every place looked at, in order, without repeats.
    """

    named: str
    path: Path
    base: str
    tried: tuple[Path, ...]

    def looked_in(self) -> str:
        """The places looked at, for a message: ``"/a/tools, /b/tools"``."""
        return ", ".join(str(place) for place in self.tried)


@dataclass
class LoadedAgent:
    """One agent read from a file.

    Attributes:
        spec: the validated ``contents``.
        contents: the raw ``contents`` object as read (JSON-compatible), for views and storage.
        path: absolute path of the agent file (``None`` for agents that do not come from a file).
        base_dir: the directory relative paths are looked for first (the file's directory), and
            only (a stored agent's files).
        helper_slugs: slugs of this agent's helpers, in order: ``extraAgents`` references first,
            then the agent files found in its ``toolDirectory`` (sorted by path), without repeats.
        paths: the paths the loader looked up for this agent, as ``(where, lookup)`` pairs
            (``where`` is e.g. ``bashToolboxes[0]``), for ``agents check`` to say where each was
            found.
        template_output: the JSON a ``.tramaj`` template evaluated to (docs/agents.md §11), for
            ``check --show-config``; ``None`` for a ``.json`` file.
    """

    spec: AgentSpec
    contents: dict[str, Any]
    path: Path | None
    base_dir: Path
    helper_slugs: list[str] = field(default_factory=list)
    paths: list[tuple[str, PathLookup]] = field(default_factory=list)
    template_output: Any = None

    def lookup(self, named: str) -> PathLookup:
        """Find a path the agent names (docs/agents.md §3).

        An absolute path is taken as it is. A relative one is looked for from the agent file's
        directory, then from the working directory (agents-exe's users run it from the root of
        a checkout and name tools from there), then from the directory of the project's
        ``agents-exe.cfg.json`` (docs/cli.md §2.1); the first that exists is taken, else the first
        place. A stored agent's relative paths name its own files only. Paths are normalised
        (``.`` and ``..`` removed); symbolic links are not followed.
        """
        candidate = Path(named)
        if candidate.is_absolute():
            return PathLookup(named, candidate, ABSOLUTE, (candidate,))
        bases = [(AGENT_DIRECTORY if self.path is not None else STORED_FILES, self.base_dir)]
        if self.path is not None:
            bases.append((WORKING_DIRECTORY, Path.cwd()))
            # the project's root, when the command runs from one of its subdirectories
            config_file = find_config_file()
            if config_file is not None:
                bases.append((CONFIG_DIRECTORY, config_file.parent))
        places: dict[Path, str] = {}
        for label, base in bases:
            places.setdefault(Path(os.path.normpath(base / candidate)), label)
        tried = tuple(places)
        for place, label in places.items():
            if place.exists():
                return PathLookup(named, place, label, tried)
        return PathLookup(named, tried[0], bases[0][0], tried)

    def resolve(self, named: str) -> Path:
        """The path used for ``named``: :meth:`lookup`'s choice."""
        return self.lookup(named).path


@dataclass
class AgentTree:
    """A root agent and every helper reachable from it (docs/agents.md §4).

    Attributes:
        root: the root agent.
        agents: every agent of the tree by slug, the root included.
        warnings: non-fatal findings, ``"<path>: <message>"`` each: helper cycles, unknown keys,
            files without the envelope, unknown flavors.
    """

    root: LoadedAgent
    agents: dict[str, LoadedAgent]
    warnings: list[str]


def parse_agent_document(document: Any, label: str) -> tuple[AgentSpec, dict[str, Any], list[str]]:
    """Validate a decoded agent document (the envelope or bare contents).

    Checks the file-independent rules of docs/agents.md §1 and §2: envelope, field types,
    required and non-empty fields, and the built-in toolboxes and file sandboxes
    (``agentfiles.builtins``). Paths are not looked at here.

    Args:
        document: the decoded JSON.
        label: what the document is called in messages (a file path, or e.g. ``agent 'x'``).
    Returns:
        ``(spec, contents, warnings)``; warnings are ``"<label>: <message>"`` lines for a missing
        envelope, unknown agent-level keys and an unknown flavor.
    Raises:
        AgentLoadError: with one ``"<label>: <field path>: <message>"`` line per problem.
    """
    try:
        contents, enveloped = unwrap_agent_json(document)
    except ValueError as exc:
        raise AgentLoadError([f"{label}: {exc}"]) from None
    warnings: list[str] = []
    if not enveloped:
        warnings.append(f'{label}: no {{"tag": "{ENVELOPE_TAG}"}} envelope; read as bare agent contents')
    extra = unknown_keys(contents)
    if extra:
        warnings.append(f"{label}: unknown keys ignored: {', '.join(extra)}")
    try:
        spec = AgentSpec.model_validate(contents)
    except ValidationError as exc:
        problems = [f"{label}: {line}" for line in format_validation_errors(exc)]
        raise AgentLoadError(problems, warnings) from None
    if spec.flavor not in KNOWN_FLAVORS:
        known = ", ".join(sorted(KNOWN_FLAVORS))
        warnings.append(f"{label}: unknown flavor {spec.flavor!r} (known: {known})")
    _, builtin_problems, builtin_warnings = parse_builtin_toolboxes(spec.builtinToolboxes, spec.fileSandboxes)
    warnings.extend(f"{label}: {line}" for line in builtin_warnings)
    problems = [*builtin_problems, *spec_problems(spec)]
    if problems:
        raise AgentLoadError([f"{label}: {line}" for line in problems], warnings)
    return spec, contents, warnings


def load_agent_tree(path: str | Path) -> AgentTree:
    """Load the agent file at ``path`` and every helper reachable from it (docs/agents.md §4).

    Args:
        path: the root agent file; a relative path is taken from the current directory.
    Returns:
        the :class:`AgentTree`.
    Raises:
        AgentLoadError: with every problem of every file of the tree.
    """
    builder = _TreeBuilder(None)
    root = builder.build(_absolute(path))
    if root is None or builder.problems:
        raise AgentLoadError(builder.problems, builder.warnings)
    return AgentTree(root=root, agents=dict(builder.agents), warnings=builder.warnings)


def load_agent_files(paths: Sequence[str | Path]) -> dict[str, AgentTree]:
    """Load several root agent files, each into its own tree (docs/agents.md §4).

    The same helper may appear under several roots (each tree has its own copy); two roots with
    the same slug are refused. A file listed twice is loaded once. The template libraries of the
    config are read first, so that one that does not parse refuses the whole set (docs/agents.md
    §11.3).

    Args:
        paths: the root agent files.
    Returns:
        root slug -> :class:`AgentTree`, in the order of ``paths``.
    Raises:
        AgentLoadError: with every problem of every file, duplicate root slugs included.
    """
    try:
        libraries = project_libraries()
    except TemplateError as exc:
        raise AgentLoadError(exc.problems) from None
    problems: list[str] = []
    warnings: list[str] = []
    trees: dict[str, AgentTree] = {}
    root_files: dict[str, Path] = {}
    seen: set[Path] = set()
    for given in paths:
        root_path = _absolute(given)
        if root_path.resolve() in seen:
            continue
        seen.add(root_path.resolve())
        builder = _TreeBuilder(libraries)
        root = builder.build(root_path)
        # Trees share helpers, so the same problem can come from several roots.
        _extend_unique(problems, builder.problems)
        _extend_unique(warnings, builder.warnings)
        if root is None:
            continue
        slug = root.spec.slug
        if slug in root_files:
            problems.append(
                f"{root_path}: duplicate root agent slug '{slug}' ({root_files[slug]}, {root_path})"
            )
            continue
        root_files[slug] = root_path
        if not builder.problems:
            trees[slug] = AgentTree(root=root, agents=dict(builder.agents), warnings=builder.warnings)
    if problems:
        raise AgentLoadError(problems, warnings)
    return trees


class _TreeBuilder:
    """Breadth-first discovery of one tree, collecting problems instead of stopping."""

    def __init__(self, libraries: dict[str, Any] | None) -> None:
        # the template libraries, read at the first template when not given
        self._libraries = libraries
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self.agents: dict[str, LoadedAgent] = {}
        # Keyed by the symlink-free path so that a file reached twice is read once; None marks
        # a file that failed (its problems are already recorded).
        self._files: dict[Path, LoadedAgent | None] = {}

    def build(self, root_path: Path) -> LoadedAgent | None:
        """Load the tree under ``root_path``; return the root, or ``None`` if it failed to load."""
        if root_path.is_dir():
            self.problems.append(f"{root_path}: is a directory, not an agent file")
            return None
        root, _ = self._load(root_path)
        if root is None:
            return None
        queue = deque([root])
        while queue:
            queue.extend(self._expand(queue.popleft()))
        self._warn_cycles(root)
        self._check_with()
        return root

    def _load(self, path: Path) -> tuple[LoadedAgent | None, bool]:
        """Load one file once; return the agent (``None`` on failure) and whether it was new."""
        key = path.resolve()
        if key in self._files:
            return self._files[key], False
        agent = self._read(path)
        self._files[key] = agent
        if agent is not None:
            slug = agent.spec.slug
            other = self.agents.setdefault(slug, agent)
            if other is not agent:
                self.problems.append(
                    f"{path}: DuplicateAgentSlug: slug '{slug}' is defined by both {other.path} and {path}"
                )
        return agent, True

    def _read(self, path: Path) -> LoadedAgent | None:
        template = path.suffix == ".tramaj"
        document = self._evaluate(path) if template else self._decode(path)
        if document is None:
            return None
        try:
            spec, contents, warnings = parse_agent_document(document, str(path))
        except AgentLoadError as exc:
            self.problems.extend(exc.problems)
            self.warnings.extend(exc.warnings)
            return None
        self.warnings.extend(warnings)
        agent = LoadedAgent(spec=spec, contents=contents, path=path, base_dir=path.parent)
        agent.template_output = document if template else None
        self._check_paths(agent)
        return agent

    def _evaluate(self, path: Path) -> Any:
        """A template's document, with this process's values (docs/agents.md §11); ``None`` when refused."""
        try:
            if self._libraries is None:
                self._libraries = project_libraries()
            return evaluate_template(path, self._libraries, process_values())
        except TemplateError as exc:
            self.problems.extend(exc.problems)
            return None

    def _decode(self, path: Path) -> Any:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            self.problems.append(f"{path}: file not found")
            return None
        except OSError as exc:
            self.problems.append(f"{path}: cannot read: {exc.strerror}")
            return None
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            self.problems.append(f"{path}: not UTF-8 text (bad byte at offset {exc.start})")
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            self.problems.append(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
            return None

    def _check_paths(self, agent: LoadedAgent) -> None:
        """The directories and files an agent names must exist (docs/agents.md §3)."""
        spec = agent.spec
        if spec.toolDirectory is not None:
            found = self._lookup(agent, "toolDirectory", spec.toolDirectory)
            if not found.path.exists():
                self._problem(agent, f"toolDirectory '{spec.toolDirectory}' not found (looked in {found.looked_in()})")
            elif not found.path.is_dir():
                self._problem(agent, f"toolDirectory '{spec.toolDirectory}' is not a directory ({found.path})")
        for index, toolbox in enumerate(spec.bashToolboxes):
            where = f"bashToolboxes[{index}]"
            named = toolbox.contents.Path
            found = self._lookup(agent, where, named)
            target = found.path
            if toolbox.tag == "FileSystemDirectory":
                if not target.exists():
                    self._problem(agent, f"{where}: directory '{named}' not found (looked in {found.looked_in()})")
                elif not target.is_dir():
                    self._problem(agent, f"{where}: '{named}' is not a directory ({target})")
            elif not target.exists():
                self._problem(agent, f"{where}: tool file '{named}' not found (looked in {found.looked_in()})")
            elif not target.is_file():
                self._problem(agent, f"{where}: '{named}' is not a file ({target})")

    @staticmethod
    def _lookup(agent: LoadedAgent, where: str, named: str) -> PathLookup:
        """Look ``named`` up for ``agent`` and remember where it was found."""
        found = agent.lookup(named)
        agent.paths.append((where, found))
        return found

    def _expand(self, agent: LoadedAgent) -> list[LoadedAgent]:
        """Follow an agent's edges: record its helper slugs, return the helpers loaded for the first time."""
        # Edges are collected before any helper is read so that this agent's reference problems
        # stay next to its other problems in the report.
        references: list[tuple[Path, str | None, str]] = []
        for index, ref in enumerate(agent.spec.helper_refs()):
            where = f"extraAgents[{index}]"
            if ref.path is None:
                self._problem(
                    agent, f"{where}: helper '{ref.slug}' has no 'path' (file agents name helpers by path)"
                )
                continue
            found = self._lookup(agent, where, ref.path)
            target = found.path
            if not target.exists():
                self._problem(
                    agent,
                    f"{where}: MissingAgentReference: helper '{ref.slug}' not found (looked in {found.looked_in()})"
                    + _did_you_mean(ref.slug, agent.base_dir, target.parent),
                )
            elif target.is_dir():
                self._problem(
                    agent, f"{where}: helper '{ref.slug}': {target} is a directory, not an agent file"
                )
            else:
                references.append((target, ref.slug, where))
        directory_children: list[Path] = []
        if agent.spec.toolDirectory is not None:
            tool_dir = agent.resolve(agent.spec.toolDirectory)
            if tool_dir.is_dir():
                directory_children = list(_agent_files_under(tool_dir))

        fresh: list[LoadedAgent] = []
        edges = [*references, *((child, None, "toolDirectory") for child in directory_children)]
        for target, expected_slug, where in edges:
            helper, is_new = self._load(target)
            if helper is None:
                continue
            if is_new:
                fresh.append(helper)
            if expected_slug is not None and helper.spec.slug != expected_slug:
                self._problem(
                    agent,
                    f"{where}: MissingAgentReference: helper '{expected_slug}' expected, but {target} "
                    f"has slug '{helper.spec.slug}'",
                )
            if helper.spec.slug not in agent.helper_slugs:
                agent.helper_slugs.append(helper.spec.slug)
        return fresh

    def _check_with(self) -> None:
        """Each helper gets the parameters it requires (docs/agents.md §4): what its caller's
        ``with`` names must exist, and its required session parameters must be covered."""
        for agent in self.agents.values():
            refs = {ref.slug: (index, ref) for index, ref in enumerate(agent.spec.helper_refs())}
            for slug in agent.helper_slugs:
                helper = self.agents.get(slug)
                if helper is None:
                    continue
                index, ref = refs.get(slug, (None, None))
                where = f"extraAgents[{index}]" if ref is not None else f"toolDirectory helper {slug}"
                given = (ref.with_ or {}) if ref is not None else {}
                for line in with_problems(where, given, helper.spec, process_values()):
                    self._problem(agent, line)

    def _warn_cycles(self, root: LoadedAgent) -> None:
        """Warn about helper cycles reachable from the root (allowed for file agents, docs/agents.md §4).

        One cycle is reported per edge that closes one in a depth-first walk: every cyclic group
        of agents gets at least one warning, and the count stays linear where listing every
        cycle could explode (a directory of agents that all see each other).
        """
        finished: set[str] = set()
        stack: list[str] = []

        def visit(slug: str) -> None:
            stack.append(slug)
            for helper in self.agents[slug].helper_slugs:
                if helper in stack:
                    cycle = [*stack[stack.index(helper) :], helper]
                    self.warnings.append(
                        f"{self.agents[helper].path}: cyclic helper references: {' -> '.join(cycle)}"
                    )
                elif helper not in finished and helper in self.agents:
                    visit(helper)
            stack.pop()
            finished.add(slug)

        visit(root.spec.slug)

    def _problem(self, agent: LoadedAgent, message: str) -> None:
        self.problems.append(f"{agent.path}: {message}")


def _agent_files_under(directory: Path) -> Iterator[Path]:
    """Agent files found recursively under ``directory``, in a stable (sorted) order.

    Symbolic links to directories are not followed, so a link loop cannot hang the loader.
    """
    for current, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        for name in sorted(filenames):
            candidate = Path(current) / name
            if candidate.suffix in AGENT_FILE_SUFFIXES and candidate.is_file():
                yield candidate


def _did_you_mean(slug: str, *directories: Path) -> str:
    """A hint naming agent files in ``directories`` whose slug is ``slug`` (docs/agents.md §4).

    Paths in the hint are relative to the first directory (the referring file's). Files that do
    not parse are skipped silently: they are not what is being reported.
    """
    found: list[str] = []
    for directory in dict.fromkeys(directories):
        if not directory.is_dir():
            continue
        for candidate in sorted(directory.glob("*.json")):
            try:
                candidate_contents, _ = unwrap_agent_json(
                    json.loads(candidate.read_text(encoding="utf-8-sig"))
                )
            except (OSError, UnicodeDecodeError, ValueError):
                continue
            shown = os.path.relpath(candidate, directories[0])
            if candidate_contents.get("slug") == slug and shown not in found:
                found.append(shown)
    if not found:
        return ""
    return "; did you mean " + " or ".join(f"'{name}'" for name in found) + "?"


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))


def _extend_unique(target: list[str], lines: Iterable[str]) -> None:
    for line in lines:
        if line not in target:
            target.append(line)
