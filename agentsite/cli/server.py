"""``agents serve``, ``agents worker``, ``agents mcp-server`` and ``agents mock-llm``: the long-running
processes (the docs/running.md §1)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from agentsite.cli.common import (
    add_owner_keys_flag,
    apply_agent_flags,
    install_params_or_exit,
    join_fleet_or_exit,
    load_agents_or_exit,
    setup_django,
)
from foundation.env import env

log = logging.getLogger("agentsite.cli")


def _recover(*, all_claimed: bool) -> None:
    """Startup recovery (docs/sessions.md §4.8): before the first request is accepted."""
    from sessions_app.services.recovery import free_stranded_helpers, recover_stale_runs

    recovered, resent = recover_stale_runs(all_claimed=all_claimed)
    freed = free_stranded_helpers(all_claimed=all_claimed)
    log.info(
        "sessions recovered",
        extra={
            "kind": "sessions.recovered",
            "count": len(recovered),
            "session_ids": recovered,
            "resent": resent,
            "helpers_freed": freed,
        },
    )


def _apply_auth_flags(args: argparse.Namespace) -> None:
    """Turn the authentication flags of ``serve`` into the environment variables the settings read."""
    if args.auth_tokens:
        os.environ["AGENTS_AUTH_TOKENS"] = str(Path(args.auth_tokens).resolve())
    if args.admin_owners:
        os.environ["AGENTS_ADMIN_OWNERS"] = ",".join(args.admin_owners)
    if args.cors_origin:
        os.environ["AGENTS_CORS_ORIGINS"] = ",".join(args.cors_origin)


def _apply_isolation_flag(args: argparse.Namespace, command: str) -> None:
    """``--isolate-tools docker:IMAGE | process:PATH`` into ``AGENTS_ISOLATE_TOOLS`` (a process
    path made absolute); exit 2 with one line on stderr for any other value."""
    if not args.isolate_tools:
        return
    from foundation.isolation import IsolationSpec

    try:
        spec = IsolationSpec.parse(args.isolate_tools)
    except ValueError as error:
        print(f"agents {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    value = f"process:{Path(spec.target).resolve()}" if spec.kind == "process" else args.isolate_tools
    os.environ["AGENTS_ISOLATE_TOOLS"] = value


def _apply_tool_env_flag(args: argparse.Namespace) -> None:
    """``--tool-env clean|strict`` into ``AGENTS_TOOL_ENV`` (docs/tools.md, "Tool environments");
    argparse refuses other values, the settings refuse another ``AGENTS_TOOL_ENV``."""
    if args.tool_env:
        os.environ["AGENTS_TOOL_ENV"] = args.tool_env


def _apply_stored_commands_flag(args: argparse.Namespace) -> None:
    """``--allow-stored-commands`` into ``AGENTS_ALLOW_STORED_COMMANDS`` (docs/cli.md)."""
    if args.allow_stored_commands:
        os.environ["AGENTS_ALLOW_STORED_COMMANDS"] = "true"


def _auth_config_or_exit() -> Any:
    """Check the authentication flags together (docs/api.md §10.9); exit 2 naming the problem."""
    from django.conf import settings

    from foundation.auth import AuthConfigError, auth_config

    try:
        config = auth_config()
    except AuthConfigError as error:
        print(f"agents serve: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    if settings.AGENTS["OWNER_API_KEYS"] and not config.enabled:
        print("agents serve: --owner-api-keys needs --auth-tokens", file=sys.stderr)
        raise SystemExit(2)
    known = {owner for _, owner in config.digests}
    for owner in sorted(config.admin_owners - known):
        log.warning("admin owner without a token", extra={"kind": "auth.unknown_admin_owner", "owner": owner})
    return config


def cmd_serve(args: argparse.Namespace) -> int:
    """Migrate, load the agents, start the embedded worker when configured, and serve HTTP."""
    install_params_or_exit(args, "serve")
    apply_agent_flags(args)
    _apply_auth_flags(args)
    if args.stream_tokens:
        os.environ["AGENTS_STREAM_TOKENS"] = "true"
    _apply_isolation_flag(args, "serve")
    _apply_tool_env_flag(args)
    _apply_stored_commands_flag(args)
    if args.no_ui:
        os.environ["AGENTS_NO_UI"] = "true"
    # the default allowed hosts follow the bound address
    os.environ["AGENTS_BIND"] = args.bind
    if args.socket:
        from agentsite.server import SocketPathInUse, clear_socket_path

        try:
            clear_socket_path(args.socket)
        except SocketPathInUse as error:
            print(f"agents serve: --socket {error}", file=sys.stderr)
            return 2
    setup_django("serve")
    if args.live_session_ttl is not None:
        # sessions live in the database here: there is no in-memory state to evict
        log.info("--live-session-ttl ignored", extra={"kind": "server.option_ignored", "option": "live-session-ttl"})
    from django.conf import settings

    from agents_app.registry import get_registry
    from agentsite.migrate import migrate
    from foundation.auth import describe_for_log

    auth = _auth_config_or_exit()
    migrate()
    load_agents_or_exit()
    join_fleet_or_exit()
    if settings.EMBEDDED_WORKER:
        from agentsite import embedded
        from sessions_app.dispatch import use_embedded_worker

        # first, so that the runs the recovery requests (resent, helpers resumed) go to it
        embedded.start(args.worker_concurrency, use_embedded_worker)
    else:
        from sessions_app.periodic import watch_recovery

        # the workers sweep runs; this server says so when none does
        watch_recovery()
    _recover(all_claimed=settings.EMBEDDED_WORKER)
    from agentsite.metrics import start_listener

    start_listener(shared_state=True)
    log.info(
        "server started",
        extra={
            "kind": "server.started",
            **describe_for_log(auth),
            "bind": args.bind,
            "port": args.port,
            "socket": args.socket,
            "db": settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1],
            "embedded_worker": settings.EMBEDDED_WORKER,
            "agents": [agent.spec.slug for agent in get_registry().roots()],
        },
    )
    from agentsite.server import serve

    serve(args.bind, args.port, args.shutdown_grace, args.socket)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a Celery worker that executes session runs (needs ``REDIS_URL``)."""
    install_params_or_exit(args, "worker")
    apply_agent_flags(args)
    if args.stream_tokens:
        os.environ["AGENTS_STREAM_TOKENS"] = "true"
    _apply_isolation_flag(args, "worker")
    _apply_tool_env_flag(args)
    _apply_stored_commands_flag(args)
    setup_django("worker")
    from django.conf import settings

    if not settings.REDIS_URL:
        print("agents worker: set REDIS_URL (the workers and the servers share the Redis broker)", file=sys.stderr)
        return 2
    from agentsite.migrate import migrate

    migrate()
    load_agents_or_exit()
    join_fleet_or_exit()
    from agentsite.celery import app
    from sessions_app.secrets import leave_fleet

    argv = [
        "worker",
        "--loglevel=WARNING",
        "--without-mingle",
        "--without-gossip",
        f"--concurrency={args.concurrency}",
        f"--pool={args.pool}",
    ]
    if args.beat:
        # every worker runs the periodic tasks now; the flag stays accepted for the commands
        # written when one worker had to be given it
        log.info("--beat ignored", extra={"kind": "worker.option_ignored", "option": "beat"})
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    _run_periodic_tasks_once_ready()
    from agentsite.metrics import start_listener

    start_listener(shared_state=False)
    log.info("worker started", extra={"kind": "worker.started", "concurrency": args.concurrency})
    app.worker_main(argv)
    leave_fleet()
    return 0


