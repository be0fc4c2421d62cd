"""The ``agents`` command line (also installed as ``agents-exe`` and ``agents-server``): the server's
processes, and the commands agents-exe's scripts call (docs/cli.md).

The global options (agent files, keys, database, parameters) are accepted before the command's
name, as agents-exe's scripts write them, and after it. A failing command prints one line on
stderr (never a traceback) and exits with the code of docs/cli.md §1.3.
"""

from __future__ import annotations

import argparse
import os
import sys

from agentsite.cli import check, files, run, server, sessions, tooling
from agentsite.cli.common import EXIT_ERROR, CliError, add_global_flags

#: The exit status of a command whose reader closed its stdout (128 + SIGPIPE, as a shell reports
#: a program that signal stopped): docs/cli.md §1.3.
EXIT_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agents`` command."""
    parser = argparse.ArgumentParser(prog="agents", description="A durable LLM-agent server.")
    add_global_flags(parser, suppress=False)
    parent = argparse.ArgumentParser(add_help=False)
    add_global_flags(parent, suppress=True)
    sub = parser.add_subparsers(dest="command", required=True)
    server.add_commands(sub, parent)
    check.add_commands(sub, parent)
    run.add_commands(sub, parent)
    sessions.add_commands(sub, parent)
    files.add_commands(sub, parent)
    tooling.add_commands(sub, parent)
    manage = sub.add_parser("manage", help="run a Django management command (e.g. createsuperuser)")
    manage.add_argument("rest", nargs=argparse.REMAINDER)
    manage.set_defaults(func=None)
    return parser


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}" if not isinstance(error, OSError) else text


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``agents`` console scripts; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "manage":
        from agentsite.cli.common import setup_django

        setup_django("manage")
        from django.core.management import execute_from_command_line

        execute_from_command_line(["agents manage", *args.rest])
        return 0
    try:
        code = int(args.func(args) or 0)
        # written out here, so that a reader gone away is seen below and not at exit
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # the reader closed the pipe (``agents describe | head -1``): it wants nothing more, and
        # stdout goes to /dev/null so that the flush at exit has nothing to complain about
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except CliError as error:
        print(str(error) if str(error).startswith("Error:") else f"agents {args.command}: {error}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        from django.db import DatabaseError

        if isinstance(error, DatabaseError):
            print(f"agents {args.command}: cannot use the database: {_one_line(error)}", file=sys.stderr)
        else:
            print(f"agents {args.command}: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
