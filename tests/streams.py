"""Stream clients for tests: a server-sent-events reader and a websocket reader, in threads."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import websockets


class SseReader:
    """Reads a server-sent-event stream in a thread, keeping every frame as the raw text it was.

    ``frames`` holds each frame's text (without the blank line that ends it); keepalive comments
    are frames too (``": keepalive"``).
    """

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.frames: list[str] = []
        self.response_headers: dict[str, str] = {}
        self.status: int | None = None
        self.connected = threading.Event()
        self.closed = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.connected.wait(30):
            raise AssertionError(f"could not connect to {url}")

    def _run(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(60, read=120)) as client:
                with client.stream("GET", self.url, headers=self.headers) as response:
                    self.status = response.status_code
                    self.response_headers = dict(response.headers)
                    self.connected.set()
                    buffer = ""
                    for chunk in response.iter_text():
                        buffer += chunk
                        while "\n\n" in buffer:
                            frame, buffer = buffer.split("\n\n", 1)
                            with self._lock:
                                self.frames.append(frame)
                        if self._stop.is_set():
                            return
        except httpx.HTTPError:
            pass
        finally:
            self.connected.set()
            self.closed.set()

    def events(self) -> list[dict[str, Any]]:
        """The frames parsed: ``{"id", "event", "data"}`` (comments left out)."""
        with self._lock:
            frames = list(self.frames)
        parsed = []
        for frame in frames:
            if frame.startswith(":"):
                continue
            fields: dict[str, Any] = {"id": None}
            for line in frame.split("\n"):
                name, _, value = line.partition(": ")
                fields[name] = value
            fields["data"] = json.loads(fields["data"])
            parsed.append(fields)
        return parsed

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until ``predicate(self.events())`` holds; return the events."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.events()
            if predicate(events):
                return events
            time.sleep(0.02)
        raise AssertionError(f"stream {self.url} did not get there; it has {[e.get('event') for e in self.events()]}")

    def raw(self) -> list[str]:
        """The raw frames received so far."""
        with self._lock:
            return list(self.frames)

    def close(self) -> None:
        """Stop reading (the connection is dropped at the next chunk or on shutdown)."""
        self._stop.set()


class WsReader:
    """Reads a websocket stream in a thread, keeping every message's text."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.messages: list[str] = []
        self.connected = threading.Event()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.connected.wait(30):
            raise AssertionError(f"could not connect to {url}")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._read())
        try:
            self._loop.run_until_complete(self._task)
        except (asyncio.CancelledError, websockets.ConnectionClosed):
            pass
        finally:
            self.connected.set()

    async def _read(self) -> None:
        async with websockets.connect(self.url) as socket:
            self.connected.set()
            async for message in socket:
                with self._lock:
                    self.messages.append(message if isinstance(message, str) else message.decode())

    def parsed(self) -> list[dict[str, Any]]:
        """The messages decoded."""
        with self._lock:
            return [json.loads(m) for m in self.messages]

    def raw(self) -> list[str]:
        """The messages as received."""
        with self._lock:
            return list(self.messages)

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until ``predicate(self.parsed())`` holds; return the messages."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = self.parsed()
            if predicate(messages):
                return messages
            time.sleep(0.02)
        raise AssertionError(f"websocket {self.url} did not get there; it has {self.parsed()}")

    def close(self) -> None:
        """Drop the connection."""
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self.thread.join(10)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    """The ``event`` names of parsed events."""
    return [e["event"] for e in events]


def stopped_with(status: str) -> Callable[[list[dict[str, Any]]], bool]:
    """A predicate: the stream has a ``run.stopped`` with ``status``."""
    return lambda events: any(e["event"] == "run.stopped" and e["data"]["status"] == status for e in events)
