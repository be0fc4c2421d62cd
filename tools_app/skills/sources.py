"""Where skills come from (docs/tools.md §12.2).

* ``{"tag": "SkillDirectory", "contents": "<path>"}``: a skill directory (holding ``SKILL.md``), or
  a directory of them (each subdirectory holding ``SKILL.md``), relative to the agent file.
* ``{"tag": "SkillGitRepo", "contents": {"url", "subdir"?, "ref"?}}``: a git repository cloned
  (``git clone --depth 1``) into the skills cache, ``AGENTS_SKILLS_CACHE`` (default
  ``~/.cache/agents-server/skills``), one directory per URL and ref. A cached clone is brought up
  to date on each load (fetch and reset to what the remote has); when the remote cannot be reached
  the cached copy is used, with a warning. ``subdir`` picks a directory of the repository.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from foundation.redaction import redact_urls
from foundation.toolenv import tool_environment

from .skill import MANIFEST

#: Seconds a git command may take.
GIT_TIMEOUT = 120.0


class SkillSourceError(ValueError):
    """A skill source cannot be used; the message names the entry (``skillSources[0]``)."""


def cache_root() -> Path:
    """The skills cache: ``AGENTS_SKILLS_CACHE``, else ``~/.cache/agents-server/skills``."""
    configured = (getattr(settings, "AGENTS", {}) or {}).get("SKILLS_CACHE") or ""
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agents-server" / "skills"


#: The git transports a skill source may use (``GIT_ALLOW_PROTOCOL``; docs/tools.md §12.2).
ALLOWED_PROTOCOLS = "https:http:ssh:git:file"


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - git with fixed subcommands; the source comes from the agent file
        ["git", *args],  # noqa: S607 - git from PATH, as skills' git sources document
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT,
        stdin=subprocess.DEVNULL,
        # only transports that fetch: git's ``ext::`` and ``fd::`` would run a command of the URL's
        env=tool_environment({"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS}),
    )


def clone(url: str, ref: str | None, where: str, warnings: list[str]) -> Path:
    """The checkout of ``url`` (at ``ref``, else the default branch) in the cache, cloned or updated.

    Raises:
        SkillSourceError: the clone failed and nothing is cached; ``url`` or ``ref`` starts with
            ``-`` (git would read it as an option).
    """
    for name, value in (("url", url), ("ref", ref or "")):
        if value.startswith("-"):
            raise SkillSourceError(f"{where}: the {name} may not start with '-'")
    target = cache_root() / hashlib.sha256(f"{url}#{ref or ''}".encode()).hexdigest()[:24]
    try:
        if (target / ".git").is_dir():
            fetched = _git("fetch", "--depth", "1", "origin", ref or "HEAD", cwd=target)
            if fetched.returncode == 0:
                _git("reset", "--hard", "FETCH_HEAD", cwd=target)
            else:
                why = fetched.stderr.strip()[-200:]
                warnings.append(redact_urls(f"{where}: cannot update {url} ({why}); using the cached copy"))
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        branch = ["--branch", ref] if ref else []
        done = _git("clone", "--depth", "1", *branch, "--", url, str(target))
    except (OSError, subprocess.SubprocessError) as error:
        raise SkillSourceError(f"{where}: cannot run git: {type(error).__name__}: {error}") from None
    if done.returncode != 0:
        # git quotes the URL it was given, credentials included, in some of its errors
        raise SkillSourceError(redact_urls(f"{where}: git clone {url} failed: {done.stderr.strip()[-300:]}"))
    return target


def skill_directories(directory: Path, where: str) -> list[Path]:
    """The skills of a source directory: itself when it holds ``SKILL.md``, else its
    subdirectories that do, in name order.

    Raises:
        SkillSourceError: the directory is missing.
    """
    if not directory.is_dir():
        raise SkillSourceError(f"{where}: skill directory {directory} not found")
    if (directory / MANIFEST).is_file():
        return [directory]
    return sorted(child for child in directory.iterdir() if (child / MANIFEST).is_file())


def source_directories(entry: Any, where: str, resolve: Callable[[str], Path], warnings: list[str]) -> list[Path]:
    """The skill directories of one ``skillSources`` entry (cloning a repository if need be).

    Raises:
        SkillSourceError: an entry of another shape, a missing directory, a failed clone.
    """
    tag = entry.get("tag") if isinstance(entry, Mapping) else None
    contents = entry.get("contents") if isinstance(entry, Mapping) else None
    if tag == "SkillDirectory":
        if not isinstance(contents, str) or not contents:
            raise SkillSourceError(f"{where}: a SkillDirectory names a directory")
        return skill_directories(resolve(contents), where)
    if tag == "SkillGitRepo":
        if not isinstance(contents, Mapping) or not isinstance(contents.get("url"), str) or not contents["url"]:
            raise SkillSourceError(f'{where}: a SkillGitRepo is {{"url": <repository>, "subdir"?: <directory>}}')
        subdir, ref = contents.get("subdir"), contents.get("ref")
        if subdir is not None and (not isinstance(subdir, str) or ".." in Path(subdir).parts):
            raise SkillSourceError(f"{where}: subdir must be a directory inside the repository")
        if ref is not None and not isinstance(ref, str):
            raise SkillSourceError(f"{where}: ref must be a branch or tag name")
        url = contents["url"]
        if "://" not in url and not url.startswith("git@"):
            url = str(resolve(url))
        checkout = clone(url, ref, where, warnings)
        return skill_directories(checkout / subdir if subdir else checkout, where)
    raise SkillSourceError(f"{where}: unknown skill source {tag!r} (expected SkillDirectory or SkillGitRepo)")
