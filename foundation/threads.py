"""The threads that run the API's views: a pool, each thread with its database connection kept.

Under ASGI, Django runs each request's synchronous view on a thread made for that request, so a
connection kept between requests (``CONN_MAX_AGE``) would be opened on every request and left
behind with its thread. The API's views run on the threads of one pool instead (at most
``AGENTS_HTTP_THREADS``, made as requests need them and then reused), each keeping its own
connection from request to request. A ``wait=true`` request holds its thread while it waits.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor | None:
    """The pool, made on first use; ``None`` when ``AGENTS_HTTP_THREADS`` is 0."""
    global _pool
    with _lock:
        if _pool is None and settings.AGENTS["HTTP_THREADS"] > 0:
            _pool = ThreadPoolExecutor(settings.AGENTS["HTTP_THREADS"], thread_name_prefix="http")
        return _pool


def _call(view: Callable[..., HttpResponse], request: HttpRequest, args: Any, kwargs: Any) -> HttpResponse:
    # a connection broken since the thread's last request is replaced, not reused
    close_old_connections()
    response = view(request, *args, **kwargs)
    # a lazily rendered answer is rendered here, where its database reads may run
    render = getattr(response, "render", None)
    if callable(render) and not getattr(response, "is_rendered", True):
        response = render()
    return response


def pooled(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
    """``view`` (synchronous) as an async view that runs it on the pool.

    Args:
        view: a Django view function (e.g. a viewset's ``as_view(...)``).
    Returns:
        An async view function with the same attributes (``csrf_exempt`` and the like); ``view``
        itself when ``AGENTS_HTTP_THREADS`` is 0 (the test suite's own process, whose test client
        calls views on its own thread, inside the test's transaction).
    """
    if settings.AGENTS["HTTP_THREADS"] == 0:
        return view

    @functools.wraps(view)
    async def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        pool = _executor()
        assert pool is not None  # noqa: S101 - narrows the type (never checks input)
        # the view runs in the request's context: its trace span is the parent of what it starts
        call = functools.partial(contextvars.copy_context().run, _call, view, request, args, kwargs)
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    return run
