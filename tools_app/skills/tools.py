"""The tools of an agent's skills (docs/tools.md §12.3).

Always offered: ``skill_list``, and per skill ``skill_describe_<name>``, ``skill_enable_<name>`` and
``skill_disable_<name>``. A skill's scripts, ``skill_<name>_<script>``, carry the gate
``skill:<name>``: the model sees them from the request after a successful ``skill_enable_<name>``
until a ``skill_disable_<name>`` (``tools_app.activation`` folds the session's calls), and from the
start for a skill named in ``autoEnableSkills``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..base import Tool, ToolContext, ToolResult
from ..bash.tool import BashTool
from ..names import normalize_tool_name
from .skill import Skill, SkillError, read_skill
from .sources import SkillSourceError, source_directories

_NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def gate_of(skill: str) -> str:
    """The gate of a skill's scripts."""
    return f"skill:{skill}"


class SkillScriptTool(BashTool):
    """A script of a skill: a bash tool named ``skill_<skill>_<script>``, visible while enabled."""

    def __init__(self, skill: Skill, script: BashTool) -> None:
        self.skill = skill.name
        self.script = script.path.stem
        super().__init__(script.path, script.info, name=normalize_tool_name(f"skill_{skill.name}_{self.script}"))
        self.gate = gate_of(skill.name)

    @property
    def original_name(self) -> str:
        """``skill_<skill>_<script>`` before normalization."""
        return f"skill_{self.skill}_{self.script}"


class _SkillTool(Tool):
    """What the meta tools share: the skill (``None`` for ``skill_list``) and every skill."""

    def __init__(self, name: str, skill: Skill | None, skills: Sequence[Skill]) -> None:
        self.name = name
        self.skill = skill
        self.skills = list(skills)
        self.parameters = _NO_ARGUMENTS

    def script_names(self, skill: Skill) -> list[str]:
        """The tool names of a skill's scripts."""
        return [normalize_tool_name(f"skill_{skill.name}_{script.path.stem}") for script in skill.scripts]


class SkillListTool(_SkillTool):
    """``skill_list``: every skill with its description and script tools."""

    def __init__(self, skills: Sequence[Skill]) -> None:
        super().__init__("skill_list", None, skills)
        self.description = "List the skills you can enable, with what each is for."

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        listed = [{"name": s.name, "description": s.description, "tools": self.script_names(s)} for s in self.skills]
        return ToolResult({"type": "json", "content": {"skills": listed}})


class SkillDescribeTool(_SkillTool):
    """``skill_describe_<name>``: the skill's metadata, instructions, scripts and reference list;
    with ``reference``, one reference document's text."""

    def __init__(self, skill: Skill, skills: Sequence[Skill]) -> None:
        super().__init__(f"skill_describe_{skill.name}", skill, skills)
        self.description = f"Describe the skill {skill.name} ({skill.description}): its instructions and tools."
        self.parameters = {
            "type": "object",
            "properties": {"reference": {"type": "string", "description": "A reference document to read instead"}},
            "required": [],
            "additionalProperties": False,
        }

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        skill = self.skill
        assert skill is not None  # noqa: S101 - narrows the type (never checks input)
        wanted = arguments.get("reference")
        if wanted is not None:
            path = skill.reference_path(str(wanted))
            if path is None:
                known = ", ".join(skill.references) or "none"
                return ToolResult.error(f"Error: {self.name}: no reference {wanted!r}; references: {known}")
            try:
                return ToolResult(path.read_text(encoding="utf-8", errors="replace"))
            except OSError as error:
                return ToolResult.error(f"Error: {self.name}: cannot read {wanted}: {error.strerror}")
        content: dict[str, Any] = {
            "name": skill.name,
            "description": skill.description,
            "instructions": skill.instructions,
            "tools": [
                {"name": name, "description": script.description}
                for name, script in zip(self.script_names(skill), skill.scripts, strict=True)
            ],
            "references": skill.references,
        }
        for key in ("license", "compatibility"):
            if getattr(skill, key) is not None:
                content[key] = getattr(skill, key)
        if skill.metadata:
            content["metadata"] = skill.metadata
        return ToolResult({"type": "json", "content": content})


class SkillSwitchTool(_SkillTool):
    """``skill_enable_<name>`` and ``skill_disable_<name>``: open or close the skill's gate."""

    def __init__(self, skill: Skill, skills: Sequence[Skill], *, enable: bool) -> None:
        verb = "enable" if enable else "disable"
        super().__init__(f"skill_{verb}_{skill.name}", skill, skills)
        self.enable = enable
        self.description = (
            f"Enable the skill {skill.name} ({skill.description}): its tools are offered from your next turn on."
            if enable
            else f"Disable the skill {skill.name}: its tools are no longer offered."
        )

    def gate_switch(self, arguments: Mapping[str, Any]) -> tuple[str, bool] | None:
        assert self.skill is not None  # noqa: S101 - narrows the type (never checks input)
        return gate_of(self.skill.name), self.enable

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        assert self.skill is not None  # noqa: S101 - narrows the type (never checks input)
        if not self.enable:
            return ToolResult(f"Skill '{self.skill.name}' disabled")
        tools = ", ".join(self.script_names(self.skill)) or "none"
        return ToolResult(f"Skill '{self.skill.name}' enabled; its tools: {tools}")


def load_skills(
    sources: Sequence[Any] | None, resolve: Callable[[str], Path]
) -> tuple[list[Skill], list[str], list[str]]:
    """Read every skill of ``skillSources``.

    Returns:
        ``(skills, warnings, problems)``: skills in source order; warnings (a script whose
        ``describe`` failed, a repository used from the cache); problems (a source or a skill that
        cannot be read, two skills with one name), each naming the entry.
    """
    skills: list[Skill] = []
    warnings: list[str] = []
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for index, entry in enumerate(sources or []):
        where = f"skillSources[{index}]"
        raw = entry.model_dump() if hasattr(entry, "model_dump") else entry
        try:
            directories = source_directories(raw, where, resolve, warnings)
        except SkillSourceError as error:
            problems.append(str(error))
            continue
        for directory in directories:
            try:
                skill = read_skill(directory)
            except SkillError as error:
                problems.append(f"{where}: {error}")
                continue
            if skill.name in seen:
                problems.append(f"{where}: skill {skill.name} in {directory} is also in {seen[skill.name]}")
                continue
            seen[skill.name] = directory
            warnings.extend(f"{where}: {line}" for line in skill.warnings)
            skills.append(skill)
    return skills, warnings, problems


def skill_tools(skills: Sequence[Skill]) -> list[Tool]:
    """The meta tools (first) and the script tools of ``skills``; none without skills."""
    if not skills:
        return []
    meta: list[Tool] = [SkillListTool(skills)]
    scripts: list[Tool] = []
    for skill in skills:
        meta += [
            SkillDescribeTool(skill, skills),
            SkillSwitchTool(skill, skills, enable=True),
            SkillSwitchTool(skill, skills, enable=False),
        ]
        scripts += [SkillScriptTool(skill, script) for script in skill.scripts]
    return meta + scripts


def auto_enabled(names: Sequence[str], skills: Sequence[Skill]) -> tuple[frozenset[str], list[str]]:
    """The gates ``autoEnableSkills`` opens from the start, and a problem per unknown skill name."""
    known = {skill.name for skill in skills}
    problems = [f"autoEnableSkills: no skill named {name!r}" for name in names if name not in known]
    return frozenset(gate_of(name) for name in names if name in known), problems
