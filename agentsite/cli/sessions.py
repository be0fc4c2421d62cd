"""``agents session ...``: durable sessions of the configured database from the command line
(docs/cli.md §4): start, step, pause, resume, pending, complete, run-isolated, import and export.

These are the sessions the HTTP API shows: the commands call the same services.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from agentsite.cli.common import (
    EXIT_AGENT,
    CliError,
    agent_files,
    open_database,
    open_store,
    project_config,
)
from agentsite.cli.prompt import add_prompt_flags, assemble_prompt, read_media
from agentsite.cli.run import read_session_text, the_agent_slug, wait_until_stopped


def _session_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise CliError(f"{value!r} is not a session id (a UUID)") from None


def print_state(session: Any) -> int:
    """The session's state: ``session-id:``, ``status:``, then its deferred calls' tokens, its
    answer, or its error (exit 1 for a failed session)."""
    from agentfiles import document as doc

    print(f"session-id: {session.pk}")
    print(f"status: {session.status}")
    for call in session.pending_calls:
        print(f"continuation-token: {call['continuation_token']} {call['tool']} {call['call'].get('id')}")
    if session.status == "failed":
        print(f"error: {session.status_detail}")
        return 1
    head = doc.head(session.document) or {}
    if head.get("tag") == "LlmTurn":
        calls = doc.tool_calls_of(head["contents"])
        for call in calls:
            print(f"tool-call: {call.get('function', {}).get('name')} {call.get('id')}")
        if not calls:
            print()
            print(doc.response_text(head["contents"]))
    elif head.get("tag") == "UserTurn":
        print("waiting for: the model")
    return 0


def _api(call: Any, **kwargs: Any) -> Any:
    from foundation.errors import ApiError

    try:
        return call(**kwargs)
    except ApiError as error:
        raise CliError(error.message) from error


def cmd_start(args: argparse.Namespace) -> int:
    """A new session from the prompt; no run unless ``--step`` (one step)."""
    prompt = assemble_prompt(args, project_config())
    media = read_media(args.media)
    open_database(args, "session start", first_only=True)
    from agentfiles import document as doc
    from sessions_app.models import Session
    from sessions_app.services import sessions

    session = _api(sessions.session_create, agent_slug=the_agent_slug(), prompt=prompt,
                   media=doc.media_from_api(media), run=Session.RunMode.STEP if args.step else Session.NO_RUN)
    return print_state(wait_until_stopped(session.pk, progress=False))


def _advance(args: argparse.Namespace, *, step: bool) -> int:
    open_database(args, f"session {args.session_command}")
    from sessions_app.models import Session
    from sessions_app.services import sessions

    mode = Session.RunMode.STEP if step else Session.RunMode.UNTIL_BLOCKED
    session = _api(sessions.session_resume, session_id=_session_id(args.session_id), mode=mode)
    return print_state(wait_until_stopped(session.pk, progress=sys.stderr.isatty()))


def cmd_step(args: argparse.Namespace) -> int:
    """Exactly one step (``step``, and ``pause``, its older name), stored; then the state."""
    return _advance(args, step=True)


def cmd_resume(args: argparse.Namespace) -> int:
    """Run until the answer or the next deferred call; then the state."""
    return _advance(args, step=False)


def cmd_pending(args: argparse.Namespace) -> int:
    """The deferred calls waiting for a result: one block per call, or ``{"calls": [...]}`` with
    ``--json`` (the body of ``GET /v1/sessions/:id/pending``)."""
    open_store(args, "session pending")
    from sessions_app import selectors

    session = _api(selectors.session_get, session_id=_session_id(args.session_id))
    calls = session.pending_calls
    if args.json:
        print(json.dumps({"calls": calls}, ensure_ascii=False))
        return 0
    if not calls:
        print("no pending calls")
    for call in calls:
        print(f"- tool: {call['tool']}")
        print(f"  tool-call-id: {call['call'].get('id')}")
        print(f"  continuation-token: {call['continuation_token']}")
        print(f"  disposition: {call['disposition'].get('tag')}")
        print(f"  arguments: {call['call'].get('function', {}).get('arguments')}")
    return 0


def cmd_complete(args: argparse.Namespace) -> int:
    """Give a deferred call its result (the file: tool-result JSON, else its text); no resume."""
    try:
        text = Path(args.result_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {args.result_file}: {error}") from error
    try:
        result: Any = json.loads(text)
        if not (isinstance(result, dict) and "type" in result):
            result = text
    except ValueError:
        result = text
    try:
        token = uuid.UUID(args.token)
    except ValueError:
        raise CliError(f"{args.token!r} is not a continuation token (a UUID)") from None
    open_store(args, "session complete")
    from sessions_app.services import continuations

    session = _api(continuations.continuation_complete, token=token, result=result, resume=False)
    left = len(session.pending_calls)
    print(f"session-id: {session.pk}")
    print(f"turn: still partial ({left} deferred call(s) left)" if left else "turn: complete")
    return 0


def cmd_run_isolated(args: argparse.Namespace) -> int:
    """Report the deferred ``runIsolated`` calls: no isolated runner is configured on the command
    line (docs/decisions.md), so they wait for an external worker like any deferred call."""
    open_store(args, "session run-isolated")
    from sessions_app import selectors

    session = _api(selectors.session_get, session_id=_session_id(args.session_id))
    isolated = [c for c in session.pending_calls if c["disposition"].get("tag") == "runIsolated"]
    print(f"{len(isolated)} runIsolated call(s) found; no isolated runner is configured")
    for call in isolated:
        print(f"continuation-token: {call['continuation_token']} {call['tool']} {call['call'].get('id')}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Store a session file as a session of the database; print its id."""
    document, layout = read_session_text(Path(args.file))
    slug = args.agent
    if slug is None:
        from agentfiles.loader import AgentLoadError, load_agent_tree

        found = agent_files(args, first_only=True)
        if not found:
            raise CliError("give --agent SLUG (or an agent file): the agent the session runs with", EXIT_AGENT)
        try:
            slug = load_agent_tree(found[0]).root.spec.slug
        except AgentLoadError as error:
            raise CliError(error.problems[0], EXIT_AGENT) from error
    open_store(args, "session import")
    from agents_app.registry import AgentRegistry, set_registry
    from foundation.errors import ApiError, UnknownAgent
    from sessions_app.services import sessions

    # refused as POST /v1/sessions/import refuses it (unknown_agent): the agent must be one of
    # the agent files or a stored agent of this database (docs/cli.md §5.2)
    set_registry(AgentRegistry(_file_trees(args), {}))
    try:
        session = sessions.session_import(
            document=document, agent_slug=slug, owner=args.owner, layout=layout, require_agent=True
        )
    except UnknownAgent as error:
        raise CliError(f"{error.code}: {error.message}", EXIT_AGENT) from error
    except ApiError as error:
        raise CliError(error.message) from error
    print(session.pk)
    return 0


