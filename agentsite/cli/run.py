"""``agents run`` and ``agents echo-prompt``: one prompt, the final answer on stdout (docs/cli.md §3).

``run`` is a client of the same services the HTTP API calls: it creates (or continues) a session
of the configured database, lets the run go on in this process's embedded worker (or in the
Celery workers, scaled out), waits for it to stop, and prints what it stopped on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from agentfiles.session_text import AGENTS_EXE, FileLayout, parse_session_text, session_text
from agentsite.cli.common import EXIT_AGENT, CliError, open_database, project_config
from agentsite.cli.prompt import add_prompt_flags, assemble_prompt, read_media

#: Seconds between two progress lines' checks when stderr is a terminal.
PROGRESS_EVERY_SECONDS = 0.5
#: Seconds between two looks at the background calls a stopped run left going.
SETTLE_POLL_SECONDS = 0.2
#: The ``reason`` of the paused report.
PAUSED_REASON = "waiting for deferred tool calls"


def the_agent_slug() -> str:
    """The slug of the first loaded root agent file (``run`` and ``session start`` use it).

    Raises:
        CliError: exit code 4 when no agent file was found.
    """
    from agents_app.registry import get_registry

    slugs = list(get_registry().trees)
    if not slugs:
        raise CliError("no agent file: give --agent-file, or write an agents-exe.cfg.json", EXIT_AGENT)
    return slugs[0]


def wait_until_stopped(session_id: uuid.UUID, *, progress: bool) -> Any:
    """Wait for the session's run to stop; with ``progress``, one line on stderr per new turn."""
    from sessions_app import selectors

    seen = -1
    while True:
        session = selectors.wait_for_run(session_id, PROGRESS_EVERY_SECONDS if progress else 600.0)
        if progress:
            turns = session.document.get("turns") or []
            if len(turns) != seen:
                seen = len(turns)
                head = turns[0] if turns else {}
                names = [c.get("function", {}).get("name") for c in (head.get("contents") or {}).get("llmToolCalls")
                         or []] if head.get("tag") == "LlmTurn" else []
                detail = f" calling {', '.join(str(n) for n in names)}" if names else ""
                print(f"[{session.status}] turn {seen}: {head.get('tag', '-')}{detail}", file=sys.stderr)
        if session.status != "running":
            return session


def wait_until_settled(session_id: uuid.UUID, worker: Any, *, progress: bool) -> Any:
    """Wait for the run to stop, then for what goes on after it, until nothing is left: the
    session's background calls (a detached call outlives the run that started it, docs/sessions.md
    §4.6) and the runs their results start (docs/cli.md §3.1).

    Args:
        session_id: the session.
        worker: this process's embedded worker, or ``None`` scaled out. Its being idle closes the
            moment between a call's end and the mail that wakes the session: the thread that
            records the end posts the mail before it is done.
        progress: one line on stderr per new turn, and while calls go on.
    Returns:
        The session, read once nothing runs for it any more.
    """
    from sessions_app import selectors

    told = None
    while True:
        wait_until_stopped(session_id, progress=progress)
        # in this order: a call that has ended has woken its session already (or its thread is busy)
        calls = selectors.background_calls_live(session_id)
        if not calls and (worker is None or worker.idle()) and selectors.session_status(session_id) != "running":
            return selectors.session_get(session_id)
        if progress and calls and calls != told:
            print(f"waiting for {calls} background call{'s' if calls > 1 else ''}", file=sys.stderr)
        told = calls
        time.sleep(SETTLE_POLL_SECONDS)


def paused_report(session: Any) -> dict[str, Any]:
    """The report ``run`` prints when the session waits on deferred calls (docs/cli.md §3.1):
    ``tool_call_id`` is the model's id of the call, as agents-exe prints it."""
    return {
        "status": "paused",
        "reason": PAUSED_REASON,
        "session_id": str(session.pk),
        "deferred_calls": [
            {
                "tool": call["tool"],
                "tool_call_id": call["call"].get("id"),
                "continuation_token": call["continuation_token"],
            }
            for call in session.pending_calls
        ],
    }


