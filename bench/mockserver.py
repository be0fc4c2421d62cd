"""The benchmarks' scripted model: ``devtools.mockllm`` in a process of its own, timing its answers.

    .venv/bin/python bench/mockserver.py --script SCRIPT.json --port PORT

It serves the same script format and answers as ``agents mock-llm`` (it is the same
:class:`~devtools.mockllm.MockLlmServer`), without logging every request, and adds two routes:

- ``GET /_bench/timings``: ``{"count": n, "seconds": [...]}``, the time each chat-completions
  request took on the model's side, from the moment its request line was read to the moment the
  answer was written (reading the body, choosing the rule, any scripted ``delay``, writing the
  answer), oldest first, and forgets them;
- ``GET /_bench/ping``: 200, to wait for the server to be up.

It also forgets the recorded request bodies every 1,000 requests (``POST /_mock/reset``), so a
long benchmark does not grow its memory; the benchmarks' scripts never use ``times``, whose
counters that reset clears too.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.mockllm import MockLlmServer, load_script  # noqa: E402

#: Recorded request bodies are forgotten after this many requests.
FORGET_EVERY = 1000


def timed_server(script: dict[str, Any], host: str, port: int) -> MockLlmServer:
    """A :class:`MockLlmServer` whose handler records the time of each chat-completions answer."""
    mock = MockLlmServer(script, host=host, port=port, verbose=False)
    httpd = mock._httpd  # the socketserver of MockLlmServer: its handler class is swapped below
    base: Any = httpd.RequestHandlerClass
    lock = threading.Lock()
    timings: list[float] = []
    served = [0]

    class TimedHandler(base):  # type: ignore[misc, valid-type]
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            started = time.perf_counter()
            super().do_POST()
            if "chat/completions" in self.path:
                elapsed = time.perf_counter() - started
                with lock:
                    timings.append(elapsed)
                    served[0] += 1
                    forget = served[0] % FORGET_EVERY == 0
                if forget:
                    mock.reset()

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/_bench/timings"):
                with lock:
                    taken = list(timings)
                    timings.clear()
                self._send_json(200, {"count": len(taken), "seconds": taken})
            elif self.path.startswith("/_bench/ping"):
                self._send_json(200, {"ok": True})
            else:
                super().do_GET()

    httpd.RequestHandlerClass = TimedHandler
    return mock


def main() -> int:
    """Serve the script until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    mock = timed_server(load_script(args.script), args.host, args.port).start()
    print(json.dumps({"url": mock.url}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    mock.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
