"""Websocket versions of the event streams: ``/v1/ws/sessions/:id`` and ``/v1/ws/events``.

The same events and replay rules as the server-sent-event streams (docs/api.md §9.5). The
first message says the replay mode, ``{"event": "replay", "data": {"replay": "live"}}``; then
comes the snapshot (``{"event": "snapshot", "data": {...}}``) on a fresh per-session stream,
then one message per event: ``{"id": seq, "event": kind, "data": {...}}``, ``data`` being the
very JSON the SSE stream sends. Resume with ``?after=<seq>``.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer

from foundation.access import identify
from foundation.errors import ApiError
from sessions_app import streams
from sessions_app.access import can_see
from sessions_app.models import Session
from sessions_app.serializers import meta_view
from sessions_app.sse import events_scope
from sessions_app.streams import Scope


class EventsConsumer(AsyncWebsocketConsumer):
    """Streams events to one websocket until it closes."""

    # Events come from the process's fanout (sessions_app.streams), not from a channel layer.
    channel_layer_alias = "no-layer"

    async def connect(self) -> None:
        """Check the request, accept, and start sending.

        Every refusal closes before accepting, which answers the handshake with 403 whatever the
        reason (docs/api.md §9.5): like a missing session over REST, it tells a stranger nothing.
        """
        query = parse_qs(self.scope.get("query_string", b"").decode())
        try:
            after = streams.parse_after(next(iter(query.get("after") or []), None))
        except ValueError:
            await self.close()
            return
        session_id = self.scope["url_route"]["kwargs"].get("session_id")
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self.scope["headers"]}
        token = next(iter(query.get("access_token") or []), None)
        try:
            principal = await streams.in_db_thread(lambda: identify(headers.get("authorization"), token, session_id))
        except ApiError:
            await self.close()
            return
        snapshot = None
        if session_id is None:
            try:
                scope = events_scope(principal, next(iter(query.get("scope") or []), None))
            except ApiError:
                await self.close()
                return
        else:
            sid = streams.session_uuid(session_id)
            # another owner's session is refused as a missing one
            visible = sid is not None and await streams.in_db_thread(lambda: can_see(principal, sid))
            if not visible:
                await self.close()
                return
            assert sid is not None  # noqa: S101 - narrows the type (a visible session has an id)
            scope = Scope(session_id=str(sid))

            def snapshot() -> dict:
                return meta_view(Session.objects.get(pk=sid))

        opened = await streams.open_stream(scope, after, snapshot)
        await self.accept()
        self.sender = asyncio.get_running_loop().create_task(self._send_all(opened))

    async def _send_all(self, opened: streams.OpenedStream) -> None:
        await self.send(text_data=json.dumps({"event": "replay", "data": {"replay": opened.replay}}))
        if opened.snapshot is not None:
            await self.send(text_data=json.dumps({"event": "snapshot", "data": opened.snapshot}, separators=(",", ":")))
        last_kind = ""
        async for batch in opened.frames:
            for frame in batch or ():
                await self.send(text_data=frame.message())
                last_kind = frame.kind
        # the stream ended: the session was deleted (a normal end), or the server is shutting down
        await self.close(code=1000 if last_kind == "session.deleted" else 1001)

    async def disconnect(self, code: int) -> None:
        """Stop sending."""
        sender = getattr(self, "sender", None)
        if sender is not None:
            sender.cancel()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Clients do not send anything; incoming messages are ignored."""


class NotFoundConsumer(AsyncWebsocketConsumer):
    """Any other websocket path: refused at the handshake (403) rather than an error."""

    channel_layer_alias = "no-layer"

    async def connect(self) -> None:
        """Refuse the connection."""
        await self.close()
