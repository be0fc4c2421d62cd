"""The shipped demo agents and scripted model, pointed at a test's own scripted LLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.harness import ROOT

EXAMPLES = ROOT / "examples"


def demo_script() -> dict[str, Any]:
    """The demo's mock-llm script (examples/mock-llm.json)."""
    return json.loads((EXAMPLES / "mock-llm.json").read_text())


def demo_agents(tmp: Path, model_url: str) -> list[Path]:
    """Copies of examples/weather and examples/shell whose ``modelUrl`` is ``model_url``."""
    target = tmp / "examples"
    shutil.copytree(EXAMPLES, target, dirs_exist_ok=True)
    paths = [target / "weather" / "weather.json", target / "shell" / "shell.json"]
    for path in paths:
        path.write_text(path.read_text().replace("http://127.0.0.1:8081/v1", model_url))
    return paths
