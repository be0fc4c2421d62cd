"""Texts the Developer toolbox hands out: the bash-tool protocol (``show-spec``) and the
templates of ``create-tool`` and ``create-agent``."""

from __future__ import annotations

import json
from typing import Any

BASH_TOOLS_SPEC = """\
Bash tools (binary-tool protocol v1)

A bash tool is an executable file (any language) that answers two commands.

1. `<tool> describe` prints one JSON object on stdout and exits 0:

   {"slug": "word-count",
    "description": "counts the words of a text",
    "args": [{"name": "text", "description": "the text", "type": "string",
              "backing_type": "string", "arity": "single", "mode": "stdin"}],
    "empty-result": {"tag": "AddMessage", "contents": "--no output--"}}

   - slug: the tool's name; the model sees it as bash_<slug>.
   - args: each argument has a name, a description, a type shown to the model, a backing_type
     (string, bool, number), an arity (single: required; optional; multiple: a list) and a
     mode: positional (a command-line word), dashdashspace (--name value), dashdashequal
     (--name=value), stdin (written to standard input) or env (an environment variable).
   - empty-result (optional): what the model gets when the tool prints nothing.
   - output-media-type (optional): the media type of stdout (e.g. image/png) for a binary result.

2. `<tool> run <arguments>` does the work. The arguments come in the order `describe` declares
   them, each as its mode says. stdout is the result; stderr is not shown unless the tool fails.
   A non-zero exit code makes the call an error, with the end of stderr.

   The environment carries AGENT_SESSION_ID, AGENT_CONVERSATION_ID, AGENT_TURN_ID and
   AGENT_AGENT_ID.

Put the file in the agent's toolDirectory or a bashToolboxes directory and make it executable.
"""

SPECS = {"bash-tools": BASH_TOOLS_SPEC}

_BASH_TEMPLATE = """\
#!/bin/bash
# {slug} - a bash tool (protocol v1)

set -euo pipefail

case "${{1:-}}" in
  describe)
    cat <<'DESCRIBE_EOF'
{describe}
DESCRIBE_EOF
    ;;
  run)
    # the tool's work goes here
    echo "Tool {slug} executed"
    ;;
  *)
    echo "Usage: {slug} <describe|run>" >&2
    exit 1
    ;;
esac
"""

_PYTHON_TEMPLATE = """\
#!/usr/bin/env python3
\"\"\"{slug}: a tool speaking the bash-tool protocol v1.\"\"\"
import json
import sys

DESCRIBE = {describe}


def run(arguments):
    # the tool's work goes here
    print("Tool {slug} executed")


def main():
    if len(sys.argv) < 2:
        print(f"Usage: {{sys.argv[0]}} <describe|run>", file=sys.stderr)
        return 1
    if sys.argv[1] == "describe":
        print(json.dumps(DESCRIBE))
        return 0
    if sys.argv[1] == "run":
        run(sys.argv[2:])
        return 0
    print(f"Unknown command: {{sys.argv[1]}}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
"""

TEMPLATES = {"bash": _BASH_TEMPLATE, "python": _PYTHON_TEMPLATE}


def tool_template(slug: str, language: str, description: str) -> str:
    """The source of a new tool called ``slug`` in ``language`` (``bash`` or ``python``)."""
    describe: dict[str, Any] = {
        "slug": slug,
        "description": description or f"Tool {slug} - describe what this tool does",
        "args": [],
        "empty-result": {"tag": "AddMessage", "contents": "--no output--"},
    }
    return TEMPLATES[language].format(slug=slug, describe=json.dumps(describe, indent=2))


def agent_document(arguments: dict[str, Any]) -> dict[str, Any]:
    """A new agent file's JSON from create-agent's arguments (defaults for what is missing)."""
    slug = arguments["slug"]
    prompt = arguments.get("system_prompt") or f"You are {slug}, a helpful assistant."
    return {
        "tag": "OpenAIAgentDescription",
        "contents": {
            "slug": slug,
            "apiKeyId": arguments.get("api_key_id") or "openai",
            "flavor": arguments.get("flavor") or "OpenAIv1",
            "modelUrl": arguments.get("model_url") or "https://api.openai.com/v1",
            "modelName": arguments.get("model_name") or "gpt-4.1-mini",
            "announce": arguments.get("announce") or f"the {slug} agent",
            "systemPrompt": prompt.split("\n") if isinstance(prompt, str) else list(prompt),
            "toolDirectory": "tools",
        },
    }
