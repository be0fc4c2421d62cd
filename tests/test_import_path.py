"""The command line imports its own modules, never a same-named one of the directory it runs in
(docs/security.md, "The working directory")."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.harness import Processes, base_env


def test_the_command_line_does_not_import_from_its_working_directory(processes: Processes, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    for package in ("agentfiles", "foundation", "mcp"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({package!r} + '\\n')\nraise SystemExit('shadowed')\n"
        )
    agents = Path(sys.executable).parent / "agents"
    done = processes.run(
        [str(agents), "--db", str(tmp_path / "x.db"), "describe"],
        cwd=tmp_path,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stderr
