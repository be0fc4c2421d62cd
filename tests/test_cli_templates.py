"""``.tramaj`` agent templates on the command line (issue 30, acceptance 1; docs/agents.md §11):
agents-exe's example with ``--set workspace=...``, ``check --show-config``, ``--agent SLUG``
setting a failing template aside, and templates and libraries found through agents-exe.cfg.json.
Real processes: the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.agents.test_templates import CODER, TEAM
from tests.harness import Processes, base_env

AGENTS_EXE = Path(sys.executable).parent / "agents-exe"

REVIEWER = """@a=import("agents", {}).vals
@team=import("team", {workspace: ctx(workspace)}).vals

$a.agent({
  slug: "reviewer",
  apiKeyId: "main-key",
  flavor: "OpenAIv1",
  modelUrl: "http://localhost:1/v1",
  modelName: "m",
  announce: "reviews the workspace",
  systemPrompt: ["You review."],
  parameters: [{name: "workspace"}],
  builtinToolboxes: [$team.dev]
})
"""


def agents_exe(processes: Processes, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The installed ``agents-exe`` run in ``cwd`` to its end, its output captured."""
    return processes.run([str(AGENTS_EXE), *argv], cwd=cwd, env=base_env(AGENTS_LOG_LEVEL="WARNING"),
                         capture_output=True, text=True, timeout=120)


def project(directory: Path) -> None:
    """agents-exe's layout: templates under agents/, a library under libs/, both named by the config."""
    (directory / "agents").mkdir()
    (directory / "libs").mkdir()
    (directory / "agents" / "coder.tramaj").write_text(CODER)
    (directory / "agents" / "reviewer.tramaj").write_text(REVIEWER)
    (directory / "libs" / "team.tramaj").write_text(TEAM)
    (directory / "agents-exe.cfg.json").write_text(
        json.dumps({"agentsDirectories": ["./agents"], "tramajLibraries": ["./libs"]})
    )


def test_check_show_config_prints_what_the_coder_example_evaluates_to(tmp_path: Path, processes: Processes) -> None:
    project(tmp_path)
    checked = agents_exe(processes, tmp_path, "--set", "workspace=/srv/app", "check", "--show-config",
                  "--agent-file", "agents/coder.tramaj")
    assert checked.returncode == 0, checked.stderr
    shown, _, rest = checked.stdout.partition("\ncoder: ")
    document = json.loads(shown)
    assert document["tag"] == "OpenAIAgentDescription"
    assert document["contents"]["systemPrompt"] == ["You edit code under /srv/app."]
    assert [box["tag"] for box in document["contents"]["builtinToolboxes"]] == ["DeveloperToolbox", "LuaToolbox"]
    assert rest.startswith("edits code under the workspace (2 tools)\n")
    assert "coder: parameter workspace (process, required): set" in rest

    # without the value, the template is refused with the flag to give
    refused = agents_exe(processes, tmp_path, "check", "--agent-file", "agents/coder.tramaj")
    assert refused.returncode == 1
    assert (
        f"{tmp_path / 'agents' / 'coder.tramaj'}: the template reads parameter 'workspace', which has no value:"
        " give it with --set workspace=VALUE"
    ) in refused.stderr


def test_templates_and_libraries_come_from_the_config(tmp_path: Path, processes: Processes) -> None:
    project(tmp_path)
    checked = agents_exe(processes, tmp_path, "--set", "workspace=/srv/app", "check")
    assert checked.returncode == 0, checked.stderr
    assert "coder: edits code under the workspace (2 tools)" in checked.stdout
    assert "reviewer: reviews the workspace (1 tools)" in checked.stdout


def test_agent_slug_sets_a_failing_template_aside(tmp_path: Path, processes: Processes) -> None:
    project(tmp_path)
    # the reviewer now also reads a parameter the operator does not give
    (tmp_path / "agents" / "reviewer.tramaj").write_text(
        REVIEWER.replace("ctx(workspace)", "ctx(workspace), extra: $ctx.region")
    )
    plain = agents_exe(processes, tmp_path, "--set", "workspace=/srv/app", "check")
    assert plain.returncode == 1
    assert "reads parameter 'region', which has no value: give it with --set region=VALUE" in plain.stderr
    chosen = agents_exe(processes, tmp_path, "--set", "workspace=/srv/app", "--agent", "coder", "check")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.startswith("coder: edits code under the workspace (2 tools)\n")
    unknown = agents_exe(processes, tmp_path, "--set", "workspace=/srv/app", "--agent", "reviewer", "check")
    assert unknown.returncode == 4
    assert "Agent 'reviewer' not found" in unknown.stderr
    assert f"  - coder ({tmp_path / 'agents' / 'coder.tramaj'})" in unknown.stderr
