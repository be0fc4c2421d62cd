"""``agents check``: validate the agent files and show what the model would see (docs/agents.md §5,
docs/cli.md §6.1)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from agentsite.cli.common import (
    EXIT_AGENT,
    CliError,
    agent_files,
    apply_endpoint_flags,
    db_url,
    install_params_or_exit,
    keys_file,
)

TOOL_FORMATS = ("none", "list", "agents-exe", "openai")


def cmd_check(args: argparse.Namespace) -> int:
    """Validate agent files: one line per problem on stderr, exit 1 when any (docs/agents.md §5).

    On stdout, ``<slug>: <announce> (<n> tools)`` per root, ``<n>`` counting the tools the server
    offers the root's model (its helpers and ``describe_agent``/``derive_agent`` included), then
    one indented line per path an agent of its tree names, saying where it was found
    (docs/agents.md §3).

    ``--tools`` adds the root's tools after its line, as the model sees them (``openai``: the
    ``tools`` array of the chat-completions request), and ``--show-config`` prints each root
    agent file before its line (docs/cli.md §6.1), a ``.tramaj`` template as the JSON it evaluates
    to (docs/agents.md §11.5).

    A tool whose ``describe`` fails is skipped with a warning, as ``serve`` skips it; each warning
    is printed once, however many files reach the agent that has it. Two files with the same root
    slug are a problem. Each MCP server is started, and the tools it lists are printed, one line
    per server. Each parameter gets a line saying how it resolves in this process (``set``,
    ``pinned``, ``default:<Source>``, ``unbound``), never its value. No database is opened: the
    agents are the files' only.
    """
    install_params_or_exit(args, "check")
    # a bad --model-url or --api-key-id entry stops check as it stops serve (docs/cli.md §2.3.2)
    apply_endpoint_flags(args)
    _setup_django(args)
    from agentfiles.keys import ApiKeysError, load_api_keys
    from agentfiles.loader import AgentLoadError, load_agent_tree
    from agentfiles.parameters import AgentParameters, process_values, undeclared_process_names
    from agents_app.registry import AgentRegistry, set_registry
    from agents_app.runtime import reset_runtime_agents, runtime_agent
    from foundation.errors import ApiError
    from tools_app.mcp.toolbox import McpToolbox
    from tools_app.toolset import ToolBuildError, ToolSet, build_toolset

    problems: list[str] = []
    warned: set[str] = set()

    def warn(line: str) -> None:
        if line not in warned:
            warned.add(line)
            print(f"warning: {line}", file=sys.stderr)

    try:
        api_keys = load_api_keys(keys_file(args))
    except ApiKeysError as error:
        problems.append(str(error))
        api_keys = {}
    roots: dict[str, str] = {}
    specs = []
    files = agent_files(args)
    if not files:
        raise CliError("no agent file: give --agent-file, or write an agents-exe.cfg.json", EXIT_AGENT)
    registry = AgentRegistry({}, api_keys, files_only=True)
    set_registry(registry)
    reset_runtime_agents()
    for path in files:
        try:
            tree = load_agent_tree(path)
        except AgentLoadError as error:
            problems.extend(error.problems)
            continue
        slug = tree.root.spec.slug
        if slug in roots:
            problems.append(f"{tree.root.path}: duplicate root agent slug {slug!r} (also in {roots[slug]})")
            continue
        roots[slug] = str(tree.root.path)
        registry.trees[slug] = tree
        if args.show_config and tree.root.path is not None:
            # a template is shown as the JSON it evaluated to (docs/agents.md §11.5)
            shown = tree.root.template_output
            if shown is None:
                shown = json.loads(Path(tree.root.path).read_text(encoding="utf-8-sig"))
            print(json.dumps(shown, indent=2))
        for warning in tree.warnings:
            warn(warning)
        for helper_slug, agent in tree.agents.items():
            specs.append(agent.spec)
            parameters = AgentParameters.load(agent.spec, base_dir=agent.base_dir, api_keys=api_keys)
            problems.extend(f"{agent.path}: {helper_slug}: {problem}" for problem in parameters.process_problems())
            toolset: ToolSet
            try:
                # the root as a run builds it (agents_app.runtime): helpers and their tools included
                toolset = (
                    runtime_agent(slug).toolset
                    if helper_slug == slug
                    else build_toolset(agent, parameters.resolve(), api_keys)
                )
            except ToolBuildError as error:
                problems.extend(f"{agent.path}: {helper_slug}: {problem}" for problem in error.problems)
                continue
            except ApiError as error:
                problems.append(f"{agent.path}: {helper_slug}: {error.message}")
                continue
            for warning in toolset.warnings:
                warn(f"{agent.path}: {helper_slug}: {warning}")
            for notice in toolset.notices:
                warn(f"{agent.path}: {helper_slug}: {notice}")
            if helper_slug == slug:
                print(f"{slug}: {agent.spec.announce} ({len(toolset.names())} tools)")
                if args.tools != "none":
                    _print_tools(args.tools, slug)
            if toolset.names():
                print(f"  {helper_slug}: tools: {', '.join(toolset.names())}")
            for box in toolset.live:
                if isinstance(box, McpToolbox):
                    names = ", ".join(tool.name for tool in box.snapshot()[1]) or "no tools"
                    print(f"{helper_slug}: MCP server {box.config.name}: {names}")
            for name, decl in parameters.decls.items():
                traits = ", ".join([decl.scope, *(["secret"] if decl.secret else []),
                                    "required" if decl.required else "optional"])
                print(f"{helper_slug}: parameter {name} ({traits}): {parameters.resolution(name)}")
        # where each relative path was found (docs/agents.md §3), indented under the root's line
        for helper_slug, agent in tree.agents.items():
            for where, found in agent.paths:
                print(f"  {helper_slug}: {where} '{found.named}': {found.base} ({found.path})")
    problems.extend(
        f"--set/--pin {name}: no loaded agent declares this parameter"
        for name in undeclared_process_names(specs, process_values())
    )
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def _setup_django(args: argparse.Namespace) -> None:
    """Django for building the agents as the server does, on ``--db`` if given; ``check`` reads
    and writes no database, so nothing is created (no database file, no secret key file)."""
    if args.db:
        os.environ["DATABASE_URL"] = db_url(args.db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()


def _print_tools(mode: str, slug: str) -> None:
    """The root's tools in one of the ``--tools`` formats, as a session's run offers them
    (``agents_app.runtime``), helpers' tools included."""
    from agents_app.runtime import runtime_agent

    agent = runtime_agent(slug)
    tools = agent.openai_tools(agent.resolve_params())
    if mode == "list":
        print()
        print("**Tools:**")
        for tool in tools:
            print(f"- **{tool['function']['name']}**: {tool['function']['description']}")
        print()
        return
    if mode == "openai":
        summary, shown = "OpenAI LLM tool representation", json.dumps(tools, indent=2, ensure_ascii=False)
    else:
        summary = "agents-exe tool representation"
        shown = "\n".join(
            json.dumps(
                {
                    "name": entry["contents"]["name"],
                    "description": entry["contents"]["description"],
                    "paramProperties": entry["contents"]["properties"],
                },
                indent=2,
                ensure_ascii=False,
            )
            for entry in agent.system_tools(agent.resolve_params())
        )
    print("<details>")
    print(f"<summary>{summary}</summary>")
    print()
    print("```json")
    print(shown)
    print("```")
    print("</details>")


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add ``check`` to the subparsers ``sub`` (``parent``: the global options)."""
    check = sub.add_parser("check", parents=[parent], help="validate agent files")
    check.add_argument("--tools", choices=TOOL_FORMATS, default="none", help="show each root agent's tools")
    check.add_argument("--show-config", action="store_true", help="print each agent file before its line")
    check.set_defaults(func=cmd_check)
