"""Who is calling: bearer tokens, owners, admin owners, session tokens and allowed origins.

Implements the configuration side of docs/api.md §10.2, §10.4, §10.5, §10.7 and §10.8: the
tokens file, admin owners, the shape of session tokens, the loopback rule of the origin check and
the ``--cors-origin`` list. The request side (middleware, websocket guard) is in
``foundation.access``.

Tokens are never kept in clear: the tokens file may give a token or its SHA-256, and both end up
as a digest in memory; a presented token is hashed and compared with every digest in constant
time. Nothing here logs a token, a digest or a header.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from django.conf import settings

if TYPE_CHECKING:
    from rest_framework.request import Request

#: Session tokens are ``st_`` followed by the hex of 32 random bytes (docs/api.md §10.5).
SESSION_TOKEN_PREFIX = "st_"  # noqa: S105 - a name or a code, not a credential
#: Hosts of the origins that pass the origin check without being listed (docs/api.md §10.7).
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class AuthConfigError(Exception):
    """The authentication flags cannot be used; the message says which and why (startup refuses)."""


@dataclass(frozen=True)
class Principal:
    """The caller of one request.

    Attributes:
        kind: ``"anonymous"`` (authentication is off), ``"owner"`` (an owner's bearer token) or
            ``"session"`` (a session token, valid on one session only).
        owner: the owner for ``"owner"``; the session's owner for ``"session"``; ``None`` when off.
        admin: whether the owner is listed in ``--admin-owners``.
        session_id: the session a session token belongs to (as text), else ``None``.
    """

    kind: str
    owner: str | None = None
    admin: bool = False
    session_id: str | None = None

    @property
    def is_session_token(self) -> bool:
        """Whether the caller holds a session token rather than an owner's token."""
        return self.kind == "session"


#: The caller when authentication is off: full access, no owner (docs/api.md §10.1).
ANONYMOUS = Principal(kind="anonymous")


def caller(request: Request) -> Principal:
    """The caller of an API request: the Principal that ``foundation.permissions.BearerAuthentication``
    puts on ``request.user`` of every API view (docs/api.md §10.1).

    DRF's stubs type ``request.user`` as Django's user model, which this API never authenticates.
    """
    return cast(Principal, request.user)


@dataclass(frozen=True)
class AuthConfig:
    """The authentication settings of this process, checked once.

    Attributes:
        enabled: ``--auth-tokens`` was given (even a file with no token turns authentication on).
        digests: ``(sha256 digest, owner)`` for every token of the file.
        admin_owners: owners allowed ``scope=all`` and stored-agent edits.
        cors_origins: the listed origins, normalised by :func:`normalize_origin`.
        cors_any: ``--cors-origin '*'`` was given (refused together with authentication).
    """

    enabled: bool
    digests: tuple[tuple[bytes, str], ...] = ()
    admin_owners: frozenset[str] = frozenset()
    cors_origins: frozenset[str] = frozenset()
    cors_any: bool = False

    def owner_of(self, token: str) -> str | None:
        """The owner of a bearer token, ``None`` when the file has no such token.

        Every digest is compared, with :func:`hmac.compare_digest`, whatever matched before: the
        time taken does not depend on which entry (if any) matches.
        """
        presented = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: str | None = None
        for digest, owner in self.digests:
            if hmac.compare_digest(presented, digest) and found is None:
                found = owner
        return found

    def principal_for(self, owner: str) -> Principal:
        """The principal of an owner's bearer token."""
        return Principal(kind="owner", owner=owner, admin=owner in self.admin_owners)

    def origin_listed(self, origin: str | None) -> bool:
        """Whether ``origin`` (the request's ``Origin`` header) is listed with ``--cors-origin``."""
        if origin is None:
            return False
        if self.cors_any:
            return True
        normalized = normalize_origin(origin)
        return normalized is not None and normalized in self.cors_origins

    def origin_allowed(self, origin: str | None) -> bool:
        """The origin check (docs/api.md §10.7): no ``Origin``, a loopback host or a listed origin passes.

        Only applies without authentication; with it every origin passes.
        """
        if self.enabled or origin is None:
            return True
        return is_loopback_origin(origin) or self.origin_listed(origin)


def load_tokens_file(path: str | Path) -> tuple[tuple[bytes, str], ...]:
    """Read ``{"tokens": [{"owner", "sha256"} | {"owner", "token"}, ...]}`` (docs/api.md §10.2).

    Several entries may name the same owner.

    Returns:
        ``(sha256 digest, owner)`` per entry, in file order.
    Raises:
        AuthConfigError: the file is missing or unreadable, is not JSON, an entry is malformed, or
            one token is listed for two owners (the message names the entry, never a token).
    """
    file = Path(path).expanduser()
    try:
        document = json.loads(file.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise AuthConfigError(f"{file}: auth tokens file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AuthConfigError(f"{file}: cannot read the auth tokens file: {exc}") from None
    except json.JSONDecodeError as exc:
        raise AuthConfigError(f"{file}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(document, dict) or not isinstance(document.get("tokens"), list):
        raise AuthConfigError(f'{file}: expected {{"tokens": [{{"owner": ..., "sha256" or "token": ...}}, ...]}}')
    entries: list[tuple[bytes, str]] = []
    for index, entry in enumerate(document["tokens"]):
        where = f"{file}: tokens[{index}]"
        if not isinstance(entry, dict):
            raise AuthConfigError(f"{where}: expected an object")
        owner = entry.get("owner")
        if not isinstance(owner, str) or not owner:
            raise AuthConfigError(f"{where}: 'owner' must be a non-empty string")
        has_digest, has_token = "sha256" in entry, "token" in entry
        if has_digest == has_token:
            raise AuthConfigError(f"{where}: give exactly one of 'sha256' and 'token'")
        if has_token:
            token = entry["token"]
            if not isinstance(token, str) or not token:
                raise AuthConfigError(f"{where}: 'token' must be a non-empty string")
            if token.startswith(SESSION_TOKEN_PREFIX):
                # such a token would be taken for a session token on every request
                raise AuthConfigError(f"{where}: a token must not start with {SESSION_TOKEN_PREFIX!r}")
            entries.append((hashlib.sha256(token.encode("utf-8")).digest(), owner))
        else:
            digest = entry["sha256"]
            try:
                raw = bytes.fromhex(digest) if isinstance(digest, str) else b""
            except ValueError:
                raw = b""
            if len(raw) != 32:
                raise AuthConfigError(f"{where}: 'sha256' must be 64 hexadecimal digits")
            entries.append((raw, owner))
    owners_by_digest: dict[bytes, str] = {}
    for index, (digest, owner) in enumerate(entries):
        if owners_by_digest.setdefault(digest, owner) != owner:
            # one token cannot say who is calling when two owners hold it
            raise AuthConfigError(f"{file}: tokens[{index}]: the same token is listed for another owner")
    return tuple(entries)


#: An origin's authority: a host name or IPv4 address, or a whole bracketed IPv6 address, then an
#: optional port; no userinfo (as RFC 3986 and RFC 6454 write an origin).
_AUTHORITY = re.compile(
    r"(?:(?P<name>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)|\[(?P<ipv6>[0-9A-Fa-f:.]+)\])(?::(?P<port>[0-9]{1,5}))?"
)


def _origin_parts(value: str) -> tuple[str, str, int | None] | None:
    """``(scheme, host, port)`` of an origin, lower-cased, an IPv6 host bracketed; ``None`` when
    ``value`` is not an origin (see :func:`normalize_origin`)."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    # the host is matched against the grammar, not taken from urlsplit, which reads the host of
    # http://[::1].evil.com as ::1
    authority = _AUTHORITY.fullmatch(parts.netloc)
    if authority is None:
        return None
    host = authority.group("name")
    if host is None:
        try:
            host = f"[{ipaddress.IPv6Address(authority.group('ipv6')).compressed}]"
        except ValueError:
            return None
    port = authority.group("port")
    if port is not None and int(port) > 65535:
        return None
    return parts.scheme.lower(), host.lower(), int(port) if port is not None else None


def normalize_origin(value: str) -> str | None:
    """``scheme://host[:port]`` with scheme and host lower-cased, or ``None`` when not an origin.

    The port is kept as written (``https://a.example`` and ``https://a.example:443`` differ: the
    match is exact, docs/api.md §10.8). ``null`` and anything with a path, query or credentials is not an
    origin, nor is a host that is neither a name, an IPv4 address nor a whole bracketed IPv6
    address (``http://[::1].evil.com``).
    """
    parts = _origin_parts(value)
    if parts is None:
        return None
    scheme, host, port = parts
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


#: The loopback hosts as :func:`_origin_parts` writes them.
_LOOPBACK_ORIGIN_HOSTS = frozenset(f"[{host}]" if ":" in host else host for host in LOOPBACK_HOSTS)


def is_loopback_origin(origin: str) -> bool:
    """Whether an ``Origin`` names localhost, 127.0.0.1 or [::1], with any scheme and port.

    ``Origin: null`` (sandboxed frames, file pages), malformed values and hosts that merely begin
    with a loopback name (``http://[::1].evil.com``, ``http://localhost.evil.com``) are not loopback.
    """
    parts = _origin_parts(origin)
    return parts is not None and parts[1] in _LOOPBACK_ORIGIN_HOSTS


def build_auth_config(tokens_file: str, admin_owners: list[str], cors_origins: list[str]) -> AuthConfig:
    """Check the authentication flags together and build the configuration (docs/api.md §10.9).

    Args:
        tokens_file: ``--auth-tokens``; ``""`` leaves authentication off.
        admin_owners: ``--admin-owners`` entries.
        cors_origins: ``--cors-origin`` entries (``*`` allowed only without authentication).
    Raises:
        AuthConfigError: an unreadable tokens file, ``--admin-owners`` without ``--auth-tokens``,
            ``*`` with ``--auth-tokens``, or a ``--cors-origin`` that is not an origin.
    """
    enabled = bool(tokens_file)
    digests = load_tokens_file(tokens_file) if enabled else ()
    if admin_owners and not enabled:
        raise AuthConfigError("--admin-owners needs --auth-tokens")
    listed: set[str] = set()
    cors_any = False
    for origin in cors_origins:
        if origin == "*":
            if enabled:
                raise AuthConfigError("--cors-origin '*' cannot be used with --auth-tokens")
            cors_any = True
            continue
        normalized = normalize_origin(origin)
        if normalized is None:
            raise AuthConfigError(f"--cors-origin {origin!r} is not an origin like https://app.example.com[:port]")
        listed.add(normalized)
    return AuthConfig(
        enabled=enabled,
        digests=digests,
        admin_owners=frozenset(admin_owners),
        cors_origins=frozenset(listed),
        cors_any=cors_any,
    )


@functools.cache
def auth_config() -> AuthConfig:
    """This process's configuration, from ``settings.AGENTS`` (read once).

    Raises:
        AuthConfigError: see :func:`build_auth_config` (``agents serve`` checks it before serving).
    """
    config = settings.AGENTS
    return build_auth_config(config["AUTH_TOKENS_FILE"], config["ADMIN_OWNERS"], config["CORS_ORIGINS"])


def new_session_token() -> tuple[str, str]:
    """A fresh session token and the SHA-256 hex digest that is stored instead of it."""
    token = SESSION_TOKEN_PREFIX + secrets.token_hex(32)
    return token, token_sha256(token)


def token_sha256(token: str) -> str:
    """The SHA-256 hex digest of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def session_token_matches(token: str, stored_sha256: str | None) -> bool:
    """Whether ``token`` is the session token whose digest is stored (constant-time compare)."""
    if not stored_sha256:
        return False
    return hmac.compare_digest(token_sha256(token), stored_sha256)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def describe_for_log(config: AuthConfig) -> dict[str, Any]:
    """What the startup log says about authentication (never a token or a digest)."""
    return {
        "authentication": "bearer" if config.enabled else "none",
        "owners": len({owner for _, owner in config.digests}),
        "admin_owners": sorted(config.admin_owners),
        "cors_origins": ["*"] if config.cors_any else sorted(config.cors_origins),
    }
