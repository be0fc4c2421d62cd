"""Skills in process: SKILL.md, scripts and references read; sources from a directory and from a
git repository (cloned to the cache, updated, used from the cache when the remote is gone); the
tools and their gates; every bad source or skill a load error naming its entry."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.skillfiles import git_repo_with_skill, write_skill
from tools_app.skills.skill import SkillError, read_skill
from tools_app.toolset import ToolBuildError, build_toolset

from .conftest import make_agent, make_ctx

META = ["skill_list", "skill_describe_pdf-tools", "skill_enable_pdf-tools", "skill_disable_pdf-tools"]
SCRIPT = "skill_pdf-tools_extract-text"


@pytest.fixture(autouse=True)
def skills_cache(settings, tmp_path):
    settings.AGENTS = {**settings.AGENTS, "SKILLS_CACHE": str(tmp_path / "cache")}
    return tmp_path / "cache"


def _call(name: str, **arguments: object) -> dict:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_a_skill_is_read_from_its_directory(tmp_path):
    skill = read_skill(write_skill(tmp_path, "pdf-tools"))
    assert (skill.name, skill.description, skill.license) == ("pdf-tools", "Works with PDF files", "MIT")
    assert skill.metadata == {"author": "team-pdf", "version": "1.0"}
    assert skill.instructions.startswith("# pdf-tools\n\nEnable the skill")
    assert [s.path.name for s in skill.scripts] == ["extract-text.sh"] and skill.references == ["api-notes.txt"]


@pytest.mark.parametrize(
    ("manifest", "problem"),
    [
        ("---\nname: PDF Tools\ndescription: x\n---\n", "name must be 1-64 lower-case letters"),
        ("---\nname: " + "a" * 65 + "\ndescription: x\n---\n", "name must be 1-64"),
        ("---\nname: ok\n---\n", "description must be a non-empty text"),
        ("---\nname: ok\ndescription: x\nmetadata:\n  n: 1\n---\n", "metadata must be a map of text to text"),
        ("---\nname: [ok\n---\n", "the front matter is not YAML"),
    ],
)
def test_bad_manifests_are_refused(tmp_path, manifest, problem):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "SKILL.md").write_text(manifest)
    with pytest.raises(SkillError, match=problem):
        read_skill(tmp_path / "s")


def test_tools_of_a_directory_of_skills_and_their_gates(tmp_path):
    write_skill(tmp_path / "skills", "pdf-tools")
    write_skill(tmp_path / "skills", "notes", description="Keeps notes")
    (tmp_path / "skills" / "not-a-skill").mkdir()
    agent = make_agent(
        tmp_path, skillSources=[{"tag": "SkillDirectory", "contents": "skills"}], autoEnableSkills=["notes"]
    )
    toolset = build_toolset(agent)
    assert toolset.names() == [
        "skill_list",
        "skill_describe_notes",
        "skill_enable_notes",
        "skill_disable_notes",
        *META[1:],
        "skill_notes_extract-text",
        SCRIPT,
    ]
    # auto-enabled from the start; the other one after its enable call, until its disable call
    shown = [t["function"]["name"] for t in toolset.openai_tools()]
    assert "skill_notes_extract-text" in shown and SCRIPT not in shown
    history = [(_call("skill_enable_pdf-tools"), "Skill 'pdf-tools' enabled; its tools: " + SCRIPT)]
    assert SCRIPT not in toolset.hidden(history)
    history.append((_call("skill_disable_notes"), "Skill 'notes' disabled"))
    assert toolset.hidden(history) == {"skill_notes_extract-text"}


def test_the_meta_tools_answer(tmp_path):
    write_skill(tmp_path, "pdf-tools")
    tools = {
        t.name: t
        for t in build_toolset(
            make_agent(tmp_path, skillSources=[{"tag": "SkillDirectory", "contents": "pdf-tools"}])
        ).tools
    }
    ctx = make_ctx()
    assert tools["skill_list"].call({}, ctx).response == {
        "type": "json",
        "content": {"skills": [{"name": "pdf-tools", "description": "Works with PDF files", "tools": [SCRIPT]}]},
    }
    described = tools["skill_describe_pdf-tools"].call({}, ctx).response["content"]
    assert described["tools"] == [{"name": SCRIPT, "description": "Extracts the text of a PDF file"}]
    assert (described["references"], described["license"]) == (["api-notes.txt"], "MIT")
    assert "Enable the skill" in described["instructions"]
    assert tools["skill_describe_pdf-tools"].call({"reference": "api-notes.txt"}, ctx).response == (
        "The pdf-tools reference.\n"
    )
    refused = tools["skill_describe_pdf-tools"].call({"reference": "../SKILL.md"}, ctx)
    assert refused.is_error and "no reference '../SKILL.md'; references: api-notes.txt" in refused.response
    assert tools["skill_enable_pdf-tools"].call({}, ctx).response == f"Skill 'pdf-tools' enabled; its tools: {SCRIPT}"
    assert tools["skill_disable_pdf-tools"].call({}, ctx).response == "Skill 'pdf-tools' disabled"
    assert tools[SCRIPT].call({"file": "a.pdf"}, ctx).response == "v1 text of a.pdf\n"


@pytest.mark.usefixtures("processes")
def test_a_git_repository_is_cloned_to_the_cache_and_updated(tmp_path, skills_cache):
    repo = git_repo_with_skill(tmp_path / "repo", "pdf-tools")
    source = {"tag": "SkillGitRepo", "contents": {"url": str(repo), "subdir": "skills"}}
    toolset = build_toolset(make_agent(tmp_path / "agent", skillSources=[source]))
    assert toolset.names() == [*META, SCRIPT]
    assert toolset.get(SCRIPT).call({"file": "x"}, make_ctx()).response == "v1 text of x\n"
    assert len(list(skills_cache.iterdir())) == 1
    git_repo_with_skill(repo, "pdf-tools", marker="v2")
    updated = build_toolset(make_agent(tmp_path / "agent", skillSources=[source]))
    assert updated.get(SCRIPT).call({"file": "x"}, make_ctx()).response == "v2 text of x\n"
    shutil.rmtree(repo)
    cached = build_toolset(make_agent(tmp_path / "agent", skillSources=[source]))
    assert cached.names() == [*META, SCRIPT]
    assert any("cannot update" in w and "using the cached copy" in w for w in cached.warnings)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ({"tag": "SkillZip", "contents": "x"}, "skillSources[0]: unknown skill source 'SkillZip'"),
        ({"tag": "SkillDirectory", "contents": 3}, "skillSources[0]: a SkillDirectory names a directory"),
        ({"tag": "SkillGitRepo", "contents": {"subdir": "x"}}, 'skillSources[0]: a SkillGitRepo is {"url"'),
        ({"tag": "SkillGitRepo", "contents": {"url": "nowhere-repo"}}, "skillSources[0]: git clone"),
        ({"tag": "SkillGitRepo", "contents": {"url": "x", "subdir": "../up"}}, "skillSources[0]: subdir must be"),
    ],
)
def test_bad_sources_are_load_errors_naming_the_entry(tmp_path, source, problem):
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(make_agent(tmp_path, skillSources=[source]))
    [line] = raised.value.problems
    assert line.startswith(problem), line


def test_duplicate_skills_and_unknown_auto_enabled_names_are_load_errors(tmp_path):
    write_skill(tmp_path / "a", "pdf-tools")
    write_skill(tmp_path / "b", "pdf-tools")
    sources = [{"tag": "SkillDirectory", "contents": "a"}, {"tag": "SkillDirectory", "contents": "b"}]
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(make_agent(tmp_path, skillSources=sources))
    assert raised.value.problems == [
        f"skillSources[1]: skill pdf-tools in {tmp_path / 'b' / 'pdf-tools'} is also in {tmp_path / 'a' / 'pdf-tools'}"
    ]
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(make_agent(tmp_path, skillSources=sources[:1], autoEnableSkills=["core-utils"]))
    assert raised.value.problems == ["autoEnableSkills: no skill named 'core-utils'"]


@pytest.mark.parametrize(
    "contents",
    [
        {"url": "--upload-pack=touch {marker}; false ://x"},
        {"url": "ext::sh -c touch% {marker} #://x"},
        {"url": "{repo}", "ref": "--upload-pack=touch {marker}"},
    ],
)
@pytest.mark.usefixtures("processes")
def test_a_git_source_cannot_run_a_command(tmp_path, skills_cache, contents):
    repo = git_repo_with_skill(tmp_path / "repo", "pdf-tools")
    marker = tmp_path / "ran"
    source = {"tag": "SkillGitRepo", "contents": {k: v.format(marker=marker, repo=repo) for k, v in contents.items()}}
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(make_agent(tmp_path / "agent", skillSources=[source]))
    [line] = raised.value.problems
    assert line.startswith("skillSources[0]: "), line
    assert not marker.exists()
