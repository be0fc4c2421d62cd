"""The ``agents`` command line: serve, worker, check, mcp-server, mock-llm and Django management commands.

Every flag has an environment variable, so a container can be configured either way; a flag
wins over its variable. The variables are read through ``agentsite.env.env``, here for the flags'
defaults and by the settings when Django starts; the flags are turned into environment variables
before that.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from agentsite.env import env

log = logging.getLogger("agentsite.cli")


def _db_url(value: str) -> str:
    """``--db`` takes a SQLite path or a database URL (``postgres://...``)."""
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def _add_agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent-file",
        action="append",
        default=None,
        metavar="FILE",
        help="agent file to serve (repeatable); env AGENTS_AGENT_FILES, paths separated by os.pathsep",
    )
    parser.add_argument("--api-keys", metavar="FILE", help="LLM API keys file; env AGENTS_API_KEYS")
    parser.add_argument(
        "--owner-api-keys",
        action="append",
        default=None,
        metavar="OWNER=FILE",
        help="LLM keys file for one owner's sessions (repeatable); env AGENTS_OWNER_API_KEYS, entries separated"
        " by os.pathsep",
    )
    parser.add_argument(
        "--db",
        metavar="FILE|URL",
        help="SQLite file or postgres:// URL; env DATABASE_URL; default ./agents-server.db",
    )


def _add_param_flags(parser: argparse.ArgumentParser) -> None:
    """The process's parameter values (README, "Parameters and bindings"); kept out of the environment,
    which every tool process inherits."""
    for flag, help_text in (
        ("--set", "a parameter's value, a string (repeatable; a client may override a session one)"),
        ("--set-json", "a parameter's value, any JSON (repeatable)"),
        ("--pin", "a parameter's value no client may override (repeatable)"),
        ("--pin-json", "the JSON form of --pin (repeatable)"),
    ):
        parser.add_argument(flag, action="append", default=[], metavar="NAME=VALUE", help=help_text)
    parser.add_argument(
        "--params-file",
        metavar="FILE",
        default=env.str("AGENTS_PARAMS_FILE", default="") or None,
        help='{"name": value} or {"name": {"value": v, "pinned": true}}; flags win; env AGENTS_PARAMS_FILE',
    )


