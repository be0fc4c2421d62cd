"""The small commands of agents-exe (docs/cli.md §6): ``describe``, ``describe-tool``,
``check-tool-call``, ``tool-call``, ``spec bash-tools``, ``paths``, ``init``, ``new agent|tool`` and
``config api-key list|create``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from agentfiles.project_config import CONFIG_FILE_NAME, SECRET_KEYS_NAME, discovered_agent_files
from agentsite.cli.common import (
    EXIT_AGENT,
    EXIT_TOOL,
    CliError,
    agent_files,
    keys_file,
    project_config,
    quiet_logs,
)

#: The placeholder ``config api-key create`` writes.
KEY_PLACEHOLDER = "<insert-your-api-key-here>"

BASH_TOOLS_SPEC = """\
Bash tools: the protocol (version 1)

A bash tool is an executable file. The program calls it in two ways:

  <tool> describe
      prints one JSON object on stdout:
      {"slug": "...", "description": "...",
       "args": [{"name", "description", "type", "backing_type", "arity", "mode"}...],
       "empty-result": {"tag": "AddMessage", "contents": "--no output--"}}
      arity: "single" or "optional"; mode: "positional", "dashdashspace" (--name value),
      "dashdashequal" (--name=value) or "stdin"; type: "string", "number", "bool", ...

  <tool> run [arguments as the modes say]
      does the work; stdout is the result the model reads; a non-zero exit is an error,
      reported to the model with the end of stderr.

The model sees the tool as bash_<slug>. The environment holds AGENT_SESSION_ID,
AGENT_CONVERSATION_ID, AGENT_TURN_ID and AGENT_AGENT_ID.
"""

_TOOL_TEMPLATES = {
    "bash": ("", '#!/usr/bin/env bash\nset -eu\nif [ "${{1:-}}" = describe ]; then\ncat <<\'JSON\'\n{describe}\nJSON\n'
                 'exit 0\nfi\nshift\necho "{slug} ran with: $*"\n'),
    "python": (".py", '#!/usr/bin/env python3\nimport json\nimport sys\n\nif sys.argv[1:2] == ["describe"]:\n'
                      '    print(json.dumps({describe_py}))\nelse:\n    print("{slug} ran with:", sys.argv[2:])\n'),
    "node": (".js", '#!/usr/bin/env node\nif (process.argv[2] === "describe") {{\n'
                    '  console.log(JSON.stringify({describe}));\n}} else {{\n'
                    '  console.log("{slug} ran with:", process.argv.slice(3));\n}}\n'),
    "haskell": (".hs", '#!/usr/bin/env runghc\nimport System.Environment\n\nmain :: IO ()\nmain = do\n'
                       '  args <- getArgs\n  case args of\n    ("describe":_) -> putStrLn {describe_hs}\n'
                       '    _ -> putStrLn ("{slug} ran with: " ++ unwords (drop 1 args))\n'),
}


def _settings_only() -> None:
    """Django's settings without the database (tool calls read their output cap there), with a
    one-shot command's log level (:func:`quiet_logs`)."""
    quiet_logs()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()


def load_tool(path: str) -> Any:
    """The bash tool at ``path``, described.

    Raises:
        CliError: exit code 5 when the file is not a tool or its ``describe`` fails.
    """
    from tools_app.bash.loading import BashToolLoadError, load_single_tool
    from tools_app.bash.protocol import DescribeError

    try:
        return load_single_tool(Path(path))
    except (BashToolLoadError, DescribeError) as error:
        raise CliError(str(error), EXIT_TOOL) from error