def _file_trees(args: argparse.Namespace) -> dict[str, Any]:
    """Root slug -> tree of every agent file the command sees (``--agent`` does not narrow them
    here: it names the session's agent, which may be a stored one); broken files are left out."""
    from agentfiles.loader import AgentLoadError, load_agent_tree

    trees: dict[str, Any] = {}
    for path in agent_files(argparse.Namespace(**{**vars(args), "agent": None})):
        try:
            tree = load_agent_tree(path)
        except AgentLoadError:
            continue
        trees.setdefault(tree.root.spec.slug, tree)
    return trees


def cmd_export(args: argparse.Namespace) -> int:
    """Write the session as an agents-exe session file to stdout (or ``--output``): the bytes of the
    file it was imported from while it has not changed (docs/sessions.md §1.12)."""
    open_store(args, "session export")
    from sessions_app import selectors

    session = _api(selectors.session_get, session_id=_session_id(args.session_id))
    data = session.session_file_text().encode("utf-8")
    if args.output:
        Path(args.output).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``session`` group to the subparsers ``sub`` (``parent``: the global options)."""
    group = sub.add_parser("session", parents=[parent], help="durable sessions of the database")
    commands = group.add_subparsers(dest="session_command", required=True)
    start = commands.add_parser("start", parents=[parent], help="a new session from a prompt (no run by default)")
    add_prompt_flags(start)
    start.add_argument("--step", action="store_true", help="run one step first")
    start.add_argument("--thinking", choices=("none", "stdout", "stderr"), default="none", help=argparse.SUPPRESS)
    start.set_defaults(func=cmd_start)
    for name, func, help_text in (
        ("step", cmd_step, "run exactly one step"),
        ("pause", cmd_step, "older name of step"),
        ("resume", cmd_resume, "run until the answer or the next deferred call"),
        ("pending", cmd_pending, "list the deferred calls waiting for a result"),
        ("run-isolated", cmd_run_isolated, "report the deferred runIsolated calls"),
        ("export", cmd_export, "write the session as an agents-exe session file"),
    ):
        command = commands.add_parser(name, parents=[parent], help=help_text)
        command.add_argument("session_id", metavar="SESSION_ID")
        command.set_defaults(func=func)
        if name == "pending":
            command.add_argument("--json", action="store_true", help='{"calls": [...]} as the HTTP API answers')
        if name == "export":
            command.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    complete = commands.add_parser("complete", parents=[parent], help="give a deferred call its result")
    complete.add_argument("token", metavar="TOKEN")
    complete.add_argument("result_file", metavar="RESULT_FILE")
    complete.set_defaults(func=cmd_complete)
    imported = commands.add_parser("import", parents=[parent], help="store a session file; prints the new id")
    imported.add_argument("file", metavar="FILE")
    imported.add_argument("--owner", default=None, help="its owner, when the server has authentication on")
    imported.set_defaults(func=cmd_import)
