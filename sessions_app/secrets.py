"""Values a session holds outside the database (docs/guide-parameters.md §1; docs/sessions.md §10).

Three kinds of value must reach the process that runs a session's step, yet never be written to
PostgreSQL or SQLite, an event, an answer or a log:

* its secret session-scope parameter values (``p:<name>``);
* the message-scope values of a run (``r:<run id>``), dropped when the run stops;
* a helper session's narrowing (``n``): the bindings and values its caller gave it for the call.

They live in a :class:`HeldStore`, one hash of fields per session:

* embedded (no ``REDIS_URL``): :class:`MemoryStore`, in the memory of the one process that serves
  and runs everything; a restart forgets them.
* scaled out: :class:`RedisStore`. Every field is encrypted (AES-256-GCM, the session and field
  as associated data) with the *fleet key*, a random key that exists only while some server or
  worker is alive. The fleet key is kept in Redis wrapped (encrypted) with a key derived from
  ``DJANGO_SECRET_KEY``; every ``agents serve`` and ``agents worker`` is a member of the fleet
  (a sorted set of names and expiry times, renewed every ``AGENTS_LEASE_RENEW_SECONDS`` for
  ``AGENTS_LEASE_SECONDS``). When the last member leaves (a clean stop) or expires (a crash),
  the wrapped key is deleted, and the next member to join makes a new one: every value held
  before can no longer be decrypted, as a restart of the reference's single server forgets its
  secrets. A rolling restart, where some process stays up, keeps them.

Values also expire ``AGENTS_SECRET_TTL_SECONDS`` (a day) after a session last used them, and go
with their session. Reading a field that cannot be decrypted is reading nothing: the caller
then sees the parameter as unbound (``params_required``).
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import redis
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from redis.typing import EncodableT, FieldT

log = logging.getLogger("sessions.secrets")

#: Redis keys of the fleet: its members (a sorted set, expiry in ms) and its wrapped key.
MEMBERS_KEY = "agents:fleet:members"
FLEET_KEY = "agents:fleet:key"
#: The hash of one session's held values, under the id of the fleet key that encrypts them.
HELD_KEY = "agents:held:{key_id}:{session_id}"

# Join or renew: forget expired members; with none left, forget the key (its values die with it);
# add this member; keep the key, or install the candidate the caller brought. Returns the key.
_JOIN = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
redis.call('ZADD', KEYS[1], ms + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl * 2)
redis.call('SET', KEYS[2], ARGV[3], 'NX')
redis.call('PEXPIRE', KEYS[2], ttl)
return redis.call('GET', KEYS[2])
"""

# Leave: the last member out deletes the key.
_LEAVE = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
return 1
"""


#: Why a process cannot join a fleet whose key another ``DJANGO_SECRET_KEY`` wrapped.
FLEET_KEY_MISMATCH = (
    f"the fleet key in this Redis database ({FLEET_KEY}) was made by processes with another "
    "DJANGO_SECRET_KEY: every agents serve and agents worker sharing a REDIS_URL database must have the "
    "same DJANGO_SECRET_KEY; give a second fleet a Redis database of its own"
)


def _ttl() -> float:
    return float(settings.AGENTS["SECRET_TTL_SECONDS"])


class HeldStore(Protocol):
    """A session's held values: a hash of fields (JSON values), per session."""

    def read(self, session_id: str) -> dict[str, Any]:
        """Every field of the session (``{}`` when none); reading renews their time to live."""
        ...

    def change(self, session_id: str, updates: Mapping[str, Any]) -> None:
        """Set fields; a ``None`` value deletes the field."""
        ...

    def forget(self, session_id: str) -> None:
        """Delete every field of the session."""
        ...


