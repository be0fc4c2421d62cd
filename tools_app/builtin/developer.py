"""The Developer toolbox: ``developer_<Name>_developer_tools {capability, ...}`` (docs/guide-toolboxes.md §1).

One tool; ``capability`` picks among those the toolbox lists:

* ``show-spec {spec_name}``: the text of a specification (``bash-tools``).
* ``validate-agent {path}``: load an agent file and its helpers, and report the problems.
* ``create-agent {path, slug, ...}`` and ``create-tool {path, slug, language}``: write a new agent
  file or tool script from a template; an existing file is never replaced.
* ``read-file-range``, ``write-file-range``, ``patch-file``: ``tools_app.builtin.editing``.
* ``build-command``: run the toolbox's ``BuildCommand`` (``sh -c``) where the sandbox's relative
  paths start (the working directory; a stored agent's files), as a bash tool runs.

Every file goes through the toolbox's sandbox. Answers are JSON objects; errors name the tool,
and a patch that does not apply answers ``{"error", "expected", "actual"}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentfiles.builtins import DeveloperConfig
from agentfiles.loader import AgentLoadError, load_agent_tree, parse_agent_document

from ..base import ToolContext, ToolResult
from . import editing
from .common import BuiltinTool, ShellError, json_result, run_shell
from .sandbox import FileSandbox, SandboxError
from .specs import SPECS, TEMPLATES, agent_document, tool_template

_PATH = {"type": "string", "description": "the file"}
_SNAPSHOT = {"type": "string", "description": "fail unless the file still has this snapshot reference"}
ARGUMENTS: dict[str, dict[str, dict[str, Any]]] = {
    "show-spec": {"spec_name": {"type": "string", "enum": sorted(SPECS), "description": "show-spec: which"}},
    "validate-agent": {"path": _PATH},
    "create-agent": {
        "path": _PATH,
        "slug": {"type": "string", "description": "create-agent, create-tool: the new slug"},
        "announce": {"type": "string", "description": "create-agent: one line saying what it does"},
        "system_prompt": {"type": "string", "description": "create-agent: its system prompt"},
        "model_url": {"type": "string", "description": "create-agent: the endpoint (OpenAI's)"},
        "model_name": {"type": "string", "description": "create-agent: the model (gpt-4.1-mini)"},
        "api_key_id": {"type": "string", "description": "create-agent: the key id (openai)"},
        "flavor": {"type": "string", "description": "create-agent: OpenAIv1, KimiV1, MistralV1 or OllamaV1"},
    },
    "create-tool": {
        "path": _PATH,
        "slug": {"type": "string", "description": "create-agent, create-tool: the new slug"},
        "language": {"type": "string", "enum": sorted(TEMPLATES), "description": "create-tool: bash (default)"},
        "description": {"type": "string", "description": "create-tool: what the tool does"},
    },
    "read-file-range": {
        "path": _PATH,
        "ranges": {
            "type": "string",
            "description": 'lines: "5", "1-10", "1-5,20-30", "head", "tail"; write: also'
            ' "N+" (insert after N) and "whole"',
        },
        "session_id": {"type": "string", "description": "a write session (read its staged text, or add to it)"},
        "metadata_only": {"type": "boolean", "description": "read-file-range: counts and snapshot only"},
    },
    "write-file-range": {
        "path": _PATH,
        "contentBlocks": {
            "type": "array",
            "items": {"type": "string"},
            "description": "write-file-range: one per range",
        },
        "expected_snapshot_ref": _SNAPSHOT,
        "commit": {"type": "boolean", "description": "write-file-range: write now (default without a session)"},
    },
    "patch-file": {
        "path": _PATH,
        "patch": {"type": "string", "description": "patch-file: a unified diff"},
        "expected_snapshot_ref": _SNAPSHOT,
    },
}


class DeveloperTool(BuiltinTool):
    """``developer_<Name>_developer_tools``: the capabilities a DeveloperToolbox lists.

    Args:
        box: the parsed ``DeveloperToolbox`` entry.
        sandbox: its file sandbox.
    """

    def __init__(self, box: Any, sandbox: FileSandbox) -> None:
        config = box.config
        assert isinstance(config, DeveloperConfig)  # noqa: S101 - narrows the type (never checks input)
        self.config = config
        self.sandbox = sandbox
        self.capabilities = box.capabilities
        properties: dict[str, Any] = {"capability": {"type": "string", "enum": self.capabilities}}
        for capability in self.capabilities:
            for key, schema in ARGUMENTS.get(capability, {}).items():
                properties.setdefault(key, schema)
        if "write-file-range" in self.capabilities:
            properties.setdefault("ranges", ARGUMENTS["read-file-range"]["ranges"])
            properties.setdefault("session_id", ARGUMENTS["read-file-range"]["session_id"])
        super().__init__(
            box,
            f"developer_{config.Name}_developer_tools",
            f"{config.Description or config.Name}. Capabilities: {', '.join(self.capabilities) or 'none'}."
            " Pass the capability and its arguments; line numbers count from 1.",
            {"type": "object", "properties": properties, "required": ["capability"]},
        )
        self._handlers: dict[str, Callable[[dict[str, Any], ToolContext], Any]] = {
            "show-spec": self._show_spec,
            "validate-agent": self._validate_agent,
            "create-agent": self._create_agent,
            "create-tool": self._create_tool,
            "read-file-range": lambda a, c: editing.read_file_range(self.sandbox, self.name, a, c),
            "write-file-range": lambda a, c: editing.write_file_range(self.sandbox, self.name, a, c),
            "patch-file": lambda a, c: editing.patch_file(self.sandbox, self.name, a, c),
            "build-command": self._build,
        }

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run the capability named in ``arguments["capability"]`` (module docstring)."""
        capability = arguments.get("capability") if isinstance(arguments, dict) else None
        if not isinstance(capability, str) or not capability:
            return self.fail(f'the argument "capability" is required (one of: {", ".join(self.capabilities)})')
        if capability not in self.capabilities:
            enabled = ", ".join(self.capabilities) or "none"
            return self.fail(f"capability {capability!r} is not enabled in this toolbox (enabled: {enabled})")
        try:
            answer = self._handlers[capability](arguments, ctx)
        except editing.EditError as error:
            if isinstance(error.report, dict):
                return ToolResult.error(json.dumps(error.report, ensure_ascii=False))
            return self.fail(f"{capability}: {error.report}")
        except (SandboxError, ShellError) as error:
            return self.fail(f"{capability}: {error}")
        except OSError as error:
            return self.fail(f"{capability}: {error.strerror or error}")
        return json_result(answer)

    def _show_spec(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        name = arguments.get("spec_name") or "bash-tools"
        if name not in SPECS:
            raise editing.EditError(f"unknown spec {name!r} (known: {', '.join(sorted(SPECS))})")
        return {"spec_name": name, "content": SPECS[name]}

    def _validate_agent(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        given = _text(arguments, "path")
        path = self.sandbox.check_read(given)
        try:
            tree = load_agent_tree(path)
        except AgentLoadError as error:
            return {"path": given, "valid": False, "problems": error.problems, "warnings": error.warnings}
        slugs = sorted(tree.agents)
        return {"path": given, "valid": True, "slug": tree.root.spec.slug, "agents": slugs, "warnings": tree.warnings}

    def _create_agent(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        given = _text(arguments, "path")
        _text(arguments, "slug")
        document = agent_document(arguments)
        try:
            parse_agent_document(document, "the new agent")
        except AgentLoadError as error:
            raise editing.EditError("; ".join(error.problems)) from None
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        path = self._new_file(given, text)
        return {"path": given, "slug": document["contents"]["slug"], "created": True, "file": str(path)}

    def _create_tool(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        given = _text(arguments, "path")
        slug = _text(arguments, "slug")
        language = arguments.get("language") or "bash"
        if language not in TEMPLATES:
            raise editing.EditError(f"unknown language {language!r} (known: {', '.join(sorted(TEMPLATES))})")
        path = self._new_file(given, tool_template(slug, language, str(arguments.get("description") or "")))
        path.chmod(0o755)
        return {"path": given, "slug": slug, "language": language, "created": True}

    def _new_file(self, given: str, text: str) -> Any:
        data = text.encode("utf-8")
        path = self.sandbox.check_write(given, len(data))
        if path.exists():
            raise editing.EditError(f"{given} already exists; it is not replaced")
        with open(path, "xb") as out:
            out.write(data)
        return path

    def _build(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        if not self.config.BuildCommand:
            raise editing.EditError("this toolbox has no BuildCommand")
        return run_shell(self.config.BuildCommand, ctx, cwd=self.sandbox.base)


def _text(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise editing.EditError(f'the argument "{key}" is required')
    return value
