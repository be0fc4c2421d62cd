"""Django's secret key: ``DJANGO_SECRET_KEY``, else a key file kept in the data directory.

It signs the admin's login sessions. There is no default key: on the embedded
default (SQLite) the ``agents`` commands make a random one the first time, in
``<data directory>/agents-secret-key`` (mode 0600), and every later start reads it, so the demo
needs no setting and admin logins outlive restarts. With PostgreSQL the file is read when it
exists but never made up: the processes sharing the database may run on several machines, and
a key made up by each would differ, so ``DJANGO_SECRET_KEY`` (or the same file in every
``AGENTS_DATA_DIR``) is required and the commands refuse to start without it.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from foundation.env import data_dir, database_url, env, sqlite_file

KEY_FILE = "agents-secret-key"


def secret_key() -> str:
    """The key the settings use; reads, never writes.

    Returns:
        ``DJANGO_SECRET_KEY``, else the key file's content, else ``""`` (Django then refuses to
        sign anything; the ``agents`` commands call :func:`ensure_secret_key` first).

    Raises:
        ImproperlyConfigured: the key file exists but cannot be read or is empty.
    """
    given = env.str("DJANGO_SECRET_KEY", default="")
    if given:
        return given
    directory = data_dir()
    return _read(directory / KEY_FILE) if directory is not None else ""


def ensure_secret_key() -> None:
    """Make sure :func:`secret_key` will find a key: on SQLite, write a random one to the key file
    when there is none yet. Called by the ``agents`` commands before Django starts.

    Raises:
        ImproperlyConfigured: no key and none may be made up (PostgreSQL, or in-memory SQLite,
            without ``DJANGO_SECRET_KEY`` or a key file), or the key file cannot be read or written;
            the message is one line and names ``DJANGO_SECRET_KEY``.
    """
    if secret_key():
        return
    directory = data_dir()
    if directory is None or sqlite_file(database_url()) is None:
        where = f"{directory / KEY_FILE}" if directory is not None else f"AGENTS_DATA_DIR/{KEY_FILE}"
        raise ImproperlyConfigured(
            "set DJANGO_SECRET_KEY: the processes sharing this database must share one secret key,"
            f" so none is made up (or put it in {where})"
        )
    _create(directory / KEY_FILE)


def _read(path: Path) -> str:
    try:
        key = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as error:
        message = f"cannot read the secret key file {path}: {error}; or set DJANGO_SECRET_KEY"
        raise ImproperlyConfigured(message) from error
    if not key:
        raise ImproperlyConfigured(f"the secret key file {path} is empty: remove it, or set DJANGO_SECRET_KEY")
    return key


def _create(path: Path) -> None:
    """Write a new random key to ``path`` unless another process got there first."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside (mkstemp makes it 0600) and linked into place, which fails if the file
        # appeared meanwhile: two processes starting at once end up with the same key, whole.
        descriptor, aside = tempfile.mkstemp(prefix=f".{KEY_FILE}-", dir=path.parent)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(secrets.token_urlsafe(50) + "\n")
            os.link(aside, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(aside)
    except OSError as error:
        raise ImproperlyConfigured(
            f"cannot write the secret key file {path}: {error.strerror or error}; or set DJANGO_SECRET_KEY"
        ) from error
