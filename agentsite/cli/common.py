"""What the commands of the ``agents`` command line share: the database flag, parameters, Django's
start, loading the agents.

Every flag has an environment variable, so a container can be configured either way; a flag
wins over its variable. The variables are read through ``foundation.env.env``, here for the flags'
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

from agentfiles.project_config import (
    ConfigError,
    ProjectConfig,
    default_api_keys_file,
    discovered_agent_files,
    load_project_config,
)
from foundation.env import env

log = logging.getLogger("agentsite.cli")

def db_url(value: str) -> str:
    """``--db`` takes a SQLite path or a database URL (``postgres://...``)."""
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


#: Exit codes of the command line (docs/cli.md §1.3).
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_AGENT = 4
EXIT_TOOL = 5


class CliError(Exception):
    """A command fails: ``message`` is printed as one line on stderr and ``code`` is the exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def add_global_flags(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, before or after the command's name (docs/cli.md §1.2).

    Args:
        parser: the root parser (``suppress=False``: it holds the defaults) or a command's parser
            (``suppress=True``: an option absent there leaves the root's value alone).
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument(
        "--agent-file",
        action="append",
        default=default(None),
        metavar="FILE",
        help="root agent file (repeatable); default: agents-exe.cfg.json's agents, else <config dir>/default;"
        " env AGENTS_AGENT_FILES, paths separated by os.pathsep",
    )
    parser.add_argument("--agent", "-a", default=default(None), metavar="SLUG", help="keep only this agent")
    parser.add_argument(
        "--api-keys", default=default(None), metavar="FILE",
        help="LLM API keys file; env AGENTS_API_KEYS; default <config dir>/secret-keys",
    )
    parser.add_argument(
        "--model-url",
        action="append",
        default=default([]),
        metavar="FROM=TO",
        help="an agent whose modelUrl is FROM calls TO, its file unchanged (repeatable); env AGENTS_MODEL_URLS,"
        " entries separated by spaces",
    )
    parser.add_argument(
        "--api-key-id",
        action="append",
        default=default([]),
        metavar="FROM=TO",
        help="an agent whose apiKeyId is FROM uses the keys file's TO (empty: no key) (repeatable);"
        " env AGENTS_API_KEY_IDS",
    )
    parser.add_argument(
        "--db",
        default=default(None),
        metavar="FILE|URL",
        help="SQLite file or postgres:// URL; env DATABASE_URL; default ./agents-server.db",
    )
    for flag, help_text in (
        ("--set", "a parameter's value, a string (repeatable; a client may override a session one)"),
        ("--set-json", "a parameter's value, any JSON (repeatable)"),
        ("--pin", "a parameter's value no client may override (repeatable)"),
        ("--pin-json", "the JSON form of --pin (repeatable)"),
    ):
        parser.add_argument(flag, action="append", default=default([]), metavar="NAME=VALUE", help=help_text)
    parser.add_argument(
        "--params-file",
        metavar="FILE",
        default=default(env.str("AGENTS_PARAMS_FILE", default="") or None),
        help='{"name": value} or {"name": {"value": v, "pinned": true}}; flags win; env AGENTS_PARAMS_FILE',
    )
    # agents-exe's trace sinks: accepted so that its scripts run; this program logs JSON to stderr
    for flag in ("--log-file", "--log-http", "--log-json-file", "--session-json-file-prefix"):
        parser.add_argument(flag, default=default(None), help=argparse.SUPPRESS)


def add_owner_keys_flag(parser: argparse.ArgumentParser) -> None:
    """``--owner-api-keys`` of the long-running processes."""
    parser.add_argument(
        "--owner-api-keys",
        action="append",
        default=None,
        metavar="OWNER=FILE",
        help="LLM keys file for one owner's sessions (repeatable); env AGENTS_OWNER_API_KEYS, entries separated"
        " by os.pathsep",
    )


def install_params_or_exit(args: argparse.Namespace, command: str) -> None:
    """Read the parameter flags and file into this process's values; exit 2 naming a bad one."""
    from agentfiles.parameters import ParamsConfigError, install_process_values, parse_process_flags

    try:
        values = parse_process_flags(
            sets=args.set, set_jsons=args.set_json, pins=args.pin, pin_jsons=args.pin_json,
            params_file=args.params_file,
        )
    except ParamsConfigError as error:
        print(f"agents {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    install_process_values(values)


def project_config() -> ProjectConfig:
    """The project configuration of the working directory.

    Raises:
        CliError: exit code 3, when ``agents-exe.cfg.json`` cannot be read.
    """
    try:
        return load_project_config()
    except ConfigError as error:
        raise CliError(str(error), EXIT_CONFIG) from error


def agent_files(args: argparse.Namespace, *, first_only: bool = False) -> list[Path]:
    """The root agent files a command uses (docs/cli.md §2.2): ``--agent-file``, else
    ``AGENTS_AGENT_FILES``, else discovery; narrowed by ``--agent``; only the first with
    ``first_only`` (``run``, ``tool-call``, ``init``).

    Raises:
        CliError: exit code 4 when ``--agent`` names no agent (the message lists the slugs
            found); exit code 3 for an unreadable project config.
    """
    if args.agent_file:
        files = [Path(p).resolve() for p in args.agent_file]
    elif env.str("AGENTS_AGENT_FILES", default=""):
        files = [Path(p) for p in env.str("AGENTS_AGENT_FILES").split(os.pathsep) if p]
    else:
        files = discovered_agent_files(project_config())
    if args.agent:
        files = [_find_agent(files, args.agent)]
    return files[:1] if first_only else files


def _find_agent(files: list[Path], slug: str) -> Path:
    from agentfiles.loader import AgentLoadError, load_agent_tree

    found = []
    for path in files:
        try:
            tree = load_agent_tree(path)
        except AgentLoadError:
            continue
        if tree.root.spec.slug == slug:
            return path
        found.append(f"  - {tree.root.spec.slug} ({path})")
    listing = "\n".join(found) or "  (none)"
    raise CliError(f"Error: Agent '{slug}' not found.\n\nAvailable agents:\n{listing}", EXIT_AGENT)


def keys_file(args: argparse.Namespace) -> str | None:
    """The API keys file: ``--api-keys``, else ``AGENTS_API_KEYS``, else the config directory's
    ``secret-keys`` when it exists, else ``None``."""
    if args.api_keys:
        return str(Path(args.api_keys).resolve())
    given = env.str("AGENTS_API_KEYS", default="")
    if given:
        return given
    default_keys = default_api_keys_file(project_config())
    return str(default_keys) if default_keys is not None else None


def apply_agent_flags(args: argparse.Namespace, *, first_only: bool = False) -> None:
    """Turn the shared flags into the environment variables the settings read: the agent files
    found (:func:`agent_files`), the API keys file (``--api-keys``, else ``AGENTS_API_KEYS``, else
    the config directory's ``secret-keys`` when it exists) and the database."""
    files = agent_files(args, first_only=first_only)
    if files:
        os.environ["AGENTS_AGENT_FILES"] = os.pathsep.join(str(p) for p in files)
    keys = keys_file(args)
    if keys:
        os.environ["AGENTS_API_KEYS"] = keys
    if getattr(args, "owner_api_keys", None):
        entries = []
        for entry in args.owner_api_keys:
            owner, separator, path = entry.partition("=")
            # a malformed entry is passed on as it is, to be refused with the others at load
            entries.append(f"{owner}={Path(path).resolve()}" if separator and path else entry)
        os.environ["AGENTS_OWNER_API_KEYS"] = os.pathsep.join(entries)
    if args.db:
        os.environ["DATABASE_URL"] = db_url(args.db)
    apply_endpoint_flags(args)


def apply_endpoint_flags(args: argparse.Namespace) -> None:
    """``--model-url`` and ``--api-key-id`` into ``AGENTS_MODEL_URLS`` and ``AGENTS_API_KEY_IDS``
    (flags replace the variable), then both maps checked (docs/cli.md §2.3.2).

    Raises:
        CliError: exit code 2 naming a bad entry.
    """
    from agentfiles.endpoints import EndpointMapError, check_maps, parse_map

    try:
        for flag, variable in (("model_url", "AGENTS_MODEL_URLS"), ("api_key_id", "AGENTS_API_KEY_IDS")):
            entries = getattr(args, flag, None)
            if entries:
                # checked here first, so that the message names the flag rather than the variable
                parse_map(entries, f"--{flag.replace('_', '-')}", urls=flag == "model_url")
                os.environ[variable] = " ".join(entries)
        check_maps()
    except EndpointMapError as error:
        raise CliError(str(error), EXIT_USAGE) from error


def quiet_logs() -> None:
    """A one-shot command keeps stderr for what it has to say, not for the server's info logs:
    ``AGENTS_LOG_LEVEL`` defaults to ``WARNING`` there (unset or empty alike: docs/cli.md §1.2)."""
    if not os.environ.get("AGENTS_LOG_LEVEL", "").strip():
        os.environ["AGENTS_LOG_LEVEL"] = "WARNING"


def setup_django(command: str) -> None:
    """Make sure there is a secret key, then start Django; exit 2 with one line on stderr when the
    configuration is refused (no key with PostgreSQL, a database URL Django cannot use, a SQLite
    file in a directory that does not exist: docs/cli.md §2.4, ...)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured

    from agentsite.secret_key import ensure_secret_key
    from agentsite.tracing import configure as configure_tracing
    from foundation.env import database_url, sqlite_file

    # a SQLite database in a directory that does not exist is a typo more often than a wish:
    # nothing is created for it (neither the directory nor the secret key file beside it)
    database = sqlite_file(database_url())
    if database is not None and not database.parent.is_dir():
        print(
            f"agents {command}: cannot open the database {database}: its directory does not exist",
            file=sys.stderr,
        )
        raise SystemExit(2)
    try:
        ensure_secret_key()
        django.setup()
    except ImproperlyConfigured as error:
        print(f"agents {command}: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    # before the first request or task: the instrumentations wrap Django's handler and Celery's signals
    configure_tracing(command)


def load_agents_or_exit(code: int = EXIT_USAGE) -> None:
    """Load the agent files and build every root agent's tools; exit with ``code`` (2 for the
    long-running processes, 4 for the one-shot commands: docs/cli.md §1.3) listing the problems."""
    from agentfiles.keys import ApiKeysError
    from agentfiles.loader import AgentLoadError
    from agents_app.registry import load_registry_from_settings, set_registry
    from agents_app.runtime import reset_runtime_agents, runtime_agent
    from foundation.errors import ApiError
    from tools_app.toolset import ToolBuildError

    try:
        registry = load_registry_from_settings()
    except AgentLoadError as error:
        for problem in error.problems:
            print(f"agents: {problem}", file=sys.stderr)
        raise SystemExit(code) from error
    except ApiKeysError as error:
        print(f"agents: {error}", file=sys.stderr)
        raise SystemExit(code) from error
    set_registry(registry)
    reset_runtime_agents()
    # stored agents after the files (docs/api.md §14.1); skipped ones are logged
    registry.stored.refresh(registry.file_slugs())
    problems = parameter_problems(registry)
    for problem in problems:
        print(f"agents: {problem}", file=sys.stderr)
    if problems:
        raise SystemExit(code)
    file_slugs = registry.file_slugs()
    for agent in registry.roots():
        try:
            built = runtime_agent(agent.spec.slug)
        except ToolBuildError as error:
            for problem in error.problems:
                print(f"agents: {agent.spec.slug}: {problem}", file=sys.stderr)
            raise SystemExit(code) from error
        except ApiError as error:
            if agent.spec.slug in file_slugs:
                raise
            # a stored agent whose tools cannot be built here (its document host is down, say)
            # must not keep the server from starting: it answers agent_failed_to_load when used
            log.warning(
                "stored agent failed to load",
                extra={"kind": "agents.stored_load_failed", "agent": agent.spec.slug, "reason": error.message},
            )
            continue
        for warning in built.toolset.warnings:
            log.warning("tool skipped", extra={"kind": "tools.skipped", "agent": agent.spec.slug, "reason": warning})
        for notice in built.toolset.notices:
            log.warning("binding notice", extra={"kind": "tools.binding_notice", "agent": agent.spec.slug,
                                                 "reason": notice})


def parameter_problems(registry: Any) -> list[str]:
    """A process value no loaded agent declares, and what each agent's parameters lack in this
    process (a required process-scope parameter without value; a secret that is not a string)."""
    from agentfiles.parameters import AgentParameters, process_values, undeclared_process_names

    agents: dict[str, Any] = {}
    for root in registry.roots():
        tree = registry.tree(root.spec.slug)
        for slug, agent in (tree.agents.items() if tree is not None else []):
            agents.setdefault(slug, agent)
    problems = [
        f"--set/--pin {name}: no loaded agent declares this parameter"
        for name in undeclared_process_names([a.spec for a in agents.values()], process_values())
    ]
    file_slugs = registry.file_slugs()
    for slug, agent in agents.items():
        if slug not in file_slugs:
            # a stored agent's missing values refuse its sessions (params_required), not the process
            continue
        parameters = AgentParameters.load(agent.spec, base_dir=agent.base_dir, api_keys=registry.api_keys)
        problems.extend(f"{slug}: {problem}" for problem in parameters.process_problems())
    return problems


def join_fleet_or_exit() -> None:
    """Scaled out, this process keeps the key of the values sessions hold outside the database
    alive while it lives (sessions_app/secrets.py); exit 2 when Redis cannot be reached."""
    import redis

    from sessions_app.secrets import join_fleet

    try:
        join_fleet()
    except redis.RedisError as error:
        print(f"agents: cannot join the other processes through Redis: {type(error).__name__}", file=sys.stderr)
        raise SystemExit(2) from error




def open_store(args: argparse.Namespace, command: str) -> None:
    """Django on the configured database (``--db``, ``DATABASE_URL``, else ``./agents-server.db``,
    the server's own), migrated, without loading the agents: for the commands that read sessions,
    import them or record results."""
    quiet_logs()
    if args.db:
        os.environ["DATABASE_URL"] = db_url(args.db)
    setup_django(command)
    from agentsite.migrate import migrate

    migrate()


def open_database(args: argparse.Namespace, command: str, *, first_only: bool = False) -> Any:
    """What the one-shot commands that run sessions need: :func:`open_store`, the agents (exit 4
    when they do not load), and the embedded worker on the embedded default, so that runs go on
    in this process; scaled out (``REDIS_URL``), runs go to the Celery workers.

    Unlike ``serve``, nothing is recovered at start: another process (a server) may be running
    sessions of the same database right now.

    Returns:
        The embedded worker (``agentsite.embedded.EmbeddedWorker``), or ``None`` scaled out.
    """
    install_params_or_exit(args, command)
    apply_agent_flags(args, first_only=first_only)
    open_store(args, command)
    from django.conf import settings

    load_agents_or_exit(EXIT_AGENT)
    join_fleet_or_exit()
    if settings.EMBEDDED_WORKER:
        from agentsite import embedded
        from sessions_app.dispatch import use_embedded_worker

        return embedded.start(env.int("AGENTS_WORKER_CONCURRENCY", default=4), use_embedded_worker)
    return None
