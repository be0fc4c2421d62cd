"""sessions_app/secrets.py: values held outside the database, encrypted in Redis under a key that
lives as long as the fleet of processes; and the narrowing of helper calls as data."""

from __future__ import annotations

import time

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured

from agentfiles.bindings import EVERYWHERE, ScopedBinding, descend, glob_matches, parse_address
from sessions_app.secrets import FLEET_KEY, FLEET_KEY_MISMATCH, MemoryStore, RedisStore


def test_values_are_encrypted_bound_to_their_slot_and_readable_while_the_fleet_lives(redis_url) -> None:
    first, second = RedisStore(redis_url), RedisStore(redis_url)
    first.join("a")
    first.change("s1", {"p:token": "s3cr3t-value", "r:run": {"otp": {"value": 1, "secret": False}}})
    # another process of the fleet reads them; Redis holds no value in the clear
    assert second.read("s1") == {"p:token": "s3cr3t-value", "r:run": {"otp": {"value": 1, "secret": False}}}
    raw = redis.Redis.from_url(redis_url)
    kinds = {key: raw.type(key) for key in raw.scan_iter()}
    dump = b"".join(b"".join(raw.hgetall(k).values()) for k, kind in kinds.items() if kind == b"hash")
    dump += b"".join(raw.get(k) or b"" for k, kind in kinds.items() if kind == b"string")
    assert b"s3cr3t" not in dump and b"otp" not in dump
    # a value copied into another session's slot does not decrypt there
    [held_key] = [k for k in raw.scan_iter("agents:held:*")]
    sealed = raw.hget(held_key, "p:token")
    raw.hset(held_key.replace(b"s1", b"s2"), "p:token", sealed)
    assert second.read("s2") == {}
    first.change("s1", {"p:token": None})
    assert second.read("s1") == {"r:run": {"otp": {"value": 1, "secret": False}}}
    first.forget("s1")
    assert second.read("s1") == {}
    raw.close()


def test_the_last_process_out_takes_the_key_with_it(redis_url) -> None:
    a, b = RedisStore(redis_url), RedisStore(redis_url)
    a.join("a")
    b.join("b")
    a.change("s", {"p:token": "v"})
    a.leave("a")
    assert b.read("s") == {"p:token": "v"}  # b still lives: a rolling restart keeps the values
    b.leave("b")
    assert b.read("s") == {} and redis.Redis.from_url(redis_url).get(FLEET_KEY) is None
    key_id, _ = a.join("a2")
    a.change("s", {"p:other": "w"})
    assert a.read("s") == {"p:other": "w"}
    assert key_id


def test_a_second_fleet_with_another_secret_key_on_the_same_redis_database_is_told_why(redis_url, settings) -> None:
    first = RedisStore(redis_url)
    first.join("a")
    first.change("s", {"p:token": "v"})
    settings.SECRET_KEY = "another fleet's secret key, not the first one's"
    with pytest.raises(ImproperlyConfigured) as refused:
        RedisStore(redis_url).join("b")
    assert str(refused.value) == FLEET_KEY_MISMATCH
    assert "DJANGO_SECRET_KEY" in str(refused.value) and "Redis database" in str(refused.value)
    # the first fleet and its values are untouched
    assert first.read("s") == {"p:token": "v"}


def test_a_fleet_whose_members_all_expired_starts_over(redis_url, settings) -> None:
    settings.AGENTS = {**settings.AGENTS, "LEASE_SECONDS": 0.3}
    store = RedisStore(redis_url)
    first_id, _ = store.join("crashed")
    store.change("s", {"p:token": "v"})
    time.sleep(0.5)
    second_id, _ = store.join("fresh")
    assert second_id != first_id and store.read("s") == {}


def test_memory_values_expire_after_their_time_to_live(settings) -> None:
    settings.AGENTS = {**settings.AGENTS, "SECRET_TTL_SECONDS": 0.2}
    store = MemoryStore()
    store.change("s", {"p:token": "v"})
    assert store.read("s") == {"p:token": "v"}
    time.sleep(0.3)
    assert store.read("s") == {}


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [(None, "bash_x", True), ("bash_git-*", "bash_git-log", True), ("bash_git-*", "bash_gh", False),
     ("mcp_*_read", "mcp_files_read", True), ("a.b", "axb", False), ("*", "", True)],
)
def test_globs_have_only_the_star(pattern, name, matches) -> None:
    assert glob_matches(pattern, name) is matches


def test_addresses_descend_the_tree() -> None:
    assert parse_address(None) == () and parse_address("a/b") == ("a", "b") and parse_address("**") == (EVERYWHERE,)
    assert parse_address("a//b") is None and parse_address(3) is None and parse_address("a/**") is None
    here = ScopedBinding((), None, "x", 1)
    everywhere = ScopedBinding((EVERYWHERE,), None, "y", 2, secret=True)
    deep = ScopedBinding(("a", "b"), "bash_*", "z", 3)
    other = ScopedBinding(("c",), None, "w", 4)
    assert descend([here, everywhere, deep, other], "a") == [everywhere, ScopedBinding(("b",), "bash_*", "z", 3)]
    assert descend(descend([deep], "a"), "b")[0].here and not deep.here and everywhere.here
    assert ScopedBinding.from_json(everywhere.to_json()) == everywhere and "2" not in repr(everywhere)