def payload_problems(tool: Any, payload: Any) -> list[str]:
    """``field: problem`` lines for a payload that the tool's JSON schema refuses (empty when valid)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(tool.parameters)
    problems = []
    for error in sorted(validator.iter_errors(payload), key=lambda e: list(e.path)):
        if error.validator == "required":
            missing = str(error.message).split("'")[1] if "'" in str(error.message) else "?"
            problems.append(f"{missing}: Required property missing")
        else:
            where = ".".join(str(p) for p in error.path) or "(payload)"
            problems.append(f"{where}: {error.message}")
    return problems


def run_tool(tool: Any, arguments: dict[str, Any], *, session_id: str, agent_slug: str) -> Any:
    """Run one call of ``tool`` outside any session (``tool-call``, ``replay-tool-call``)."""
    from tools_app.base import ToolContext

    _settings_only()
    context = ToolContext(session_id=session_id, conversation_id=session_id, turn_id=str(uuid.uuid4()),
                          agent_slug=agent_slug, tool_call_id=f"cli_{uuid.uuid4().hex[:8]}", timeout=None)
    return tool.call(arguments, context)


def _read_payload() -> Any:
    try:
        return json.loads(sys.stdin.read())
    except ValueError as error:
        raise CliError(f"Error: Invalid JSON payload from stdin: {error}") from error


def cmd_describe(args: argparse.Namespace) -> int:
    """This program as a bash tool: its ``describe`` JSON."""
    data = project_config().data
    print(json.dumps({
        "slug": args.self_describe_slug or data.get("selfDescribeSlug") or "self_call",
        "description": args.self_describe_description or data.get("selfDescribeDescription")
        or "calls oneself with a prompt",
        "args": [{"name": "prompt", "description": "the prompt to call the agent with", "type": "string",
                  "backing_type": "string", "arity": "single", "mode": "dashdashspace"}],
        "empty-result": {"tag": "AddMessage", "contents": "--no output--"},
    }))
    return 0


def cmd_describe_tool(args: argparse.Namespace) -> int:
    """Describe one tool script; ``--check-only`` only says whether it is valid."""
    tool = load_tool(args.tool_path)
    if args.check_only:
        print(f"✓ {args.tool_path}: valid tool ({tool.name})")
        return 0
    described = tool.openai_tool()["function"]
    print(json.dumps(described, indent=2 if args.format == "pretty" else None, ensure_ascii=False))
    return 0


def cmd_check_tool_call(args: argparse.Namespace) -> int:
    """Validate a JSON payload (stdin) against a tool's schema."""
    tool = load_tool(args.tool)
    problems = payload_problems(tool, _read_payload())
    if not problems:
        print("✓ Tool call payload is valid")
        return 0
    print(f"Tool call validation failed for '{args.tool} ({tool.name})' with {len(problems)} errors:")
    for number, problem in enumerate(problems, start=1):
        print(f"  {number}. {problem}")
    print("Please correct these issues and try again.")
    return 1


def cmd_tool_call(args: argparse.Namespace) -> int:
    """Call one tool of the first agent with the JSON object of stdin; the result as JSON."""
    from agentfiles.loader import AgentLoadError, load_agent_tree
    from agentfiles.parameters import AgentParameters
    from tools_app.toolset import ToolBuildError, build_toolset

    payload = _read_payload()
    if not isinstance(payload, dict):
        raise CliError("Error: Invalid JSON payload from stdin: not an object")
    files = agent_files(args, first_only=True)
    if not files:
        raise CliError("no agent file: give --agent-file", EXIT_AGENT)
    _settings_only()
    try:
        tree = load_agent_tree(files[0])
        agent = tree.root
        parameters = AgentParameters.load(agent.spec, base_dir=agent.base_dir, api_keys={})
        toolset = build_toolset(agent, parameters.resolve())
    except (AgentLoadError, ToolBuildError) as error:
        raise CliError(error.problems[0], EXIT_AGENT) from error
    tool = toolset.get(args.tool_name) or toolset.get(f"bash_{args.tool_name}")
    if tool is None:
        names = ", ".join(t.name for t in toolset.tools)
        raise CliError(f"no tool {args.tool_name!r} in {agent.spec.slug} (tools: {names})", EXIT_TOOL)
    result = run_tool(tool, payload, session_id=str(uuid.uuid4()), agent_slug=agent.spec.slug)
    print(json.dumps(result.response, ensure_ascii=False))
    return EXIT_TOOL if result.is_error else 0


def cmd_spec(args: argparse.Namespace) -> int:
    """The bash-tool protocol, in short."""
    sys.stdout.write(BASH_TOOLS_SPEC)
    return 0


