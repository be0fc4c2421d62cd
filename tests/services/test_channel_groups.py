"""The channel layer's groups in the embedded default (docs/api.md §9.8): a consumer in the server's
process, joined to a session's or an owner's group, hears that session's commits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from channels.layers import BaseChannelLayer, get_channel_layer
from django.db import transaction

from sessions_app import events, hub
from sessions_app.event_types import EventKind, RunStopped
from tests.factories import SessionFactory


class ServerLoop:
    """An event loop on a thread of its own, standing for the ASGI server's."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def run(self, coroutine: Any, timeout: float = 5.0) -> Any:
        """Run ``coroutine`` on the loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        """Stop the loop."""
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def server_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerLoop]:
    """This process joined to the in-memory layer on a fresh server loop, as at the ASGI
    application's first connection."""
    monkeypatch.setattr(hub, "_listener_started", False)
    monkeypatch.setattr(hub, "_memory_loop", None)
    server = ServerLoop()

    async def first_connection() -> None:
        hub.start_listener()

    server.run(first_connection())
    yield server
    server.close()


async def _join(*groups: str) -> str:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    for group in groups:
        await layer.group_add(group, channel)
    return channel


async def _receive(channel: str) -> dict[str, Any]:
    return await get_channel_layer().receive(channel)


def _nothing_for(server: ServerLoop, channel: str) -> bool:
    try:
        server.run(_receive(channel), timeout=0.3)
    except TimeoutError:
        return True
    return False


@pytest.mark.django_db
def test_a_sessions_and_its_owners_groups_hear_its_events_and_no_other_sessions(
    server_loop: ServerLoop, django_capture_on_commit_callbacks: Any
) -> None:
    owner = "user:ann@example.com"
    with django_capture_on_commit_callbacks(execute=True):
        session = SessionFactory(owner=owner)
        other = SessionFactory(owner="user:bob")
    mine = server_loop.run(_join(hub.session_group(session.pk)))
    owners = server_loop.run(_join(hub.owner_group(owner)))
    elsewhere = server_loop.run(_join(hub.session_group(other.pk)))
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        events.emit(EventKind.RUN_STOPPED, session.pk, owner, RunStopped(status="idle"))
        newest = events.emit(EventKind.RUN_STOPPED, session.pk, owner, RunStopped(status="idle"))
    # one commit, one wake-up naming the newest event it wrote
    expected = {"type": "agents.session.changed", "session_id": str(session.pk), "seq": newest.seq}
    assert server_loop.run(_receive(mine)) == expected
    assert server_loop.run(_receive(owners)) == expected
    assert _nothing_for(server_loop, mine) and _nothing_for(server_loop, elsewhere)


@pytest.mark.django_db
def test_a_rolled_back_change_sends_nothing(server_loop: ServerLoop, django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        session = SessionFactory()
    mine = server_loop.run(_join(hub.session_group(session.pk)))
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            events.emit(EventKind.RUN_STOPPED, session.pk, None, RunStopped(status="idle"))
            raise RuntimeError("rolled back")
    assert _nothing_for(server_loop, mine)


@pytest.mark.parametrize("owner", ["key:a", "user:ann@example.com", "ünïcode owner/with spaces", "x" * 500, ""])
def test_an_owners_group_name_is_valid_for_channels_and_its_own(owner: str) -> None:
    group = hub.owner_group(owner)
    BaseChannelLayer().require_valid_group_name(group)
    assert group.startswith("agents.owner.") and group != hub.owner_group(owner + " ")


def test_a_sessions_group_name_is_valid_and_refuses_what_is_not_a_session_id() -> None:
    sid = "0b6a3e1c-2f4d-4c1a-9a9e-3f1c2b4d5e6f"
    BaseChannelLayer().require_valid_group_name(hub.session_group(sid))
    assert hub.session_group(sid) == f"agents.session.{sid}"
    with pytest.raises(ValueError):
        hub.session_group("../agents.events")
