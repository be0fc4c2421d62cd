"""Settings for the agents server, ready for production: one environment reader, two topologies.

Embedded default (nothing configured): SQLite in WAL mode, the in-memory channel layer and a
Celery worker inside the server process on the in-memory broker.
Scaled out: ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` (Celery broker and channel layer).
Every variable is listed in docs/running.md §1 (and on the generated settings page) and read through
``foundation.env.env``; the test suite's changes are in ``agentsite.settings.test``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentsite.secret_key import secret_key
from foundation.env import database_url, default_allowed_hosts, env
from foundation.toolenv import DEFAULT_MODE, parse_mode

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# No default: DJANGO_SECRET_KEY, or the data directory's key file (agentsite/secret_key.py).
SECRET_KEY = secret_key()
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# Host headers answered (others get 400): DJANGO_ALLOWED_HOSTS, else the loopback names and the
# bound address. AGENTS_BIND is --bind, which `agents serve` sets before the settings are read.
ALLOWED_HOSTS = [host.strip() for host in env.list("DJANGO_ALLOWED_HOSTS", default=[]) if host.strip()]
ALLOWED_HOSTS = ALLOWED_HOSTS or default_allowed_hosts(env.str("AGENTS_BIND", default="127.0.0.1"))

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "agents_app",
    "tools_app",
    "sessions_app",
    "hooks_app",
    "console_app",
]

MIDDLEWARE = [
    # outermost: the status it logs is the one the client gets
    "foundation.middleware.AccessLogMiddleware",
    # first, so that preflights, origin refusals and every other answer get the CORS headers
    "foundation.access.CorsMiddleware",
    "foundation.middleware.BodyLimitMiddleware",
    # Django's security, session, common, auth and message middleware, for the admin's paths only
    "foundation.middleware.AdminMiddleware",
]
# The admin's checks look for those middleware in MIDDLEWARE; AdminMiddleware runs them for the
# admin's paths, which is where the admin needs them.
SILENCED_SYSTEM_CHECKS = ["admin.E408", "admin.E409", "admin.E410"]

ROOT_URLCONF = "agentsite.urls"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = None
ASGI_APPLICATION = "agentsite.asgi.application"

# --- database ---------------------------------------------------------------------------------
DATABASES = {"default": env.db_url_config(database_url())}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers proceed while the worker writes; IMMEDIATE transactions take the write
    # lock up front so two writers queue on busy_timeout instead of failing on lock upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
    }
    # a connection per thread for the life of the process: opening one (and running the
    # PRAGMAs) costs more than a whole step
    DATABASES["default"]["CONN_MAX_AGE"] = None
else:
    # Django's backend plus the hooks that run just before COMMIT (the event sequence's lock,
    # docs/api.md §9.7)
    DATABASES["default"]["ENGINE"] = "foundation.postgresql"
    # kept between requests and tasks (seconds), checked before reuse after an error
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("AGENTS_DB_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis, celery, channels --------------------------------------------------------------------
REDIS_URL = env("REDIS_URL", default="")
EMBEDDED_WORKER = env.bool("AGENTS_EMBEDDED_WORKER", default=not REDIS_URL)

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fix-up closes every database connection before and after each task unless this
# is set, and then only every so many tasks: a new PostgreSQL connection per run. Connections
# are kept instead, for CONN_MAX_AGE and health-checked, by agentsite.celery's own hooks.
CELERY_DB_REUSE_MAX = 1_000_000
# Redis: a task not acknowledged within the visibility timeout is delivered again (seconds).
# The in-memory broker polls its queue: 20 ms keeps a run's start prompt.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600} if REDIS_URL else {"polling_interval": 0.02}
CELERY_TASK_ALWAYS_EAGER = env.bool("AGENTS_CELERY_EAGER", default=False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# keep this project's JSON log lines in worker processes too
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_REDIRECT_STDOUTS = False
# commits wake the event readers of every process through the channel layer, and a project's own
# consumer joins a session's or an owner's group there (sessions_app.hub, docs/api.md §9.8):
# Redis pub/sub when scaled out, in memory in the embedded default
CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
    "default": (
        {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

# --- the agents server's own settings ------------------------------------------------------------
AGENTS = {
    # Agent files loaded at start, separated by os.pathsep like PATH.
    "AGENT_FILES": [p for p in env("AGENTS_AGENT_FILES", default="").split(os.pathsep) if p],
    # The shared LLM keys file (either shape: {"keys":[{"id","value"}]} or {"id": "value"}).
    "API_KEYS_FILE": env("AGENTS_API_KEYS", default=""),
    # Seconds a bash tool may run before its process group is killed, unless the agent sets
    # asyncCallTimeoutSeconds.
    "TOOL_TIMEOUT": env.float("AGENTS_TOOL_TIMEOUT", default=600.0),
    # docker:IMAGE or process:PATH: bash and MCP calls run by that worker (docs/guide-toolboxes.md §5)
    "ISOLATE_TOOLS": env.str("AGENTS_ISOLATE_TOOLS", default=""),
    # --tool-env: clean (no server configuration) or strict (an allow-list) tool environments
    # (docs/tools.md, "Tool environments")
    "TOOL_ENV": parse_mode(env.str("AGENTS_TOOL_ENV", default=DEFAULT_MODE)),
    # Stored agents may name MCP executables, Command and EnvVar sources, ${VAR} (docs/agents.md §9).
    "ALLOW_STORED_COMMANDS": env.bool("AGENTS_ALLOW_STORED_COMMANDS", default=False),
    # Seconds an MCP server may take to start and list its tools before the agent fails to load.
    "MCP_DISCOVERY_TIMEOUT": env.float("AGENTS_MCP_DISCOVERY_TIMEOUT", default=30.0),
    # Where skill repositories (SkillGitRepo) are cloned; empty: ~/.cache/agents-server/skills.
    "SKILLS_CACHE": env("AGENTS_SKILLS_CACHE", default=""),
    # Bytes a tool call may return to the model (any tool kind); longer text is cut, with a note.
    "TOOL_OUTPUT_MAX_BYTES": env.int("AGENTS_TOOL_OUTPUT_MAX_BYTES", default=1024 * 1024),
    # Threads that run the API's views (each keeps its database connection between requests).
    "HTTP_THREADS": env.int("AGENTS_HTTP_THREADS", default=64),
    # Bytes of session documents (as JSON) each process keeps parsed for the runs it executes.
    "DOCUMENT_CACHE_BYTES": env.int("AGENTS_DOCUMENT_CACHE_BYTES", default=8 * 1024 * 1024),
    # Seconds an LLM request may take before the run fails.
    "LLM_TIMEOUT": env.float("AGENTS_LLM_TIMEOUT", default=300.0),
    # Run lease: length and renewal period, in seconds (docs/sessions.md §4.2).
    "LEASE_SECONDS": env.float("AGENTS_LEASE_SECONDS", default=30.0),
    "LEASE_RENEW_SECONDS": env.float("AGENTS_LEASE_RENEW_SECONDS", default=10.0),
    # Periods of the periodic tasks, which every worker and embedded server runs, one process at a
    # time (docs/sessions.md §4.9): the run sweep and the event retention, in seconds.
    "SWEEP_EVERY_SECONDS": env.float("AGENTS_SWEEP_EVERY_SECONDS", default=10.0),
    "PRUNE_EVERY_SECONDS": env.float("AGENTS_PRUNE_EVERY_SECONDS", default=600.0),
    "IDEMPOTENCY_PRUNE_EVERY_SECONDS": env.float("AGENTS_IDEMPOTENCY_PRUNE_EVERY_SECONDS", default=600.0),
    # Seconds a connection may take to send a whole request head, from its opening or from its
    # previous answer; then it is closed (docs/api.md §1.5).
    "HEADER_TIMEOUT": env.float("AGENTS_HEADER_TIMEOUT", default=30.0),
    # Seconds a request's whole body may take to arrive after its head; then 408 (docs/api.md §1.5).
    "BODY_TIMEOUT": env.float("AGENTS_BODY_TIMEOUT", default=30.0),
    # Body limit in bytes (docs/api.md §1.1: 32 MiB).
    "MAX_BODY_BYTES": env.int("AGENTS_MAX_BODY_BYTES", default=32 * 1024 * 1024),
    "STREAM_TOKENS": env.bool("AGENTS_STREAM_TOKENS", default=False),
    # How deep helper agents may call helper agents (a child session per call).
    "MAX_SUBAGENT_DEPTH": env.int("AGENTS_MAX_SUBAGENT_DEPTH", default=8),
    # Seconds of silence after which an event stream sends a keepalive comment.
    "SSE_KEEPALIVE_SECONDS": env.float("AGENTS_SSE_KEEPALIVE_SECONDS", default=15.0),
    # Bytes of a tool result (or a user query) an event carries; a larger one is summarised with
    # its size, and a head turn over eight times this is summarised whole (docs/api.md §9.6).
    "EVENT_VALUE_MAX_BYTES": env.int("AGENTS_EVENT_VALUE_MAX_BYTES", default=16 * 1024),
    # Events older than this many seconds are pruned (replays from before them are unavailable).
    "EVENT_RETENTION_SECONDS": env.float("AGENTS_EVENT_RETENTION_SECONDS", default=24 * 3600.0),
    # Seconds an Idempotency-Key and its stored answer are kept (docs/api.md §1.7).
    "IDEMPOTENCY_TTL_SECONDS": env.float("AGENTS_IDEMPOTENCY_TTL_SECONDS", default=24 * 3600.0),
    # Seconds a request whose key another request holds waits for that one's answer, then 409.
    "IDEMPOTENCY_WAIT_SECONDS": env.float("AGENTS_IDEMPOTENCY_WAIT_SECONDS", default=10.0),
    # Bearer tokens file (docs/api.md §10.2); empty: authentication off.
    "AUTH_TOKENS_FILE": env("AGENTS_AUTH_TOKENS", default=""),
    # Owners allowed scope=all event streams and stored-agent edits (comma-separated).
    "ADMIN_OWNERS": [o.strip() for o in env("AGENTS_ADMIN_OWNERS", default="").split(",") if o.strip()],
    # Origins answered with CORS headers and let through the origin check (comma-separated).
    "CORS_ORIGINS": [o.strip() for o in env("AGENTS_CORS_ORIGINS", default="").split(",") if o.strip()],
    # Seconds a session's secret parameter values (held outside the database) outlive their last use.
    "SECRET_TTL_SECONDS": env.float("AGENTS_SECRET_TTL_SECONDS", default=24 * 3600.0),
    # Per-owner LLM keys files, "OWNER=FILE" entries separated by os.pathsep.
    "OWNER_API_KEYS": [e for e in env("AGENTS_OWNER_API_KEYS", default="").split(os.pathsep) if e.strip()],
    # The address `agents serve` listens on (--bind): the chat page is served on a loopback one.
    "BIND": env.str("AGENTS_BIND", default="127.0.0.1"),
    # --no-ui: no chat page at / (docs/guide-chat.md §1).
    "NO_UI": env.bool("AGENTS_NO_UI", default=False),
    # Bytes one attachment (a media item) may hold once decoded; larger ones answer 413.
    "MAX_ATTACHMENT_BYTES": env.int("AGENTS_MAX_ATTACHMENT_BYTES", default=20 * 1024 * 1024),
    # Webhooks (docs/webhooks.md): refuse loopback, private and link-local receivers (SSRF), on
    # by default when scaled out; seconds an attempt may take; bytes of a body at most; seconds
    # before each retry (comma-separated, about a day in all); failed deliveries in a row that
    # disable a subscription; seconds between two sweeps of the due deliveries.
    "WEBHOOK_BLOCK_PRIVATE": env.bool("AGENTS_WEBHOOK_BLOCK_PRIVATE", default=bool(REDIS_URL)),
    "WEBHOOK_TIMEOUT_SECONDS": env.float("AGENTS_WEBHOOK_TIMEOUT_SECONDS", default=10.0),
    "WEBHOOK_MAX_BODY_BYTES": env.int("AGENTS_WEBHOOK_MAX_BODY_BYTES", default=256 * 1024),
    "WEBHOOK_RETRY_SECONDS": [
        float(s)
        for s in env.str("AGENTS_WEBHOOK_RETRY_SECONDS", default="5,300,1800,7200,18000,36000,36000").split(",")
    ],
    "WEBHOOK_DISABLE_AFTER": env.int("AGENTS_WEBHOOK_DISABLE_AFTER", default=5),
    "WEBHOOK_SWEEP_SECONDS": env.float("AGENTS_WEBHOOK_SWEEP_SECONDS", default=1.0),
    # Scheduled runs (docs/webhooks.md §9): seconds between two sweeps of the due schedules (a
    # firing is at most this late), and the shortest interval a schedule may have.
    "SCHEDULE_SWEEP_SECONDS": env.float("AGENTS_SCHEDULE_SWEEP_SECONDS", default=1.0),
    "SCHEDULE_MIN_INTERVAL_SECONDS": env.float("AGENTS_SCHEDULE_MIN_INTERVAL_SECONDS", default=60.0),
}
DATA_UPLOAD_MAX_MEMORY_SIZE = None

# --- rest framework -------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_PARSER_CLASSES": ["foundation.parsers.AnyContentJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "foundation.parsers.AnyContentNegotiation",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "foundation.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "foundation.openapi.ApiAutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "agents-server",
    "DESCRIPTION": "Durable LLM agents over HTTP: sessions, runs, deferred tool calls and continuations.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": False,
    # a schedule's mode shares its field name with the sessions' run mode
    "ENUM_NAME_OVERRIDES": {"ScheduleModeEnum": ["new", "continue"]},
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "foundation.openapi.complete_schema"],
}

# --- the rest ---------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
# the chat page's script and stylesheet (templates/chat/page.html), served by the app itself
STATICFILES_DIRS = [BASE_DIR / "static"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "foundation.logging.JsonFormatter"}},
    "filters": {"without_traceback": {"()": "foundation.logging.WithoutTraceback"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    # an empty AGENTS_LOG_LEVEL means the default, as an unset one (docs/cli.md §1.2)
    "root": {"handlers": ["stderr"], "level": env.str("AGENTS_LOG_LEVEL", default="") or "INFO"},
    "loggers": {
        "django.server": {"level": "WARNING"},
        "django.request": {"level": "ERROR"},
        # a Host that is not allowed is the client's error (400), not the server's
        "django.security.DisallowedHost": {"filters": ["without_traceback"]},
        "daphne": {"level": "WARNING"},
        "celery": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        # the MCP SDK warns about what our own "tools.mcp" lines already say (a server gone)
        "mcp": {"level": "ERROR"},
        "kombu": {"level": "ERROR"},
        "openai": {"level": "WARNING"},
    },
}