def cmd_paths(args: argparse.Namespace) -> int:
    """Where the configuration, agent files, keys and sessions are."""
    from foundation.env import database_url

    config = project_config()
    files = [str(p) for p in (agent_files(args) if args.agent_file else discovered_agent_files(config))]
    keys = keys_file(args) or str(config.config_dir / SECRET_KEYS_NAME)
    database = database_url() if not args.db else args.db
    report: dict[str, Any] = {
        "configuration": {
            "configFile": str(config.path) if config.path else None,
            "configDirectory": str(config.config_dir),
            "defaultConfigDirectory": str(Path("~/.config/agents-exe").expanduser()),
        },
        "agents": files,
        "apiKeys": keys,
        "sessionStorage": {"database": database},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    conf = report["configuration"]
    print("Configuration:")
    print(f"  File: {conf['configFile'] or 'none'}")
    print(f"  Directory: {conf['configDirectory']}")
    print(f"  Default: {conf['defaultConfigDirectory']}")
    print()
    print("Agent Files:")
    for path in files:
        print(f"  - {path}")
    print()
    print("API Keys:")
    print(f"  {keys}")
    print()
    print("Session Storage:")
    print(f"  Database: {database}")
    return 0


def _agent_document(slug: str, model: str, url: str, key_id: str, flavor: str = "OpenAIv1") -> dict[str, Any]:
    return {
        "tag": "OpenAIAgentDescription",
        "contents": {
            "slug": slug, "apiKeyId": key_id, "flavor": flavor, "modelUrl": url, "modelName": model,
            "announce": f"a helpful assistant powered by {model}",
            "systemPrompt": [f"You are {slug}, a helpful AI assistant.",
                             "You provide clear, accurate, and concise responses.",
                             "When using tools, you explain your actions to the user."],
            "toolDirectory": "tools", "mcpServers": [], "builtinToolboxes": [],
        },
    }


#: ``new agent --preset``: flavor, endpoint, default model and key id.
PRESETS = {
    "openai": ("OpenAIv1", "https://api.openai.com/v1", "gpt-4-turbo-preview", "main-key"),
    "mistral": ("OpenAIv1", "https://api.mistral.ai/v1", "mistral-large-latest", "mistral-key"),
    "ollama": ("OpenAIv1", "http://localhost:11434/v1", "llama3.2", "ollama-key"),
    "kimi-k2.5": ("KimiV1", "https://api.moonshot.ai/v1", "kimi-k2.5", "kimi-key"),
}


def _write_new(path: Path, text: str, *, force: bool) -> None:
    if path.exists() and not force:
        raise CliError(f"{path} exists (use --force to overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _keys_document(path: Path) -> dict[str, Any]:
    from agentfiles.keys import ApiKeysError, load_api_keys

    if not path.exists():
        return {"keys": []}
    try:
        return {"keys": [{"id": k, "value": v} for k, v in load_api_keys(path).items()]}
    except ApiKeysError as error:
        raise CliError(str(error), 3) from error


def cmd_init(args: argparse.Namespace) -> int:
    """A sample agent file (the first ``--agent-file``, else ``agent.json``), its ``tools/`` and the
    keys file, each unless it exists."""
    target = Path(args.agent_file[0] if args.agent_file else "agent.json")
    if not target.exists():
        flavor, url, _, key_id = PRESETS["openai"]
        document = _agent_document("main-agent", "gpt-4-turbo", url, key_id, flavor)
        target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"Created {target}")
    (target.parent / "tools").mkdir(exist_ok=True)
    keys = project_config().config_dir / SECRET_KEYS_NAME
    if not keys.exists():
        keys.parent.mkdir(parents=True, exist_ok=True)
        keys.write_text(json.dumps({"keys": [{"id": "main-key", "value": KEY_PLACEHOLDER}]}, indent=2) + "\n")
        keys.chmod(0o600)
        print(f"Created {keys}")
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    """``new agent SLUG FILE [MODEL]`` or ``new tool SLUG LANGUAGE FILE``."""
    if args.kind == "agent":
        flavor, url, default_model, key_id = PRESETS[args.preset]
        document = _agent_document(args.slug, args.model or default_model, url, key_id, flavor)
        path = Path(args.file)
        _write_new(path, json.dumps(document, indent=2) + "\n", force=args.force)
        print(f"Created agent {args.slug} in {path}")
        config = project_config()
        loaded = {p.resolve() for p in discovered_agent_files(config)} if config.path else set()
        if config.path is None:
            print(f"No {CONFIG_FILE_NAME} found: pass --agent-file {path}")
        elif path.resolve() not in loaded:
            print(f'Not loaded by {config.path}: add "{path}" to its agentsFiles')
        return 0
    language = {"nodejs": "node"}.get(args.language, args.language)
    if language not in _TOOL_TEMPLATES:
        raise CliError(f"unknown language {args.language!r} (bash, python, haskell, node)", 2)
    suffix, template = _TOOL_TEMPLATES[language]
    describe = {"slug": args.slug, "description": f"the {args.slug} tool", "args": [],
                "empty-result": {"tag": "AddMessage", "contents": "--no output--"}}
    text = template.format(slug=args.slug, describe=json.dumps(describe), describe_py=repr(describe),
                           describe_hs=json.dumps(json.dumps(describe)))
    path = Path(args.file if args.file.endswith(suffix) else args.file + suffix)
    _write_new(path, text, force=args.force)
    path.chmod(0o755)
    print(f"Created tool {args.slug} in {path}")
    print(f"Next: agents-exe describe-tool {path}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """``config api-key list`` (ids only, never values) and ``config api-key create NAME``."""
    path = project_config().config_dir / SECRET_KEYS_NAME
    document = _keys_document(path)
    ids = [entry["id"] for entry in document["keys"]]
    if args.action == "list":
        if not ids:
            print("No API keys configured")
            return 0
        print("Configured API keys:")
        for key_id in ids:
            print(f"  - {key_id}")
        return 0
    if not args.name:
        raise CliError("config api-key create needs a NAME", 2)
    if args.name in ids and not args.force:
        raise CliError(f"API key {args.name!r} exists (use --force to reset it)")
    entries = [e for e in document["keys"] if e["id"] != args.name]
    entries.append({"id": args.name, "value": KEY_PLACEHOLDER})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"keys": entries}, indent=2) + "\n", encoding="utf-8")
    path.chmod(0o600)
    print(f"Created API key: {args.name}")
    print(f"Please edit {path} and set your actual API key value")
    return 0


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the small commands to the subparsers ``sub`` (``parent``: the global options)."""
    describe = sub.add_parser("describe", parents=[parent], help="this program as a bash tool")
    describe.add_argument("--self-describe-slug", default=None)
    describe.add_argument("--self-describe-description", default=None)
    describe.set_defaults(func=cmd_describe)

    tool = sub.add_parser("describe-tool", parents=[parent], help="validate and describe a tool script")
    tool.add_argument("tool_path", metavar="TOOL_PATH")
    tool.add_argument("-f", "--format", choices=("json", "pretty"), default="json")
    tool.add_argument("--check-only", action="store_true")
    tool.set_defaults(func=cmd_describe_tool)

    check_call = sub.add_parser("check-tool-call", parents=[parent], help="validate a payload (stdin) for a tool")
    check_call.add_argument("-t", "--tool", required=True, metavar="TOOLPATH")
    check_call.set_defaults(func=cmd_check_tool_call)

    call = sub.add_parser("tool-call", parents=[parent], help="call a tool of the agent with JSON from stdin")
    call.add_argument("tool_name", metavar="TOOLNAME")
    call.set_defaults(func=cmd_tool_call)

    spec = sub.add_parser("spec", parents=[parent], help="print a protocol's description")
    spec.add_argument("topic", choices=("bash-tools",))
    spec.set_defaults(func=cmd_spec)

    paths = sub.add_parser("paths", parents=[parent], help="where the configuration, agents and keys are")
    paths.add_argument("--json", action="store_true")
    paths.set_defaults(func=cmd_paths)

    init = sub.add_parser("init", parents=[parent], help="a sample agent file, tools/ and the keys file")
    init.set_defaults(func=cmd_init)

    new = sub.add_parser("new", parents=[parent], help="scaffold an agent or a tool")
    new.add_argument("-f", "--force", action="store_true")
    kinds = new.add_subparsers(dest="kind", required=True)
    agent = kinds.add_parser("agent", parents=[parent])
    agent.add_argument("slug", metavar="SLUG")
    agent.add_argument("file", metavar="FILE")
    agent.add_argument("model", nargs="?", default=None, metavar="MODEL")
    agent.add_argument("--preset", "-p", choices=sorted(PRESETS), default="openai")
    agent.add_argument("-f", "--force", action="store_true", default=argparse.SUPPRESS)
    new_tool = kinds.add_parser("tool", parents=[parent])
    new_tool.add_argument("slug", metavar="SLUG")
    new_tool.add_argument("language", metavar="LANGUAGE")
    new_tool.add_argument("file", metavar="FILE")
    new_tool.add_argument("-f", "--force", action="store_true", default=argparse.SUPPRESS)
    new.set_defaults(func=cmd_new)

    config = sub.add_parser("config", parents=[parent], help="the config directory's API keys")
    config.add_argument("-f", "--force", action="store_true")
    groups = config.add_subparsers(dest="group", required=True)
    api_key = groups.add_parser("api-key", parents=[parent])
    api_key.add_argument("action", choices=("list", "create"))
    api_key.add_argument("name", nargs="?", default=None, metavar="NAME")
    api_key.add_argument("-f", "--force", action="store_true", default=argparse.SUPPRESS)
    config.set_defaults(func=cmd_config)
