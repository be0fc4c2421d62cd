"""The environment, read through one ``environ.Env``: the settings and the ``agents`` command line.

Every variable is listed in docs/running.md §1 and on the settings page generated from the code.
The helpers below derive what more than one reader needs (the database URL and its default, the
data directory, the default allowed hosts), so that the command line and the settings cannot disagree.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import environ

env = environ.Env()

#: The embedded default's database, in the working directory.
DEFAULT_SQLITE_FILE = "agents-server.db"
#: The names a loopback server answers to (a browser on the same machine uses any of them).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
#: Addresses that mean "every interface" rather than one address clients connect to.
WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "[::]"})  # noqa: S104 - recognises the wildcard addresses; binds nothing

#: The server's own configuration, by prefix: ours (``AGENTS_``), Django's and Celery's, the
#: ``openai`` SDK's (it reads ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ...) and libpq's (``PGPASSWORD``,
#: ``PGHOST``, ... which psycopg reads for what ``DATABASE_URL`` leaves out) and OpenTelemetry's
#: (``OTEL_EXPORTER_OTLP_HEADERS`` may hold a collector's token). No tool process gets
#: them (docs/tools.md, "Tool environments"); ``tests/test_toolenv.py`` checks that every variable
#: the code reads is covered here.
SERVER_VARIABLE_PREFIXES = ("AGENTS_", "DJANGO_", "CELERY_", "OPENAI_", "PG", "OTEL_")
#: The server's own configuration, by name (``SECRET_KEY``: the name a deployment may use for it;
#: ``PROMETHEUS_MULTIPROC_DIR``: where the metrics of every process of a host are written).
SERVER_VARIABLES = frozenset({"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "PROMETHEUS_MULTIPROC_DIR"})


def is_server_variable(name: str) -> bool:
    """Whether the environment variable ``name`` is the server's own configuration, which no tool
    process receives or reads (:data:`SERVER_VARIABLE_PREFIXES`, :data:`SERVER_VARIABLES`).

    Names are compared as written: environment variables are case-sensitive.
    """
    return name in SERVER_VARIABLES or name.startswith(SERVER_VARIABLE_PREFIXES)


def database_url() -> str:
    """``DATABASE_URL``, or the SQLite file ``agents-server.db`` of the working directory.

    ``DATABASE_URL`` is a URL (``postgres://...``, ``sqlite:///...``) or the path of a SQLite file
    (docs/running.md §1): a value without a scheme is a path, relative to the working directory.

    Returns:
        A URL django-environ understands (``sqlite:////abs/path.db``, ``postgres://...``).
    """
    given = env.str("DATABASE_URL", default="")
    if not given:
        return f"sqlite:///{Path.cwd() / DEFAULT_SQLITE_FILE}"
    if "://" not in given and not given.startswith("sqlite:"):
        return f"sqlite:///{Path(given).expanduser().resolve()}"
    return given


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL, made absolute; ``None`` for other databases and in-memory SQLite."""
    config = env.db_url_config(url)
    name = str(config.get("NAME") or "")
    if config["ENGINE"] != "django.db.backends.sqlite3" or name in ("", ":memory:"):
        return None
    return Path(name).expanduser().resolve()


def data_dir() -> Path | None:
    """Where the server keeps its own files (the secret key): ``AGENTS_DATA_DIR``, else the directory
    of the SQLite database; ``None`` with PostgreSQL (or in-memory SQLite) and no ``AGENTS_DATA_DIR``.

    Returns:
        An absolute path; the directory may not exist yet.
    """
    given = env.str("AGENTS_DATA_DIR", default="")
    if given:
        return Path(given).expanduser().resolve()
    database = sqlite_file(database_url())
    return database.parent if database is not None else None


def default_allowed_hosts(bind: str) -> list[str]:
    """The hosts a server bound to ``bind`` answers to when ``DJANGO_ALLOWED_HOSTS`` is not set.

    The loopback names always; the bound address or name too, unless it is a wildcard
    (``0.0.0.0``, ``::``): a server bound to every interface cannot know the names its clients
    use, so those are given with ``DJANGO_ALLOWED_HOSTS``.

    Args:
        bind: the ``--bind`` address or host name.

    Returns:
        Entries for Django's ``ALLOWED_HOSTS`` (IPv6 addresses in brackets, as in a Host header).
    """
    hosts = list(LOOPBACK_HOSTS)
    bind = bind.strip()
    if bind in WILDCARD_BINDS:
        return hosts
    try:
        address = ipaddress.ip_address(bind.strip("[]"))
    except ValueError:
        host = bind.lower()
    else:
        host = f"[{address}]" if address.version == 6 else str(address)
    if host not in hosts:
        hosts.append(host)
    return hosts
