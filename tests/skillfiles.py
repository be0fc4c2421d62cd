"""Skill directories and git repositories for the skills tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.harness import write_tool


def write_skill(root: Path, name: str, *, description: str = "Works with PDF files", marker: str = "v1") -> Path:
    """A skill ``root/<name>`` with one script ``extract-text.sh`` and one reference document."""
    directory = root / name
    (directory / "references").mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\nlicense: MIT\nmetadata:\n  author: team-pdf\n"
        f'  version: "1.0"\n---\n# {name}\n\nEnable the skill, then extract text.\n'
    )
    (directory / "references" / "api-notes.txt").write_text(f"The {name} reference.\n")
    write_tool(
        directory / "scripts",
        "extract-text.sh",
        {
            "slug": "extract-text",
            "description": "Extracts the text of a PDF file",
            "args": [
                {
                    "name": "file",
                    "description": "the PDF",
                    "type": "string",
                    "backing_type": "string",
                    "arity": "single",
                    "mode": "positional",
                }
            ],
        },
        f'echo "{marker} text of $1"',
    )
    return directory


def git(repo: Path, *args: str) -> None:
    """Run git in ``repo`` as a throwaway identity."""
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def git_repo_with_skill(repo: Path, name: str, *, subdir: str = "skills", marker: str = "v1") -> Path:
    """A local git repository holding a skill under ``subdir``, committed; returns the repository."""
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(repo, "init", "-q")
    write_skill(repo / subdir, name, marker=marker)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"skill {name} {marker}")
    return repo
