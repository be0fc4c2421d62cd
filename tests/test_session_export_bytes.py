"""``agents session export`` and ``GET /v1/sessions/:id/export`` give agents-exe's session files
back byte for byte (issue 30, fault 3 and acceptance 5; docs/sessions.md §1.11): real processes,
the session stored in the database in between."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import PROCESS_TIMEOUT, ROOT, Processes, Server, base_env, write_agent
from tests.test_session_text import SESSION_FILES

#: A real file with a number of the kind aeson writes with an exponent (a cost under 0.1).
FLOAT_NOTE = '"total_tokens":6623}'


def agents(processes: Processes, db: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """``agents --db DB ...`` to its end, its output as bytes."""
    return processes.run(
        [sys.executable, "-m", "agentsite.cli", "--db", str(db), *argv],
        cwd=ROOT, env=base_env(AGENTS_LOG_LEVEL="WARNING"), capture_output=True, timeout=PROCESS_TIMEOUT,
    )


def start(processes: Processes, db: Path, *argv: str) -> subprocess.Popen[bytes]:
    """``agents --db DB ...`` started, its output piped."""
    return processes.popen(
        [sys.executable, "-m", "agentsite.cli", "--db", str(db), *argv],
        cwd=ROOT, env=base_env(AGENTS_LOG_LEVEL="WARNING"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def with_a_cost(tmp_path: Path) -> Path:
    """gh-155's file with a ``cost`` in its first usage, as aeson writes 0.01666816."""
    original = (SESSION_FILES[0].parent / "gh-155.session.json").read_text(encoding="utf-8")
    assert FLOAT_NOTE in original
    changed = tmp_path / "with-cost.json"
    text = original.replace(FLOAT_NOTE, '"total_tokens":6623,"cost":1.666816e-2}', 1)
    text = text.replace("72757524-73fb-46c9-b88f-0914a457e79a", "72757524-73fb-46c9-b88f-0914a457e79b", 1)
    changed.write_text(text, encoding="utf-8")
    return changed


# the files in two halves, one test each, so that each test's commands fit its time on a busy machine
@pytest.mark.parametrize("half", [0, 1])
def test_session_export_gives_each_file_back_byte_for_byte(tmp_path: Path, processes: Processes, half: int) -> None:
    files = [*SESSION_FILES, with_a_cost(tmp_path)][half::2]
    # one database per file, so that the commands of all files run at once
    dbs = [tmp_path / f"{index}.db" for index in range(len(files))]
    # the session's agent must be one the command knows, as the HTTP import requires
    agent = write_agent(tmp_path, "any", "http://127.0.0.1:9/v1")
    imports = [
        start(processes, db, "--agent-file", str(agent), "session", "import", str(path), "--agent", "any")
        for db, path in zip(dbs, files, strict=True)
    ]
    ids = []
    for path, process in zip(files, imports, strict=True):
        out, err = process.communicate(timeout=PROCESS_TIMEOUT)
        assert process.returncode == 0, (path.name, err)
        ids.append(out.decode().strip())
    exports = [start(processes, db, "session", "export", session_id) for db, session_id in zip(dbs, ids, strict=True)]
    for path, process in zip(files, exports, strict=True):
        out, err = process.communicate(timeout=PROCESS_TIMEOUT)
        assert process.returncode == 0, (path.name, err)
        assert out == path.read_bytes(), path.name
    # --output writes the same bytes
    written = tmp_path / "written.json"
    output = agents(processes, dbs[-1], "session", "export", ids[-1], "--output", str(written))
    assert output.returncode == 0, output.stderr
    assert written.read_bytes() == files[-1].read_bytes()


def test_the_http_export_gives_each_file_back_byte_for_byte(
    tmp_path: Path, start_server: Callable[..., Server], processes: Processes
) -> None:
    agent = write_agent(tmp_path, "keeper", "http://127.0.0.1:9/v1")
    server = start_server([agent])
    # every file's HTTP export is checked in process (tests/test_session_text.py); here, through a
    # real server, the file of each kind: indented without a final newline, and one with a float
    older = SESSION_FILES[0].parent / "partial-turn-older.json"
    for path in [older, with_a_cost(tmp_path)]:
        imported = agents(
            processes, Path(server.db), "--agent-file", str(agent), "session", "import", str(path), "--agent", "keeper"
        )
        assert imported.returncode == 0, imported.stderr
        session_id = imported.stdout.decode().strip()
        answer = server.client.get(f"/v1/sessions/{session_id}/export")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.content == path.read_bytes(), path.name

    # a compact file posted to the API comes back as agents-exe wrote it too
    original = with_a_cost(tmp_path).read_bytes()
    document = json.loads(original.replace(b"0914a457e79b", b"0914a457e79c"))
    posted = server.client.post("/v1/sessions/import", json={"agent": "keeper", "session": document})
    assert posted.status_code == 201, posted.text
    answer = server.client.get(f"/v1/sessions/{document['sessionId']}/export")
    assert answer.content == original.replace(b"0914a457e79b", b"0914a457e79c")
