"""Server-sent-event views: ``GET /v1/sessions/:id/events`` and ``GET /v1/events``.

Plain async Django views (DRF has no streaming async views). Frames are written as soon as they
exist: daphne does not buffer, and the answer says ``X-Accel-Buffering: no`` for proxies.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from django.http import HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase

from foundation.access import principal_for
from foundation.auth import Principal
from foundation.errors import ApiError, BadRequest, Forbidden, MethodNotAllowed, UnknownSession, json_error
from sessions_app import streams
from sessions_app.access import can_see
from sessions_app.models import Session
from sessions_app.serializers import meta_view
from sessions_app.streams import OpenedStream, Scope


def _after(request: HttpRequest) -> int | None:
    # a browser's EventSource resends Last-Event-ID on reconnect, which is newer than ?after
    header = request.headers.get("Last-Event-ID")
    return streams.parse_after(header if header not in (None, "") else request.GET.get("after"))


def _response(opened: OpenedStream) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[str]:
        # an empty first chunk makes daphne send the headers (and Agents-Replay) right away,
        # before any frame exists
        yield ""
        if opened.snapshot is not None:
            yield f"event: snapshot\ndata: {_compact(opened.snapshot)}\n\n"
        async for batch in opened.frames:
            yield ": keepalive\n\n" if batch is None else "".join(frame.sse() for frame in batch)

    response = StreamingHttpResponse(body(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    response["Agents-Replay"] = opened.replay
    return response


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _caller(request: HttpRequest, session_id: str | None) -> Principal:
    """The caller of a stream request: tokens as for the REST API, plus ``?access_token=``; a
    method other than GET is refused once the caller is known, as the viewsets do.

    Raises:
        Unauthorized: no valid token (authentication on).
        MethodNotAllowed: not a GET.
    """
    principal = await streams.in_db_thread(lambda: principal_for(request, session_id=session_id, query_token=True))
    if request.method not in ("GET", "HEAD"):
        raise MethodNotAllowed(f'Method "{request.method}" not allowed.')
    return principal


async def session_events(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """One session's events: a snapshot first on a fresh connection, then every change."""
    try:
        principal = await _caller(request, session_id)
    except ApiError as error:
        return json_error(error)
    sid = streams.session_uuid(session_id)
    if sid is None:
        return json_error(UnknownSession(session_id))
    try:
        after = _after(request)
    except ValueError:
        return json_error(BadRequest("Last-Event-ID / after must be a non-negative integer"))
    # another owner's session is answered as a missing one (docs/api.md §9.2, §10.3)
    if not await streams.in_db_thread(lambda: can_see(principal, sid)):
        return json_error(UnknownSession(session_id))

    def snapshot() -> dict:
        return meta_view(Session.objects.get(pk=sid))

    opened = await streams.open_stream(Scope(session_id=str(sid)), after, snapshot)
    return _response(opened)


def events_scope(principal: Principal, requested: str | None) -> Scope:
    """The events ``/v1/events`` (or its websocket) sends this caller (docs/api.md §9.3).

    Without authentication every session's (there are no owners); with it, ``owner`` (the default)
    is the caller's sessions and their sub-sessions, and ``all`` needs an admin owner.

    Raises:
        ApiError: 400 ``bad_request`` for another scope; 403 ``forbidden`` for ``all`` by a
            non-admin.
    """
    if requested not in (None, "owner", "all"):
        raise BadRequest("scope must be owner or all")
    if principal.kind == "anonymous":
        return Scope(everyone=True)
    if requested == "all":
        if not principal.admin:
            raise Forbidden("scope=all is for admin owners; use scope=owner")
        return Scope(everyone=True)
    return Scope(owner=principal.owner, everyone=False)


async def all_events(request: HttpRequest) -> HttpResponseBase:
    """Every session's events the caller may see (``scope=owner|all``)."""
    try:
        scope = events_scope(await _caller(request, None), request.GET.get("scope"))
    except ApiError as error:
        return json_error(error)
    try:
        after = _after(request)
    except ValueError:
        return json_error(BadRequest("Last-Event-ID / after must be a non-negative integer"))
    opened = await streams.open_stream(scope, after, None)
    return _response(opened)
