"""Running one short-lived process in a process group of its own (docs/tools.md §3).

:func:`run_process` starts a command in a new session, feeds its stdin, reads stdout and stderr
without blocking on either, stops it on timeout or cancellation, and ends its whole process group
(SIGTERM, then SIGKILL :data:`KILL_GRACE` seconds later) before returning. Both ``describe`` and
``run`` calls of bash tools go through it.

* A call ends its whole process group: when the main process has exited and stdout/stderr are
  drained (end-of-file, or :data:`EXIT_DRAIN_GRACE` seconds when a background child still holds
  them open), whatever is left in the group gets SIGTERM, then SIGKILL :data:`KILL_GRACE`
  seconds later, as on a timeout or a cancellation. A tool that wants a daemon must detach it
  on purpose (``setsid``, which starts a new session and so a new group, with its output
  redirected).
* stdout is kept up to the ``max_stdout`` bytes the caller gives (the cap on a tool's output);
  beyond that it is still read, so that the process is not blocked on a full pipe, but only
  counted. Memory stays within that cap plus a few 64 KiB buffers (one read, stderr's tail).
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Protocol, cast

#: Seconds between SIGTERM and SIGKILL to the process group (as agents-exe waits).
KILL_GRACE = 0.1
#: Seconds to wait for end-of-file on stdout/stderr after the main process exited.
EXIT_DRAIN_GRACE = 0.5
#: Characters of stderr (or stdout) quoted in an error text.
ERROR_TAIL_CHARS = 2000
#: Bytes asked of a pipe per read.
_READ_BYTES = 65536
#: Bytes of stderr kept (only its tail is ever used).
_STDERR_KEEP = 64 * 1024
#: How often (seconds) the wait loop checks for process exit, deadline and cancellation.
_POLL_INTERVAL = 0.05


class OutputWatcher(Protocol):
    """Told what a process prints while it runs (the bash tools' progress lines)."""

    def feed(self, stream: str, data: bytes) -> None:
        """``data`` was read from ``stream`` (``stdout`` or ``stderr``)."""

    def tick(self) -> None:
        """Called at every turn of the wait loop (at least every 50 ms), output or not."""


@dataclass
class ProcessOutcome:
    """What :func:`run_process` observed.

    ``returncode`` is negative when a signal ended the process (``-9`` for SIGKILL) and ``None``
    only if the process could not be reaped. ``stdout`` holds at most the ``max_stdout`` first
    bytes, out of ``stdout_bytes`` printed in all; ``stderr`` holds at most the last 64 KiB.
    """

    returncode: int | None
    stdout: bytearray
    stderr: bytes
    stdout_bytes: int
    timed_out: bool = False
    cancelled: bool = False

    @property
    def stdout_truncated(self) -> bool:
        """Whether the process printed more on stdout than ``stdout`` holds."""
        return self.stdout_bytes > len(self.stdout)


def _has_exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the main process has exited, without reaping it.

    Until it is reaped its pid, which is also the group id, cannot go to another process, so
    :func:`_end_group` may still signal the group without hitting a stranger.
    """
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): gone all the same
        return True


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it ``KILL_GRACE`` seconds later.

    SIGKILL goes to the group even when the leader died of SIGTERM, because grandchildren may
    ignore SIGTERM. The group id is the leader's pid (``start_new_session=True``). The leader is
    reaped on the way; a group where nobody is left costs no wait.
    """
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return  # nobody left in the group
    try:
        proc.wait(timeout=KILL_GRACE)
    except subprocess.TimeoutExpired:
        pass
    else:
        # The leader is gone, but members that ignore SIGTERM may remain: give them the rest of
        # the grace, polling whether anyone is left (signal 0 only checks).
        until = time.monotonic() + KILL_GRACE
        while time.monotonic() < until:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.01)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_process(
    argv: list[str],
    *,
    stdin_data: bytes | None,
    env: Mapping[str, str] | None,
    timeout: float | None,
    max_stdout: int,
    cancel: threading.Event | None = None,
    watcher: OutputWatcher | None = None,
) -> ProcessOutcome:
    """Run ``argv`` in a new session (own process group) and collect stdout and stderr.

    When the call returns, nothing is left of the process group: once the main process has
    exited and its output is drained (or after a timeout or a cancellation), the group gets
    SIGTERM, then SIGKILL :data:`KILL_GRACE` seconds later. A child that must outlive the call
    has to leave the group itself (``setsid``).

    Args:
        argv: the command line; ``argv[0]`` is the executable.
        stdin_data: bytes written to stdin before it is closed; ``None`` means ``/dev/null``.
        env: the full environment of the child (``None`` inherits ours).
        timeout: seconds before the whole group is killed; ``None`` for no limit.
        max_stdout: bytes of stdout kept; the rest is read and counted, not kept.
        cancel: when set, the group is killed as on timeout.
        watcher: told each piece of output as it is read, in this thread.
    Returns:
        a :class:`ProcessOutcome`; never raises for the child's behaviour.
    Raises:
        OSError / ValueError: when the process cannot be started (missing file, no execute
            permission, environment too large, NUL byte in an argument).
    """
    proc = subprocess.Popen(  # noqa: S603 - the argv of a tool the agent file names; no shell (docs/tools.md §3.4)
        argv,
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        close_fds=True,
    )
    started = time.monotonic()
    deadline = started + timeout if timeout is not None else None
    stdout = bytearray()
    stdout_bytes = 0
    stderr = bytearray()
    timed_out = cancelled = False
    ended = False
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 - narrows the type (never checks input)
    try:
        pending = memoryview(stdin_data or b"")
        if proc.stdin is not None:
            if pending:
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)

        def pump(wait: float) -> None:
            nonlocal pending, stdout_bytes
            for key, _ in sel.select(wait):
                stream = key.fileobj
                if stream is proc.stdin:
                    try:
                        # At most PIPE_BUF bytes: such a write to a pipe reported writable
                        # does not block.
                        written = os.write(key.fd, pending[: select.PIPE_BUF])
                    except OSError:
                        written = len(pending)  # the child stopped reading; drop the rest
                    pending = pending[written:]
                    if not pending:
                        sel.unregister(stream)
                        stream.close()
                    continue
                data = os.read(key.fd, _READ_BYTES)
                if not data:
                    sel.unregister(stream)
                    cast(IO[bytes], stream).close()  # the selector holds the child's pipes, never bare fds
                elif stream is proc.stdout:
                    stdout_bytes += len(data)
                    room = max_stdout - len(stdout)
                    if room > 0:
                        stdout.extend(data[:room])
                    if watcher is not None:
                        watcher.feed("stdout", data)
                else:
                    stderr.extend(data)
                    if len(stderr) > _STDERR_KEEP:
                        del stderr[: len(stderr) - _STDERR_KEEP]
                    if watcher is not None:
                        watcher.feed("stderr", data)

        exited_at: float | None = None
        idle_delay = 0.0005
        while True:
            now = time.monotonic()
            if _has_exited(proc):
                # The main process is done: read what is left, but do not wait forever on pipes
                # a detached grandchild may keep open.
                if exited_at is None:
                    exited_at = now
                if not sel.get_map() or now - exited_at >= EXIT_DRAIN_GRACE:
                    break
            else:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                if deadline is not None and now >= deadline:
                    timed_out = True
                    break
            if watcher is not None:
                watcher.tick()
            wait = _POLL_INTERVAL
            if deadline is not None and exited_at is None:
                wait = max(0.0, min(wait, deadline - now))
            if sel.get_map():
                pump(wait)
            else:
                # Pipes closed but the process still runs: usually it is exiting at this very
                # moment, so poll soon, then less and less often (as subprocess's wait does).
                time.sleep(min(idle_delay, wait))
                idle_delay = min(idle_delay * 2, _POLL_INTERVAL)

        # Whatever the call started ends with it, not only on timeout or cancellation: a
        # background child left in the group would otherwise run forever, unseen.
        _end_group(proc)
        ended = True
        # Collect whatever the dying group flushed, briefly.
        drain_until = time.monotonic() + KILL_GRACE
        while sel.get_map() and time.monotonic() < drain_until:
            pump(max(0.0, drain_until - time.monotonic()))
        try:
            returncode: int | None = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
    except BaseException:
        if not ended:
            _end_group(proc)
        raise
    finally:
        for key in list(sel.get_map().values()):
            sel.unregister(key.fileobj)
            cast(IO[bytes], key.fileobj).close()
        sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()
    return ProcessOutcome(
        returncode=returncode,
        stdout=stdout,  # not copied into bytes: the cap bounds memory, not twice the cap
        stderr=bytes(stderr),
        stdout_bytes=stdout_bytes,
        timed_out=timed_out,
        cancelled=cancelled,
    )


def tail_text(data: bytes | bytearray, limit: int = ERROR_TAIL_CHARS) -> str:
    """The last ``limit`` characters of ``data`` decoded as UTF-8 (invalid bytes replaced),
    stripped, with a leading ``…`` when something was cut; for quoting output in error texts."""
    text = data.decode("utf-8", errors="replace").strip()
    if len(text) > limit:
        return "…" + text[-limit:]
    return text


def format_seconds(seconds: float | None) -> str:
    """``seconds`` as an error text shows it: ``"0.5s"``, ``"600s"``; ``"?s"`` for ``None``."""
    return f"{seconds:g}s" if seconds is not None else "?s"