def _install_params_or_exit(args: argparse.Namespace, command: str) -> None:
    """Read the parameter flags and file into this process's values; exit 2 naming a bad one."""
    from agents_app.parameters import ParamsConfigError, install_process_values, parse_process_flags

    try:
        values = parse_process_flags(
            sets=args.set, set_jsons=args.set_json, pins=args.pin, pin_jsons=args.pin_json,
            params_file=args.params_file,
        )
    except ParamsConfigError as error:
        print(f"agents {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    install_process_values(values)


def _apply_agent_flags(args: argparse.Namespace) -> None:
    """Turn the shared flags into the environment variables the settings read."""
    if args.agent_file:
        os.environ["AGENTS_AGENT_FILES"] = os.pathsep.join(str(Path(p).resolve()) for p in args.agent_file)
    if args.api_keys:
        os.environ["AGENTS_API_KEYS"] = str(Path(args.api_keys).resolve())
    if args.owner_api_keys:
        entries = []
        for entry in args.owner_api_keys:
            owner, separator, path = entry.partition("=")
            # a malformed entry is passed on as it is, to be refused with the others at load
            entries.append(f"{owner}={Path(path).resolve()}" if separator and path else entry)
        os.environ["AGENTS_OWNER_API_KEYS"] = os.pathsep.join(entries)
    if args.db:
        os.environ["DATABASE_URL"] = _db_url(args.db)


def _apply_isolation_flag(args: argparse.Namespace, command: str) -> None:
    """``--isolate-tools docker:IMAGE | process:PATH`` into ``AGENTS_ISOLATE_TOOLS`` (a process
    path made absolute); exit 2 with one line on stderr for any other value."""
    if not args.isolate_tools:
        return
    from agentsite.isolation import IsolationSpec

    try:
        spec = IsolationSpec.parse(args.isolate_tools)
    except ValueError as error:
        print(f"agents {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    value = f"process:{Path(spec.target).resolve()}" if spec.kind == "process" else args.isolate_tools
    os.environ["AGENTS_ISOLATE_TOOLS"] = value


def _setup_django(command: str) -> None:
    """Make sure there is a secret key, then start Django; exit 2 with one line on stderr when the
    configuration is refused (no key with PostgreSQL, a database URL Django cannot use, ...)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured

    from agentsite.secret_key import ensure_secret_key

    try:
        ensure_secret_key()
        django.setup()
    except ImproperlyConfigured as error:
        print(f"agents {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from error


def _load_agents_or_exit() -> None:
    """Load the agent files and build every root agent's tools; exit 2 listing the problems."""
    from agents_app.keys import ApiKeysError
    from agents_app.loader import AgentLoadError
    from agents_app.registry import load_registry_from_settings, set_registry
    from agents_app.runtime import reset_runtime_agents, runtime_agent
    from tools_app.toolset import ToolBuildError

    try:
        registry = load_registry_from_settings()
    except AgentLoadError as error:
        for problem in error.problems:
            print(f"agents: {problem}", file=sys.stderr)
        raise SystemExit(2) from error
    except ApiKeysError as error:
        print(f"agents: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    set_registry(registry)
    reset_runtime_agents()
    # stored agents after the files (docs/api.md §14.1); skipped ones are logged
    registry.stored.refresh(registry.file_slugs())
    problems = _parameter_problems(registry)
    for problem in problems:
        print(f"agents: {problem}", file=sys.stderr)
    if problems:
        raise SystemExit(2)
    for agent in registry.roots():
        try:
            built = runtime_agent(agent.spec.slug)
        except ToolBuildError as error:
            for problem in error.problems:
                print(f"agents: {agent.spec.slug}: {problem}", file=sys.stderr)
            raise SystemExit(2) from error
        for warning in built.toolset.warnings:
            log.warning("tool skipped", extra={"kind": "tools.skipped", "agent": agent.spec.slug, "reason": warning})
        for notice in built.toolset.notices:
            log.warning("binding notice", extra={"kind": "tools.binding_notice", "agent": agent.spec.slug,
                                                 "reason": notice})


def _parameter_problems(registry: Any) -> list[str]:
    """A process value no loaded agent declares, and what each agent's parameters lack in this
    process (a required process-scope parameter without value; a secret that is not a string)."""
    from agents_app.parameters import AgentParameters, process_values, undeclared_process_names

    agents = {}
    for root in registry.roots():
        tree = registry.tree(root.spec.slug)
        for slug, agent in (tree.agents.items() if tree is not None else []):
            agents.setdefault(slug, agent)
    problems = [
        f"--set/--pin {name}: no loaded agent declares this parameter"
        for name in undeclared_process_names([a.spec for a in agents.values()], process_values())
    ]
    for slug, agent in agents.items():
        parameters = AgentParameters.load(agent.spec, base_dir=agent.base_dir, api_keys=registry.api_keys)
        problems.extend(f"{slug}: {problem}" for problem in parameters.process_problems())
    return problems


def _join_fleet() -> None:
    """Scaled out, this process keeps the key of the values sessions hold outside the database
    alive while it lives (sessions_app/secrets.py); exit 2 when Redis cannot be reached."""
    import redis

    from sessions_app.secrets import join_fleet

    try:
        join_fleet()
    except redis.RedisError as error:
        print(f"agents: cannot join the other processes through Redis: {type(error).__name__}", file=sys.stderr)
        raise SystemExit(2) from error


def _recover(*, all_claimed: bool) -> None:
    """Startup recovery (docs/sessions.md §4.8): before the first request is accepted."""
    from sessions_app.services.recovery import recover_stale_runs

    recovered, resent = recover_stale_runs(all_claimed=all_claimed)
    log.info(
        "sessions recovered",
        extra={"kind": "sessions.recovered", "count": len(recovered), "session_ids": recovered, "resent": resent},
    )


def _apply_auth_flags(args: argparse.Namespace) -> None:
    """Turn the authentication flags of ``serve`` into the environment variables the settings read."""
    if args.auth_tokens:
        os.environ["AGENTS_AUTH_TOKENS"] = str(Path(args.auth_tokens).resolve())
    if args.admin_owners:
        os.environ["AGENTS_ADMIN_OWNERS"] = ",".join(args.admin_owners)
    if args.cors_origin:
        os.environ["AGENTS_CORS_ORIGINS"] = ",".join(args.cors_origin)


def _auth_config_or_exit() -> Any:
    """Check the authentication flags together (docs/api.md §10.9); exit 2 naming the problem."""
    from django.conf import settings

    from agentsite.auth import AuthConfigError, auth_config

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
    _install_params_or_exit(args, "serve")
    _apply_agent_flags(args)
    _apply_auth_flags(args)
    if args.stream_tokens:
        os.environ["AGENTS_STREAM_TOKENS"] = "true"
    _apply_isolation_flag(args, "serve")
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
    _setup_django("serve")
    from django.conf import settings

    from agents_app.registry import get_registry
    from agentsite.auth import describe_for_log
    from agentsite.migrate import migrate

    auth = _auth_config_or_exit()
    migrate()
    _load_agents_or_exit()
    _join_fleet()
    _recover(all_claimed=settings.EMBEDDED_WORKER)
    if settings.EMBEDDED_WORKER:
        from agentsite import embedded
        from sessions_app.dispatch import use_embedded_worker

        embedded.start(args.worker_concurrency, use_embedded_worker)
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
    _install_params_or_exit(args, "worker")
    _apply_agent_flags(args)
    if args.stream_tokens:
        os.environ["AGENTS_STREAM_TOKENS"] = "true"
    _apply_isolation_flag(args, "worker")
    _setup_django("worker")
    from django.conf import settings

    if not settings.REDIS_URL:
        print("agents worker: set REDIS_URL (the workers and the servers share the Redis broker)", file=sys.stderr)
        return 2
    from agentsite.migrate import migrate

    migrate()
    _load_agents_or_exit()
    _join_fleet()
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
        # the schedule is kept in memory (CELERY_BEAT_SCHEDULER): no file is written
        argv.append("--beat")
    if args.hostname:
        argv.append(f"--hostname={args.hostname}")
    log.info("worker started", extra={"kind": "worker.started", "concurrency": args.concurrency, "beat": args.beat})
    app.worker_main(argv)
    leave_fleet()
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Validate agent files: one line per problem on stderr, exit 1 when any (docs/agents.md §5).

    On stdout, ``<slug>: <announce> (<n> tools)`` per root, then one indented line per path an
    agent of its tree names, saying where it was found (docs/agents.md §3).

    Stricter than ``serve``: a tool whose ``describe`` fails is a problem here (``serve`` skips
    it and logs ``tools.skipped``), and so are two files with the same root slug. Each MCP server
    is started, and the tools it lists are printed, one line per server. Each parameter gets a
    line saying how it resolves in this process (``set``, ``pinned``, ``default:<Source>``,
    ``unbound``), never its value.
    """
    _install_params_or_exit(args, "check")
    from agents_app.keys import ApiKeysError, load_api_keys
    from agents_app.loader import AgentLoadError, load_agent_tree
    from agents_app.parameters import AgentParameters, process_values, undeclared_process_names
    from tools_app.mcp.toolbox import McpToolbox
    from tools_app.toolset import ToolBuildError, build_toolset

    problems: list[str] = []
    try:
        api_keys = load_api_keys(args.api_keys or env.str("AGENTS_API_KEYS", default="") or None)
    except ApiKeysError as error:
        problems.append(str(error))
        api_keys = {}
    roots: dict[str, str] = {}
    specs = []
    for path in args.agent_file or []:
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
        for warning in tree.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        for helper_slug, agent in tree.agents.items():
            specs.append(agent.spec)
            parameters = AgentParameters.load(agent.spec, base_dir=agent.base_dir, api_keys=api_keys)
            problems.extend(f"{agent.path}: {helper_slug}: {problem}" for problem in parameters.process_problems())
            try:
                toolset = build_toolset(agent, parameters.resolve(), api_keys)
            except ToolBuildError as error:
                problems.extend(f"{agent.path}: {helper_slug}: {problem}" for problem in error.problems)
                continue
            problems.extend(f"{agent.path}: {helper_slug}: {warning}" for warning in toolset.warnings)
            for notice in toolset.notices:
                print(f"warning: {agent.path}: {helper_slug}: {notice}", file=sys.stderr)
            if helper_slug == slug:
                print(f"{slug}: {agent.spec.announce} ({len(toolset.tools)} tools)")
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


def cmd_mcp_server(args: argparse.Namespace) -> int:
    """Serve the agent files as MCP tools over stdio (sessions_app/mcp/stdio.py); stdout is for
    JSON-RPC only, so every complaint goes to stderr, with exit status 2."""
    _install_params_or_exit(args, "mcp-server")
    _apply_agent_flags(args)
    if not args.agent_file and not env.str("AGENTS_AGENT_FILES", default=""):
        print("agents mcp-server: no agent definitions (give --agent-file)", file=sys.stderr)
        return 2
    _setup_django("mcp-server")
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0, stdout=sys.stderr)
    _load_agents_or_exit()
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agents`` command."""
    parser = argparse.ArgumentParser(prog="agents", description="A durable LLM-agent server.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the HTTP API (embedded worker unless REDIS_URL is set)")
    _add_agent_flags(serve)
    _add_param_flags(serve)
    serve.add_argument("--bind", default=env.str("AGENTS_BIND", default="127.0.0.1"), help="env AGENTS_BIND")
    serve.add_argument("--port", type=int, default=env.int("AGENTS_PORT", default=8080), help="env AGENTS_PORT")
    serve.add_argument("--stream-tokens", action="store_true", help="env AGENTS_STREAM_TOKENS=true")
    serve.add_argument(
        "--isolate-tools",
        metavar="docker:IMAGE|process:PATH",
        help="run bash and MCP tool calls in this worker, never in the server; env AGENTS_ISOLATE_TOOLS",
    )
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

    worker = sub.add_parser("worker", help="run a Celery worker (scaled-out mode, needs REDIS_URL)")
    _add_agent_flags(worker)
    _add_param_flags(worker)
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
        help="also run the periodic tasks (run recovery, event retention); env AGENTS_WORKER_BEAT=1",
    )
    worker.add_argument("--stream-tokens", action="store_true", help="env AGENTS_STREAM_TOKENS=true")
    worker.add_argument(
        "--isolate-tools",
        metavar="docker:IMAGE|process:PATH",
        help="run bash and MCP tool calls in this worker, never in the server; env AGENTS_ISOLATE_TOOLS",
    )
    worker.set_defaults(func=cmd_worker)

    check = sub.add_parser("check", help="validate agent files")
    check.add_argument("--agent-file", action="append", required=True, metavar="FILE")
    check.add_argument("--api-keys", metavar="FILE", help="API keys file, for ApiKey defaults; env AGENTS_API_KEYS")
    _add_param_flags(check)
    check.set_defaults(func=cmd_check)

    mcp = sub.add_parser("mcp-server", help="serve the agent files as MCP tools over stdio")
    _add_agent_flags(mcp)
    _add_param_flags(mcp)
    mcp.add_argument(
        "--worker-concurrency",
        type=int,
        default=env.int("AGENTS_WORKER_CONCURRENCY", default=4),
        help="runs at once in the embedded worker; env AGENTS_WORKER_CONCURRENCY",
    )
    mcp.set_defaults(func=cmd_mcp_server)

    mock = sub.add_parser("mock-llm", help="serve a scripted OpenAI-compatible LLM")
    mock.add_argument("--script", required=True, help="JSON script (see devtools/mockllm/__init__.py)")
    mock.add_argument("--port", type=int, default=8081)
    mock.add_argument("--host", default="127.0.0.1")
    mock.set_defaults(func=cmd_mock_llm)

    manage = sub.add_parser("manage", help="run a Django management command (e.g. createsuperuser)")
    manage.add_argument("rest", nargs=argparse.REMAINDER)
    manage.set_defaults(func=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``agents`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "manage":
        _setup_django("manage")
        from django.core.management import execute_from_command_line

        execute_from_command_line(["agents manage", *args.rest])
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
