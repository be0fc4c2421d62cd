"""``.tramaj`` agent templates: a tramaj program evaluated once, at load, into an agent file's JSON
(docs/agents.md §11).

The language is the ``tramaj`` package's (parser, evaluator, static analysis); this module adds
what agents-exe puts around it:

* the libraries a template may import: the built-in ``agents`` library
  (``agentfiles/tramaj/agents.tramaj``: path predicates, sandboxes, toolboxes, helpers, the
  envelope) and one library per ``.tramaj`` file of the config's ``tramajLibraries``
  directories (:func:`read_libraries`);
* the ``$ctx`` rules: a template's ``$ctx`` holds the process parameters it reads by name, and
  nothing else; reading ``$ctx`` as a whole, a parameter without a value, one its agent does not
  declare, a ``session``/``message`` one or a secret one refuses the template
  (:func:`evaluate_template`).

Plain Python: no Django, no models.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tramaj

from agentfiles.parameters import ProcessValue
from agentfiles.project_config import ConfigError, load_project_config

#: The built-in library, importable as ``import("agents", {})``.
BUILTIN_LIBRARY = "agents"
_BUILTIN_SOURCE = Path(__file__).with_name("tramaj") / "agents.tramaj"
_WHOLE_CTX = (
    "the template reads $ctx as a whole (lookup($ctx, ...), has($ctx, ...), $ctx passed on):"
    " read each parameter by name, as $ctx.NAME, so that the reads can be checked"
)


class TemplateError(Exception):
    """A template, or a library, refused; ``problems`` are ``"<file>: <message>"`` lines."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def _parse(path: Path, text: str) -> Any:
    try:
        return tramaj.parse_program(text)
    except tramaj.ParseError as error:
        raise TemplateError([f"{path}: tramaj parse error {error}"]) from None


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise TemplateError([f"{path}: file not found"]) from None
    except OSError as error:
        raise TemplateError([f"{path}: cannot read: {error.strerror}"]) from None
    except UnicodeDecodeError as error:
        raise TemplateError([f"{path}: not UTF-8 text (bad byte at offset {error.start})"]) from None


def read_libraries(directories: Sequence[Path]) -> dict[str, Any]:
    """The library table of a template: the built-in ``agents`` library, then every ``.tramaj`` file
    of ``directories`` named after its file (docs/agents.md §11.3).

    Args:
        directories: the config's ``tramajLibraries``, resolved, in order. A name found in two
            directories is the earlier one's; a directory's ``agents.tramaj`` replaces the built-in.
            A directory that does not exist contributes nothing.
    Returns:
        library name -> parsed program (``tramaj.Program``).
    Raises:
        TemplateError: a library that does not parse or cannot be read, naming its file.
    """
    libraries: dict[str, Any] = {}
    problems: list[str] = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.tramaj")):
            if path.stem in libraries or not path.is_file():
                continue
            try:
                libraries[path.stem] = _parse(path, _read_text(path))
            except TemplateError as error:
                problems.extend(error.problems)
    if problems:
        raise TemplateError(problems)
    libraries.setdefault(BUILTIN_LIBRARY, _builtin_library())
    return libraries


@functools.cache
def _builtin_library() -> Any:
    # parsed once per process: it is the same file for every load, and parsing it takes a while
    return _parse(_BUILTIN_SOURCE, _BUILTIN_SOURCE.read_text(encoding="utf-8"))


def project_libraries() -> dict[str, Any]:
    """:func:`read_libraries` over the ``tramajLibraries`` of the working directory's
    ``agents-exe.cfg.json`` (the built-in library alone without one).

    Raises:
        TemplateError: a library refused, or the config file unreadable.
    """
    try:
        config = load_project_config()
    except ConfigError as error:
        raise TemplateError([str(error)]) from None
    return read_libraries(config.paths("tramajLibraries"))


def evaluate_template(path: Path, libraries: Mapping[str, Any], values: Mapping[str, ProcessValue]) -> Any:
    """Evaluate the template at ``path`` into an agent document (docs/agents.md §11.2).

    The reads of ``$ctx`` are found statically before anything runs (``tramaj.context_reads``,
    which counts ``ctx(x)`` handed to an import as a read of ``x``); ``$ctx`` then holds exactly
    the parameters read, with their process values. Once the template has produced its agent, each
    parameter read must be declared there, with scope ``process`` and not ``secret``.

    Args:
        path: the ``.tramaj`` file.
        libraries: :func:`read_libraries`'s table.
        values: the process values (``--set``, ``--set-json``, ``--pin``, ``--pin-json``,
            ``--params-file``); declared defaults are not among them, so a template never sees one.
    Returns:
        the JSON value the template evaluates to (the envelope, or bare contents).
    Raises:
        TemplateError: every problem found, ``"<path>: <message>"`` each; a message never holds a
            parameter's value.
    """
    program = _parse(path, _read_text(path))
    reads = tramaj.context_reads(program)
    if any(not read for read in reads):
        raise TemplateError([f"{path}: {_WHOLE_CTX}"])
    names = list(dict.fromkeys(read[0] for read in reads))
    missing = [name for name in names if name not in values]
    if missing:
        raise TemplateError(
            [f"{path}: the template reads parameter '{name}', which has no value: give it with --set {name}=VALUE"
             for name in missing]
        )
    context = {name: values[name].value for name in names}
    try:
        document = tramaj.run_program("concrete", dict(libraries), context, program)
    except tramaj.EvalError as error:
        raise TemplateError([f"{path}: tramaj evaluation error: {error}"]) from None
    if not isinstance(document, dict):
        raise TemplateError([f"{path}: the template evaluates to {_kind(document)}, not an agent object"])
    problems = [f"{path}: {problem}" for problem in _read_problems(document, names)]
    if problems:
        raise TemplateError(problems)
    return document


def _read_problems(document: Any, names: Sequence[str]) -> list[str]:
    """What is wrong with the parameters the template read, given the agent it produced."""
    contents = document.get("contents", document) if isinstance(document, dict) else None
    declared: dict[str, dict[str, Any]] = {}
    if isinstance(contents, dict) and isinstance(contents.get("parameters"), list):
        for decl in contents["parameters"]:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                declared.setdefault(decl["name"], decl)
    problems: list[str] = []
    for name in names:
        decl = declared.get(name)
        if decl is None:
            problems.append(f"the template reads undeclared parameter '{name}': declare it in the agent's parameters")
        elif decl.get("scope", "process") in ("session", "message"):
            problems.append(
                f"the template reads parameter '{name}' of scope {decl['scope']!r}: a template is evaluated once,"
                " at load, and such a parameter has no value then"
            )
        elif decl.get("secret") is True:
            problems.append(
                f"the template reads secret parameter '{name}': its value would be written into the agent's"
                " configuration; bind it to a tool argument instead"
            )
    return problems


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    return "a string" if isinstance(value, str) else "a number"