class MemoryStore:
    """The embedded store: this process's memory, entries dropped after the time to live."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}

    def read(self, session_id: str) -> dict[str, Any]:
        """See :meth:`HeldStore.read`."""
        now = time.monotonic()
        with self._lock:
            self._entries = {k: v for k, v in self._entries.items() if now - v[0] < _ttl()}
            entry = self._entries.get(session_id)
            if entry is None:
                return {}
            self._entries[session_id] = (now, entry[1])
            return json.loads(json.dumps(entry[1]))

    def change(self, session_id: str, updates: Mapping[str, Any]) -> None:
        """See :meth:`HeldStore.change`."""
        with self._lock:
            fields = dict(self._entries.get(session_id, (0.0, {}))[1])
            for name, value in updates.items():
                if value is None:
                    fields.pop(name, None)
                else:
                    fields[name] = json.loads(json.dumps(value))
            if fields:
                self._entries[session_id] = (time.monotonic(), fields)
            else:
                self._entries.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """See :meth:`HeldStore.forget`."""
        with self._lock:
            self._entries.pop(session_id, None)


def _wrapping_key() -> AESGCM:
    """The key that wraps the fleet key in Redis, derived from ``DJANGO_SECRET_KEY``."""
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"agents-server", info=b"held values fleet key")
    return AESGCM(derived.derive(settings.SECRET_KEY.encode("utf-8")))


class RedisStore:
    """The scaled-out store: encrypted fields in Redis, readable while the fleet lives."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_keepalive=True, health_check_interval=30)
        self._join = self._client.register_script(_JOIN)
        self._leave = self._client.register_script(_LEAVE)
        self._wrap = _wrapping_key()

    # -- the fleet ------------------------------------------------------------------------------

    def join(self, member: str) -> tuple[str, AESGCM]:
        """Join (or renew) ``member``; return the fleet key's id and the key."""
        key_id, key = uuid.uuid4().hex[:16], AESGCM.generate_key(bit_length=256)
        nonce = os.urandom(12)
        candidate = json.dumps(
            {"id": key_id, "key": base64.b64encode(nonce + self._wrap.encrypt(nonce, key, b"fleet")).decode()}
        )
        ttl_ms = int(float(settings.AGENTS["LEASE_SECONDS"]) * 1000)
        stored = self._join(keys=[MEMBERS_KEY, FLEET_KEY], args=[member, ttl_ms, candidate])
        try:
            return self._unwrap(stored)
        except InvalidTag:
            # cryptography's own message is the bare class name: say what is wrong, and the fix
            raise ImproperlyConfigured(FLEET_KEY_MISMATCH) from None

    def leave(self, member: str) -> None:
        """Leave the fleet; the last one out deletes the key."""
        self._leave(keys=[MEMBERS_KEY, FLEET_KEY], args=[member])

    def _unwrap(self, stored: bytes | str) -> tuple[str, AESGCM]:
        document = json.loads(stored)
        raw = base64.b64decode(document["key"])
        return document["id"], AESGCM(self._wrap.decrypt(raw[:12], raw[12:], b"fleet"))

    def _key(self, *, create: bool) -> tuple[str, AESGCM] | None:
        """The fleet key; when there is none, a new one (joining as this process) if ``create``."""
        stored = self._client.get(FLEET_KEY)
        if stored is not None:
            try:
                return self._unwrap(stored)
            except (InvalidTag, ValueError, KeyError):
                log.error("fleet key unreadable", extra={"kind": "secrets.fleet_key_unreadable"})
                return None
        return self.join(member_name()) if create else None

    # -- values ---------------------------------------------------------------------------------

    def read(self, session_id: str) -> dict[str, Any]:
        """See :meth:`HeldStore.read`; fields that do not decrypt are left out."""
        found = self._key(create=False)
        if found is None:
            return {}
        key_id, key = found
        name = HELD_KEY.format(key_id=key_id, session_id=session_id)
        raw = self._client.hgetall(name)
        if not raw:
            return {}
        self._client.expire(name, int(_ttl()))
        fields = {}
        for field, sealed in raw.items():
            # bytes: the client does not decode answers (redis' types allow both)
            field = field.decode() if isinstance(field, bytes) else field
            try:
                data = base64.b64decode(sealed)
                plain = key.decrypt(data[:12], data[12:], f"{session_id}:{field}".encode())
            except (InvalidTag, ValueError):
                continue
            fields[field] = json.loads(plain)
        return fields

    def change(self, session_id: str, updates: Mapping[str, Any]) -> None:
        """See :meth:`HeldStore.change`."""
        found = self._key(create=True)
        assert found is not None  # noqa: S101 - narrows the type (never checks input)
        key_id, key = found
        name = HELD_KEY.format(key_id=key_id, session_id=session_id)
        removed = [field for field, value in updates.items() if value is None]
        sealed: dict[FieldT, EncodableT] = {}
        for field, value in updates.items():
            if value is not None:
                nonce = os.urandom(12)
                cipher = key.encrypt(nonce, json.dumps(value).encode(), f"{session_id}:{field}".encode())
                sealed[field] = base64.b64encode(nonce + cipher)
        with self._client.pipeline() as pipe:
            if removed:
                pipe.hdel(name, *removed)
            if sealed:
                pipe.hset(name, mapping=sealed)
                pipe.expire(name, int(_ttl()))
            pipe.execute()

    def forget(self, session_id: str) -> None:
        """See :meth:`HeldStore.forget`."""
        found = self._key(create=False)
        if found is not None:
            self._client.delete(HELD_KEY.format(key_id=found[0], session_id=session_id))


_lock = threading.Lock()
_store: HeldStore | None = None
_membership: threading.Thread | None = None
_stop = threading.Event()


def member_name() -> str:
    """This process's name in the fleet (host, pid)."""
    return f"{os.uname().nodename}:{os.getpid()}"


def store() -> HeldStore:
    """This process's store: Redis when ``REDIS_URL`` is set, else memory."""
    global _store
    with _lock:
        if _store is None:
            _store = RedisStore(settings.REDIS_URL) if settings.REDIS_URL else MemoryStore()
        return _store


def join_fleet() -> None:
    """Make this process a member of the fleet until it exits (``agents serve`` and ``agents worker``
    with Redis): joins now, renews from a thread, leaves at exit. Without Redis, nothing to do."""
    global _membership
    held = store()
    if not isinstance(held, RedisStore):
        return
    with _lock:
        if _membership is not None:
            return
        name = member_name()
        held.join(name)

        def renew() -> None:
            while not _stop.wait(float(settings.AGENTS["LEASE_RENEW_SECONDS"])):
                try:
                    held.join(name)
                except redis.RedisError:
                    log.warning("fleet renewal failed", extra={"kind": "secrets.fleet_renewal_failed"})

        _membership = threading.Thread(target=renew, name="fleet-membership", daemon=True)
        _membership.start()
        atexit.register(leave_fleet)


def leave_fleet() -> None:
    """Stop renewing and leave the fleet (a clean stop); safe to call twice."""
    global _membership
    _stop.set()
    held = _store
    if _membership is None or not isinstance(held, RedisStore):
        return
    _membership = None
    try:
        held.leave(member_name())
    except redis.RedisError:
        log.warning("fleet leave failed", extra={"kind": "secrets.fleet_leave_failed"})


def names_of(fields: Iterable[str], prefix: str) -> list[str]:
    """The names of the fields with ``prefix``, without it, sorted."""
    return sorted(field[len(prefix):] for field in fields if field.startswith(prefix))
