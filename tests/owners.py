"""Helpers for the authentication tests: a tokens file, bearer headers, refusals checked over HTTP."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.harness import Server

#: The owners of the tests and their tokens. Bob's is given to the server as a SHA-256 only.
TOKENS = {"alice": "alice-secret-token-1", "bob": "bob-secret-token-2", "root": "root-secret-token-3"}
#: A second token of alice's (several tokens may share an owner).
ALICE_SECOND = "alice-second-token-4"
#: Tables whose rows a refused request must leave alone.
TABLES = ("sessions_app_session", "sessions_app_continuation", "agents_app_storedagent")


def write_tokens(directory: Path) -> Path:
    """A tokens file with both entry shapes; returns its path."""
    path = directory / "tokens.json"
    entries = [
        {"owner": "alice", "token": TOKENS["alice"]},
        {"owner": "alice", "token": ALICE_SECOND},
        {"owner": "bob", "sha256": hashlib.sha256(TOKENS["bob"].encode()).hexdigest()},
        {"owner": "root", "token": TOKENS["root"]},
    ]
    path.write_text(json.dumps({"tokens": entries}))
    return path


def bearer(token: str) -> dict[str, str]:
    """An ``Authorization: Bearer`` header."""
    return {"Authorization": f"Bearer {token}"}


def owner(name: str) -> dict[str, str]:
    """The bearer header of one of :data:`TOKENS`' owners."""
    return bearer(TOKENS[name])


def snapshot(db: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of :data:`TABLES` in a SQLite database."""
    with sqlite3.connect(db) as connection:
        return {table: sorted(connection.execute(f"SELECT * FROM {table}").fetchall(), key=repr) for table in TABLES}


def refused(
    server: Server,
    method: str,
    path: str,
    status: int,
    code: str,
    *,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> dict[str, Any]:
    """Send a request that must be refused with ``status`` / ``code`` and change nothing stored.

    Returns:
        The error body.
    """
    before = snapshot(server.db)
    content = json.dumps(body) if body is not None else None
    answer = server.client.request(method, path, headers=headers or {}, content=content)
    assert answer.status_code == status, f"{method} {path}: {answer.status_code} {answer.text}"
    payload = answer.json()
    assert set(payload) == {"error", "message"} and payload["error"] == code and payload["message"], payload
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert snapshot(server.db) == before, f"{method} {path} changed the database"
    return payload


def ws_open(url: str, headers: dict[str, str] | None = None, origin: str | None = None) -> str | int:
    """Open a websocket: its first message when the handshake is accepted, else the HTTP status."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    try:
        with connect(url, additional_headers=headers, origin=origin, proxy=None, open_timeout=10) as socket:
            message = socket.recv(timeout=10)
            return message if isinstance(message, str) else message.decode()
    except InvalidStatus as error:
        return error.response.status_code