def _run_periodic_tasks_once_ready() -> None:
    """Run the periodic tasks (docs/sessions.md §4.9) in this worker from the moment Celery says
    it is ready (its pool started, so no pool process is forked with the tasks' thread) until it
    is told to stop."""
    from celery.signals import worker_ready, worker_shutting_down

    from sessions_app.periodic import PeriodicRunner

    periodic = PeriodicRunner()

    def ready(**_: Any) -> None:
        periodic.start()
        log.info("worker ready", extra={"kind": "worker.ready"})

    worker_ready.connect(ready, weak=False)
    worker_shutting_down.connect(lambda **_: periodic.stop(), weak=False)


def cmd_mcp_server(args: argparse.Namespace) -> int:
    """Serve the agent files as MCP tools over stdio (sessions_app/mcp/stdio.py); stdout is for
    JSON-RPC only, so every complaint goes to stderr, with exit status 2."""
    install_params_or_exit(args, "mcp-server")
    apply_agent_flags(args)
    if not env.str("AGENTS_AGENT_FILES", default=""):
        print("agents mcp-server: no agent definitions (give --agent-file or an agents-exe.cfg.json)", file=sys.stderr)
        return 2
    setup_django("mcp-server")
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0, stdout=sys.stderr)
    load_agents_or_exit()
    if settings.EMBEDDED_WORKER:
        from agentsite import embedded
        from sessions_app.dispatch import use_embedded_worker

        embedded.start(args.worker_concurrency, use_embedded_worker)
    from sessions_app.mcp.stdio import serve

    serve()
    return 0


