"""Limits on requests enforced by the HTTP server itself (docs/api.md §1.5).

daphne serves HTTP with Twisted's ``HTTPChannel``, which closes a connection whose request line
or header line is longer than 16 KiB without answering, answers a bare ``400`` (no body) when
all the headers together are, or when a request is malformed (a NUL in a header value, a header
line without a colon, a bad chunk), leaves a connection that never finishes its headers open for
twelve hours, and one whose body trickles in for as long as a byte comes every minute.
:class:`LimitedChannel` answers the first two in the API's error shape, 414 ``uri_too_long`` and
431 ``headers_too_large``, every malformed request 400 ``bad_request`` (a header value holding a
control character included: Twisted refuses NUL, CR and LF only), closes a connection that has not
sent a whole request head within ``AGENTS_HEADER_TIMEOUT`` seconds of opening, or of its previous
answer, and answers 408 ``request_timeout`` to a request whose body has not all arrived within
``AGENTS_BODY_TIMEOUT`` seconds of its head, so that slow or idle clients cannot hold the
server's file descriptors. :func:`install` makes daphne build its connections from it.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel

from foundation.errors import ApiError, BadRequest, HeadersTooLarge, RequestTimeout, UriTooLong

#: Bytes of a request head (request line and headers together), and of any one line of it.
MAX_HEAD_BYTES = 16 * 1024

_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
}
#: Bytes a header value may not hold (RFC 9110, "Field Values"): the control characters but HTAB, and DEL.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F])


def error_bytes(error: ApiError) -> bytes:
    """A whole HTTP/1.1 answer for ``error``, in the one error shape, that closes the connection."""
    body = json.dumps(error.body(), separators=(",", ":"), ensure_ascii=False).encode()
    head = (
        f"HTTP/1.1 {error.status} ".encode()
        + _REASONS.get(error.status, b"Error")
        + b"\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    return head + body


class LimitedChannel(HTTPChannel):
    """An ``HTTPChannel`` with the request limits of this module (heads, bodies, malformed requests).

    Attributes:
        head_timeout: seconds a connection may take to send a whole request head, counted from
            its opening or from the end of its previous answer (``AGENTS_HEADER_TIMEOUT``).
        body_timeout: seconds a request's whole body may take to arrive, counted from the end of
            its head (``AGENTS_BODY_TIMEOUT``).
    """

    MAX_LENGTH = MAX_HEAD_BYTES
    totalHeadersSize = MAX_HEAD_BYTES
    head_timeout: float = 30.0
    body_timeout: float = 30.0
    _head_timer: Any = None
    _body_timer: Any = None

    def connectionMade(self) -> None:
        """A new connection: its first request head is timed from now."""
        super().connectionMade()
        self._start_head_timer()

    def lineReceived(self, line: bytes) -> None:
        """Refuse a head over the limit in the error shape (Twisted would answer a bare 400)."""
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._refuse(request_line=self._reading_request_line())
            return
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        """One line over the limit: the request line (its URL) is 414, a header line 431."""
        self._refuse(request_line=self._reading_request_line())

    def headerReceived(self, line: bytes) -> bool:
        """Refuse a header value holding a control character (400 in the error shape); Twisted
        checks the rest of the line. Returns whether the header was valid."""
        _, colon, value = line.partition(b":")
        if colon and len(value.translate(None, _CONTROL_BYTES)) != len(value):
            self._answer(BadRequest("header values must not contain control characters"))
            return False
        return bool(super().headerReceived(line))

    def allHeadersReceived(self) -> None:
        """The head is complete: a body that follows is timed; once it is in, the rest of the
        exchange (the answer, an event stream) has no time limit here."""
        self._stop_head_timer()
        super().allHeadersReceived()
        if self.length != 0:
            self._body_timer = self.callLater(self.body_timeout, self._body_too_slow)

    def allContentReceived(self) -> None:
        """The body is complete: it is no longer timed."""
        self._stop_body_timer()
        super().allContentReceived()

    def requestDone(self, request: Any) -> None:
        """The answer is sent: a kept-alive connection has ``head_timeout`` for its next request."""
        super().requestDone(request)
        if not self._handlingRequest and getattr(self.transport, "connected", False):
            self._start_head_timer()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        """The connection is gone: nothing is timed any more."""
        self._stop_head_timer()
        self._stop_body_timer()
        super().connectionLost(reason)

    def _respondToBadRequestAndDisconnect(self) -> None:
        """Twisted's answer to a malformed request (a bare ``400``), in the error shape."""
        self._answer(BadRequest("malformed HTTP request"))

    def _reading_request_line(self) -> bool:
        # HTTPChannel's own flag: set while the next line is a request line
        return bool(getattr(self, "_HTTPChannel__first_line", 0))

    def _refuse(self, *, request_line: bool) -> None:
        limit = f"{MAX_HEAD_BYTES} bytes"
        self._answer(UriTooLong(limit) if request_line else HeadersTooLarge(limit))

    def _answer(self, error: ApiError) -> None:
        """Answer ``error`` and close the connection: no request of it reaches the application."""
        self._stop_head_timer()
        self._stop_body_timer()
        if self.transport is not None:
            self.transport.write(error_bytes(error))
        # the connection is closing: Twisted reads no further line of it
        self.loseConnection()

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.callLater(self.head_timeout, self._head_too_slow)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None and self._head_timer.active():
            self._head_timer.cancel()
        self._head_timer = None

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None and self._body_timer.active():
            self._body_timer.cancel()
        self._body_timer = None

    def _body_too_slow(self) -> None:
        self._body_timer = None
        if self.transport is not None and not self._handlingRequest:
            self._answer(RequestTimeout(f"{self.body_timeout:g} seconds"))

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self.transport is not None:
            # no answer: a client this slow (or this idle) is not waiting for one
            self.transport.loseConnection()


def install(head_timeout: float, body_timeout: float) -> None:
    """Make daphne's servers of this process build their connections as :class:`LimitedChannel`.

    daphne creates its HTTP factory inside ``Server.run``; the factory class it names is replaced
    here by one whose connections are limited (call before ``run``).

    Args:
        head_timeout: :attr:`LimitedChannel.head_timeout`, in seconds.
        body_timeout: :attr:`LimitedChannel.body_timeout`, in seconds.
    """
    from daphne import server as daphne_server
    from daphne.http_protocol import HTTPFactory

    class LimitedHTTPFactory(HTTPFactory):
        """daphne's factory, building :class:`LimitedChannel` connections."""

        def protocol(self) -> LimitedChannel:
            """A connection of this factory (Twisted's factories call ``self.protocol()``)."""
            channel = LimitedChannel()
            channel.head_timeout = head_timeout
            channel.body_timeout = body_timeout
            return channel

    daphne_server.HTTPFactory = LimitedHTTPFactory
