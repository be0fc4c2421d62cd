"""The OpenAPI document allows no request the server refuses (issue 29, acceptance 4): schemathesis'
``positive_data_acceptance`` check sends requests generated from ``/openapi.json`` to a real
server with authentication on (an admin owner's token, so that every feature is open), with a
fixed seed and a bounded number of examples, over every operation but two event streams and
the storing of an agent (docs/api.md §13.1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import ROOT, Server, write_agent

pytestmark = pytest.mark.integration

TOKEN = "schemathesis-root-token"
SCRIPT = {"rules": [{"reply": {"content": "ok"}}]}


@pytest.mark.timeout(900)
def test_every_request_the_document_allows_is_accepted(
    tmp_path: Path, llm_server: Callable[..., Any], start_server: Callable[..., Server]
):
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "weather", llm.url)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"owner": "root", "token": TOKEN}]}))
    server = start_server([agent], extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"])
    outcome = subprocess.run(
        [
            str(Path(sys.executable).parent / "st"),
            "run",
            f"{server.url}/openapi.json",
            "--checks",
            "positive_data_acceptance",
            "--phases",
            "examples,coverage,fuzzing",
            "--mode",
            "positive",
            # the two event streams answer 200 with a stream that stays open (docs/api.md §9.1):
            # there is no whole answer to read
            "--exclude-path-regex",
            "/events$",
            # an agent file is checked by the loader, with rules across fields and files that no JSON
            # schema states (docs/agents.md): the document describes its shape only
            "--exclude-operation-id",
            "putAgent",
            "--request-timeout",
            "60",
            "--max-examples",
            "5",
            "--seed",
            "29",
            "--workers",
            "1",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        # schemathesis keeps a cache of what it found in its working directory: not in the checkout
        cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "PYTHONPATH": str(ROOT)},
        timeout=900,
        check=False,
    )
    output = outcome.stdout + outcome.stderr
    assert outcome.returncode == 0, output
    paths = server.client.get("/openapi.json").json()["paths"]
    operations = sum(len(methods) for path, methods in paths.items() if not path.endswith("/events")) - 1
    assert f"Tested: {operations}" in output, output