def cmd_mock_llm(args: argparse.Namespace) -> int:
    """Serve a scripted OpenAI-compatible LLM (for the demo and the tests)."""
    from devtools.mockllm import serve_forever

    try:
        serve_forever(args.script, args.host, args.port)
    except (ValueError, OSError) as error:
        print(f"agents mock-llm: {error}", file=sys.stderr)
        return 2
    return 0


def tcp_port(value: str) -> int:
    """A ``--port`` value: an integer from 0 (any free port) to 65535.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse then exits 2 naming the option).
    """
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, not {port}")
    return port


def _add_isolation_flag(parser: argparse.ArgumentParser) -> None:
    """``--isolate-tools``, read by :func:`_apply_isolation_flag` (``serve`` and ``worker``)."""
    parser.add_argument(
        "--isolate-tools",
        metavar="docker:IMAGE|process:PATH",
        help="run bash and MCP tool calls in this worker, never in the server; env AGENTS_ISOLATE_TOOLS",
    )


def _add_tool_env_flag(parser: argparse.ArgumentParser) -> None:
    """``--tool-env``, read by :func:`_apply_tool_env_flag` (``serve`` and ``worker``)."""
    from foundation.toolenv import MODES

    parser.add_argument(
        "--tool-env",
        choices=MODES,
        default=None,
        help="what tool processes inherit: clean (the environment without the server's configuration,"
        " the default) or strict (PATH, HOME, LANG, LC_*, TZ, TMPDIR only); env AGENTS_TOOL_ENV",
    )


def _add_stored_commands_flag(parser: argparse.ArgumentParser) -> None:
    """``--allow-stored-commands``, read by :func:`_apply_stored_commands_flag` (``serve`` and ``worker``)."""
    parser.add_argument(
        "--allow-stored-commands",
        action="store_true",
        help="let stored agents name MCP executables, Command and EnvVar sources and ${VAR} (they run with this"
        " server's rights when the agent is loaded); env AGENTS_ALLOW_STORED_COMMANDS=true",
    )