def write_session_file(path: Path, document: dict[str, Any], layout: FileLayout = AGENTS_EXE) -> None:
    """Write a session file atomically (a temporary file renamed over it), as agents-exe writes it
    (``agentfiles.session_text``: compact by default, or the layout of the file it continues)."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    temporary.write_bytes(session_text(document, layout).encode("utf-8"))
    temporary.replace(path)


def read_session_file(path: Path) -> dict[str, Any]:
    """A session file's JSON object.

    Raises:
        CliError: the file cannot be read or is not a JSON object.
    """
    return read_session_text(path)[0]


def read_session_text(path: Path) -> tuple[dict[str, Any], FileLayout]:
    """A session file's JSON object and how its text is laid out (docs/sessions.md §1.12).

    Raises:
        CliError: the file cannot be read or is not a JSON object.
    """
    try:
        document, layout = parse_session_text(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError) as error:
        raise CliError(f"{path}: {error}") from error
    if not isinstance(document, dict):
        raise CliError(f"{path}: not a session document (a JSON object)")
    return document, layout


def cmd_run(args: argparse.Namespace) -> int:
    """Run the prompt to its end: the final answer and a newline on stdout, and nothing else
    (``--thinking stdout`` adds the reasoning before it); the paused report when the run stops on
    deferred calls; exit 1 with the error on stderr when it fails (docs/cli.md §3.1)."""
    prompt = assemble_prompt(args, project_config())
    media = read_media(args.media)
    session_file = Path(args.session_file) if args.session_file else None
    existing, layout = (
        read_session_text(session_file) if session_file is not None and session_file.exists() else (None, AGENTS_EXE)
    )
    worker = open_database(args, "run", first_only=True)
    from agentfiles import document as doc
    from foundation.errors import ApiError
    from sessions_app.models import Session
    from sessions_app.services import sessions

    slug = the_agent_slug()
    mode = Session.RunMode.UNTIL_BLOCKED
    try:
        if existing is not None:
            session = sessions.session_from_file(document=existing, agent_slug=slug, layout=layout)
            session = sessions.message_post(
                session_id=session.pk, prompt=prompt, media=doc.media_from_api(media), run=mode
            )
        else:
            session = sessions.session_create(
                agent_slug=slug, prompt=prompt, media=doc.media_from_api(media), run=mode
            )
    except ApiError as error:
        raise CliError(error.message) from error
    session = wait_until_settled(session.pk, worker, progress=sys.stderr.isatty())
    document = session.document
    if session_file is not None:
        write_session_file(session_file, document, layout)
    if session.status == "failed":
        raise CliError(f"the run failed: {session.status_detail}")
    if session.pending_calls:
        print(json.dumps(paused_report(session)))
        return 0
    head = doc.head(document) or {}
    if head.get("tag") != "LlmTurn":
        raise CliError(f"the run stopped without an answer (session {session.pk} is {session.status})")
    response = head["contents"].get("llmResponse")
    thinking = response.get("responseThinking") if isinstance(response, dict) else None
    if thinking and args.thinking != "none":
        print(thinking, file=sys.stdout if args.thinking == "stdout" else sys.stderr)
    print(doc.response_text(head["contents"]))
    return 0


def cmd_echo_prompt(args: argparse.Namespace) -> int:
    """Print the prompt ``run`` would send, and call nothing (docs/cli.md §3.2)."""
    sys.stdout.write(assemble_prompt(args, project_config()))
    return 0


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add ``run`` and ``echo-prompt`` to the subparsers ``sub`` (``parent``: the global options)."""
    run = sub.add_parser("run", parents=[parent], help="run a prompt; the final answer on stdout")
    add_prompt_flags(run)
    run.add_argument("--session-file", metavar="FILE", help="continue this agents-exe session file, and write it back")
    run.add_argument("--thinking", choices=("none", "stdout", "stderr"), default="none",
                     help="where the reasoning of the final answer goes")
    run.set_defaults(func=cmd_run)

    echo = sub.add_parser("echo-prompt", parents=[parent], help="print the prompt run would send")
    add_prompt_flags(echo, media=False)
    echo.add_argument("--session-file", metavar="FILE", help="the input of a file-mode alias")
    echo.set_defaults(func=cmd_echo_prompt)
