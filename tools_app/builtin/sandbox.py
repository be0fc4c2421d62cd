"""File sandboxes: which paths the built-in file tools may touch (docs/guide-toolboxes.md §1).

A :class:`FileSandbox` is built once per toolbox from its declared predicate and never changes.
Every path is made canonical before it is judged: relative to the sandbox's base directory,
``.`` and ``..`` resolved, every symbolic link followed (``os.path.realpath``), so a link inside
an allowed directory that points outside it is judged by where it points. A file that does not
exist yet is judged as its parent directory's canonical path joined with its name, and that
parent must exist. Anything the predicate does not allow is refused, and with no sandbox
nothing is allowed.

The checks return the canonical path; callers open that path, never the one they were given.
A sandbox confines only the built-in tools (attach-file, list-directory, the Developer
toolbox's files, the Lua ``fs`` library), not bash tools nor the commands a toolbox runs.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from agentfiles.builtins import DENY_ALL, PATH_TAGS, PathPredicate, SandboxConfig


class SandboxError(Exception):
    """A path the sandbox refuses, or that is not a path at all; the message is for the model."""


def canonical(path: str | os.PathLike[str], base: Path) -> str:
    """``path`` made absolute from ``base``, normalised, every symbolic link resolved.

    Raises:
        SandboxError: the path is empty or holds characters no file name can hold.
    """
    text = os.fspath(path)
    if not text or "\x00" in text:
        raise SandboxError(f"{text!r} is not a path")
    try:
        os.fsencode(text)
        return os.path.realpath(os.path.join(base, text))
    except (ValueError, UnicodeError) as error:
        raise SandboxError(f"{text[:200]!r} is not a path: {error}") from None


def _inside(path: str, directory: str) -> bool:
    """Whether canonical ``path`` is ``directory`` itself or below it."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


class FileSandbox:
    """The compiled sandbox of one toolbox.

    Args:
        config: the declared predicate, size limit and name (``DENY_ALL`` when none).
        base: the directory relative paths start from, in the predicate and in the model's
            arguments (the working directory for agent files, a stored agent's files directory).
        confine: when set, nothing outside this directory is allowed whatever the predicate
            says (stored agents).
    """

    def __init__(self, config: SandboxConfig = DENY_ALL, base: Path | None = None, confine: Path | None = None) -> None:
        self.config = config
        self.base = Path(base or Path.cwd())
        self.name = config.name or "unnamed"
        self.max_file_size = config.max_file_size
        self._confine = canonical(confine, self.base) if confine is not None else None
        self._predicate = self._compile(config.predicate)

    def _compile(self, node: PathPredicate) -> PathPredicate:
        """The predicate with its paths made canonical (once, so it cannot change later)."""
        if node.tag in PATH_TAGS:
            return PathPredicate(node.tag, canonical(node.value, self.base))
        if node.children:
            return PathPredicate(node.tag, node.value, tuple(self._compile(c) for c in node.children))
        return node

    @property
    def allows_nothing(self) -> bool:
        """Whether the sandbox is the deny-all default."""
        return self.config.predicate.tag == "AlwaysDeny"

    def allows(self, path: str, size: int | None = None) -> bool:
        """Whether canonical ``path`` (of ``size`` bytes, when known) is allowed."""
        if self._confine is not None and not _inside(path, self._confine):
            return False
        return self._eval(self._predicate, path, size)

    def _eval(self, node: PathPredicate, path: str, size: int | None) -> bool:
        tag = node.tag
        if tag == "AlwaysAllow":
            return True
        if tag == "AlwaysDeny":
            return False
        if tag in ("FileExactly", "DirectoryExactly"):
            return path == node.value
        if tag == "DirectoryRecursive":
            return _inside(path, node.value)
        if tag == "DirectoryShallow":
            return path == node.value or os.path.dirname(path) == node.value
        if tag == "ChildOf":
            return path != node.value and _inside(path, node.value)
        if tag == "FilePattern":
            return fnmatch.fnmatchcase(os.path.basename(path), node.value)
        if tag == "FileExtension":
            name = os.path.basename(path)
            return any(name.endswith("." + ext) and len(name) > len(ext) + 1 for ext in node.value)
        if tag == "FileSizeLessThan":
            return (size or 0) < node.value
        if tag == "Not":
            return not self._eval(node.children[0], path, size)
        if tag in ("And", "All"):
            return all(self._eval(child, path, size) for child in node.children)
        return any(self._eval(child, path, size) for child in node.children)  # Or, Any

    def _refuse(self, what: str, given: str) -> SandboxError:
        return SandboxError(f"{what} {given!r} is not allowed by the file sandbox {self.name!r}")

    def check_read(self, given: str) -> Path:
        """The canonical path of an existing file or directory that may be read.

        Raises:
            SandboxError: refused, missing, or larger than the sandbox's size limit.
        """
        path = canonical(given, self.base)
        size = _size(path)
        if not self.allows(path, size):
            raise self._refuse("reading", given)
        if size is None:
            raise SandboxError(f"{given!r} does not exist")
        if self.max_file_size is not None and os.path.isfile(path) and size > self.max_file_size:
            raise SandboxError(f"{given!r} is {size} bytes, more than the sandbox's limit of {self.max_file_size}")
        return Path(path)

    def check_access(self, given: str) -> Path:
        """The canonical path of ``given`` when the sandbox allows looking at it (it may not exist).

        Raises:
            SandboxError: refused.
        """
        path = canonical(given, self.base)
        if not self.allows(path, _size(path)):
            raise self._refuse("access to", given)
        return Path(path)

    def check_write(self, given: str, size: int | None = None) -> Path:
        """The canonical path a write of ``size`` bytes to ``given`` may go to.

        An existing file is judged by its own canonical path; a new one by its parent
        directory's canonical path joined with its name, and the parent must exist.

        Raises:
            SandboxError: refused, no such parent directory, the target is a directory, or
                ``size`` is over the sandbox's limit.
        """
        text = os.fspath(given)
        path = canonical(text, self.base)
        if not os.path.lexists(path):
            parent = canonical(os.path.dirname(os.path.join(self.base, text)) or os.sep, self.base)
            path = os.path.join(parent, os.path.basename(path))
            if not self.allows(path, size):
                raise self._refuse("writing", text)
            if not os.path.isdir(parent):
                raise SandboxError(f"cannot write {text!r}: its directory does not exist")
        elif not self.allows(path, size if size is not None else _size(path)):
            raise self._refuse("writing", text)
        if os.path.isdir(path):
            raise SandboxError(f"cannot write {text!r}: it is a directory")
        if size is not None and self.max_file_size is not None and size > self.max_file_size:
            raise SandboxError(f"writing {size} bytes to {text!r} is over the sandbox's limit of {self.max_file_size}")
        return Path(path)


def _size(path: str) -> int | None:
    """The size of an existing file (0 for a directory), ``None`` when nothing is there."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return 0 if os.path.isdir(path) else stat.st_size
