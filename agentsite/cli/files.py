"""Commands on session files, no database needed: ``session-print``, ``list-tool-calls`` and
``replay-tool-call`` (docs/cli.md §5)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agentsite.cli.common import EXIT_TOOL, CliError
from agentsite.cli.run import read_session_file
from sessions_app.markdown import call_arguments


def cmd_session_print(args: argparse.Namespace) -> int:
    """The session file as markdown on stdout."""
    from sessions_app.markdown import PrintOptions, render_markdown

    if args.n_turns is not None and args.n_turns < 0:
        raise CliError("--n-turns takes a number of turns (0 or more)")
    options = PrintOptions(
        tool_results=args.show_tool_call_results,
        tool_arguments=args.show_tool_call_arguments,
        n_turns=args.n_turns,
        repeat_system_prompt=args.repeat_system_prompt,
        repeat_tools=args.repeat_tools,
        antichronological=args.antichronological,
        funny_stamp=not args.no_funny_stamp,
    )
    document = read_session_file(Path(args.session_file))
    try:
        sys.stdout.write(render_markdown(document, options))
    except (TypeError, AttributeError, KeyError) as error:
        raise CliError(f"{args.session_file}: not a session document ({error})") from error
    return 0


def recorded_calls(document: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """Every tool call the model made, oldest first, with the number (1-based, in time order) of
    the turn that made it."""
    from agentfiles.document import tool_calls_of

    turns = list(reversed(document.get("turns") or []))
    return [
        (number, call)
        for number, turn in enumerate(turns, start=1)
        if turn.get("tag") == "LlmTurn"
        for call in tool_calls_of(turn.get("contents") or {})
    ]


def cmd_list_tool_calls(args: argparse.Namespace) -> int:
    """The tool calls of a session file (indices from 0, across the session)."""
    calls = recorded_calls(read_session_file(Path(args.session_file)))
    if args.format == "json":
        print(json.dumps([
            {"index": i, "turn": turn, "id": call.get("id"), "name": (call.get("function") or {}).get("name"),
             "arguments": call_arguments(call)}
            for i, (turn, call) in enumerate(calls)
        ], ensure_ascii=False))
        return 0
    if args.format == "brief":
        for i, (_, call) in enumerate(calls):
            print(f"{i}\t{(call.get('function') or {}).get('name')}\t{json.dumps(call_arguments(call))}")
        return 0
    print(f"Found {len(calls)} tool call(s):")
    for i, (turn, call) in enumerate(calls):
        print()
        print(f"[{i}] {(call.get('function') or {}).get('name')}")
        print(f"  Turn: {turn}")
        print("  Arguments: ")
        print(f"    {json.dumps(call_arguments(call), ensure_ascii=False)}")
    print()
    print("To replay a tool call:")
    print(f"  agents-exe replay-tool-call --session {args.session_file} --tool-call <index> --tool <tool-path>")
    return 0


def cmd_replay_tool_call(args: argparse.Namespace) -> int:
    """Check a recorded call's arguments against a bash tool's current schema, then run it."""
    from agentsite.cli.tooling import load_tool, payload_problems, run_tool

    document = read_session_file(Path(args.session))
    calls = recorded_calls(document)
    if not 0 <= args.tool_call < len(calls):
        raise CliError(f"--tool-call {args.tool_call}: the session has {len(calls)} tool call(s) (0-based)")
    _, call = calls[args.tool_call]
    arguments = call_arguments(call)
    tool = load_tool(args.tool)
    problems = payload_problems(tool, arguments)
    if problems:
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        raise CliError(f"Tool call validation failed for {tool.name}", EXIT_TOOL)
    if not args.raw:
        print("✓ Tool call validation passed")
        print(f"Tool: {tool.name}")
        print(f"Arguments: {json.dumps(arguments, ensure_ascii=False)}")
    if args.validate_only:
        return 0
    if not args.raw:
        print("Executing tool...")
        print("=== Tool Output ===")
    result = run_tool(tool, arguments, session_id=str(document.get("sessionId")), agent_slug="replay")
    response = result.response
    print(response if isinstance(response, str) else json.dumps(response, ensure_ascii=False))
    if not args.raw:
        print("===================")
    return EXIT_TOOL if result.is_error else 0


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the session-file commands to the subparsers ``sub`` (``parent``: the global options)."""
    printer = sub.add_parser("session-print", parents=[parent], help="a session file as markdown")
    printer.add_argument("session_file", metavar="SESSIONFILE")
    for flag in ("--show-tool-call-results", "--show-tool-call-arguments"):
        # a bare flag means "shown", as in agents-exe's README
        printer.add_argument(flag, nargs="?", const="shown", default="hidden", choices=("hidden", "shown", "elided"))
    printer.add_argument("--n-turns", type=int, default=None, metavar="N", help="only the first N turns")
    printer.add_argument("--repeat-system-prompt", action="store_true")
    printer.add_argument("--repeat-tools", action="store_true")
    printer.add_argument("--antichronological", action="store_true", help="newest turn first")
    printer.add_argument("--no-funny-stamp", action="store_true", help="no ASCII header")
    printer.set_defaults(func=cmd_session_print)

    lister = sub.add_parser("list-tool-calls", parents=[parent], help="the tool calls of a session file")
    lister.add_argument("session_file", metavar="SESSIONFILE")
    lister.add_argument("-f", "--format", choices=("human", "json", "brief"), default="human")
    lister.set_defaults(func=cmd_list_tool_calls)

    replay = sub.add_parser("replay-tool-call", parents=[parent], help="run a recorded tool call again")
    replay.add_argument("-s", "--session", required=True, metavar="FILE")
    replay.add_argument("-i", "--tool-call", type=int, required=True, metavar="INDEX")
    replay.add_argument("-t", "--tool", required=True, metavar="TOOLPATH")
    replay.add_argument("--validate-only", action="store_true")
    replay.add_argument("--raw", action="store_true")
    replay.set_defaults(func=cmd_replay_tool_call)