def add_commands(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add ``serve``, ``worker``, ``mcp-server`` and ``mock-llm`` to the subparsers ``sub``; ``parent``
    holds the global options."""
    serve = sub.add_parser(
        "serve", parents=[parent], help="serve the HTTP API (embedded worker unless REDIS_URL is set)"
    )
    add_owner_keys_flag(serve)
    serve.add_argument("--bind", default=env.str("AGENTS_BIND", default="127.0.0.1"), help="env AGENTS_BIND")
    serve.add_argument("--port", type=tcp_port, default=env.int("AGENTS_PORT", default=8080), help="env AGENTS_PORT")
    serve.add_argument("--stream-tokens", action="store_true", help="env AGENTS_STREAM_TOKENS=true")
    _add_isolation_flag(serve)
    _add_tool_env_flag(serve)
    _add_stored_commands_flag(serve)
    serve.add_argument(
        "--shutdown-grace",
        type=float,
        default=env.float("AGENTS_SHUTDOWN_GRACE", default=10.0),
        help="seconds open requests get to finish on SIGTERM; env AGENTS_SHUTDOWN_GRACE",
    )
    serve.add_argument(
        "--worker-concurrency",
        type=int,
        default=env.int("AGENTS_WORKER_CONCURRENCY", default=4),
        help="runs at once in the embedded worker; env AGENTS_WORKER_CONCURRENCY",
    )
    serve.add_argument(
        "--auth-tokens", metavar="FILE", help="bearer tokens by owner; turns authentication on; env AGENTS_AUTH_TOKENS"
    )
    serve.add_argument(
        "--admin-owners",
        type=lambda value: [o.strip() for o in value.split(",") if o.strip()],
        metavar="OWNER,...",
        help="owners allowed scope=all streams and stored-agent edits (needs --auth-tokens); env AGENTS_ADMIN_OWNERS",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=None,
        metavar="ORIGIN",
        help="origin allowed cross-origin requests (repeatable; '*' only without --auth-tokens);"
        " env AGENTS_CORS_ORIGINS, comma-separated",
    )
    serve.add_argument(
        "--live-session-ttl",
        type=float,
        default=None,
        metavar="SECONDS",
        help="accepted for agents-exe's scripts and ignored: sessions live in the database",
    )
    serve.add_argument(
        "--socket",
        metavar="PATH",
        default=env.str("AGENTS_SOCKET", default="") or None,
        help="also listen on this Unix socket (mode 0600, no origin check); env AGENTS_SOCKET",
    )
    serve.add_argument(
        "--no-ui",
        action="store_true",
        default=env.bool("AGENTS_NO_UI", default=False),
        help="no chat page at /; env AGENTS_NO_UI=true",
    )
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", parents=[parent], help="run a Celery worker (scaled-out mode, needs REDIS_URL)")
    add_owner_keys_flag(worker)
    worker.add_argument(
        "--concurrency",
        type=int,
        default=env.int("AGENTS_WORKER_CONCURRENCY", default=4),
        help="runs at once in this worker; env AGENTS_WORKER_CONCURRENCY",
    )
    worker.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    worker.add_argument("--hostname", default=None, help="Celery node name")
    worker.add_argument(
        "--beat",
        action="store_true",
        default=env.bool("AGENTS_WORKER_BEAT", default=False),
        help="accepted and ignored: every worker runs the periodic tasks, one at a time; env AGENTS_WORKER_BEAT",
    )
    worker.add_argument("--stream-tokens", action="store_true", help="env AGENTS_STREAM_TOKENS=true")
    _add_isolation_flag(worker)
    _add_tool_env_flag(worker)
    _add_stored_commands_flag(worker)
    worker.set_defaults(func=cmd_worker)

    mcp = sub.add_parser("mcp-server", parents=[parent], help="serve the agent files as MCP tools over stdio")
    add_owner_keys_flag(mcp)
    mcp.add_argument(
        "--worker-concurrency",
        type=int,
        default=env.int("AGENTS_WORKER_CONCURRENCY", default=4),
        help="runs at once in the embedded worker; env AGENTS_WORKER_CONCURRENCY",
    )
    mcp.set_defaults(func=cmd_mcp_server)

    mock = sub.add_parser("mock-llm", help="serve a scripted OpenAI-compatible LLM")
    mock.add_argument("--script", required=True, help="JSON script (see devtools/mockllm/__init__.py)")
    mock.add_argument("--port", type=tcp_port, default=8081)
    mock.add_argument("--host", default="127.0.0.1")
    mock.set_defaults(func=cmd_mock_llm)
