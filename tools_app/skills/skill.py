"""One skill directory (docs/tools.md §12.1).

``SKILL.md`` starts with YAML front matter (``name``, ``description``, optional ``license``,
``compatibility`` and ``metadata``, a map of text to text), then the instructions in Markdown.
``scripts/`` holds describe/run executables (the bash tool protocol), each a tool of the skill
named after its file without extension; ``references/`` holds documents the model may read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import frontmatter
import yaml

from ..bash.loading import BashToolLoadError, load_bash_directory
from ..bash.tool import BashTool

#: What a skill's name may be: 1 to 64 lower-case letters, digits and ``-``.
SKILL_NAME = re.compile(r"[a-z0-9-]{1,64}")
MANIFEST = "SKILL.md"


class SkillError(ValueError):
    """A skill directory cannot be used; the message names the directory and the problem."""


@dataclass
class Skill:
    """A skill as read from its directory.

    Attributes:
        name, description, license, compatibility, metadata: the front matter.
        instructions: the Markdown after the front matter.
        path: the skill's directory.
        scripts: its scripts' tools (``scripts/``), by file name order.
        references: the files of ``references/``, relative to it.
        warnings: scripts whose ``describe`` failed, one line each.
    """

    name: str
    description: str
    instructions: str
    path: Path
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    scripts: list[BashTool] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def reference_path(self, relative: str) -> Path | None:
        """The file ``references/<relative>`` when it is one of :attr:`references`, else ``None``."""
        return self.path / "references" / relative if relative in self.references else None


def _optional_text(data: dict[str, object], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise SkillError(f"{where}: {key} must be text")
    return value


def read_skill(directory: Path) -> Skill:
    """Read the skill in ``directory``.

    Raises:
        SkillError: no ``SKILL.md``, front matter that is not YAML or lacks ``name`` or
            ``description``, a name that is not 1-64 lower-case letters, digits and ``-``, a
            ``metadata`` that is not a map of text to text.
    """
    manifest = directory / MANIFEST
    where = str(manifest)
    try:
        post = frontmatter.loads(manifest.read_text(encoding="utf-8"))
    except OSError as error:
        raise SkillError(f"{where}: cannot read: {error.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as error:
        raise SkillError(f"{where}: the front matter is not YAML: {error}") from None
    data = dict(post.metadata)
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not SKILL_NAME.fullmatch(name):
        raise SkillError(f"{where}: name must be 1-64 lower-case letters, digits and -, got {name!r}")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{where}: description must be a non-empty text")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SkillError(f"{where}: metadata must be a map of text to text")
    skill = Skill(
        name=name,
        description=description.strip(),
        instructions=post.content,
        path=directory,
        license=_optional_text(data, "license", where),
        compatibility=_optional_text(data, "compatibility", where),
        metadata={str(k): v for k, v in metadata.items()},
    )
    scripts = directory / "scripts"
    if scripts.is_dir():
        try:
            skill.scripts, skill.warnings = load_bash_directory(scripts)
        except BashToolLoadError as error:
            raise SkillError(f"{scripts}: {error}") from None
    references = directory / "references"
    if references.is_dir():
        skill.references = sorted(
            str(p.relative_to(references)) for p in references.rglob("*") if p.is_file() and not p.is_symlink()
        )
    return skill
