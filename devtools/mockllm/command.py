"""The command line of mock-llm: ``agents mock-llm`` and ``python -m devtools.mockllm``."""

from __future__ import annotations

import argparse
import sys
import time

from devtools.mockllm.script import load_script
from devtools.mockllm.server import MockLlmServer


def serve_forever(script_path: str, host: str, port: int) -> None:
    """Serve ``script_path`` on ``host:port`` until interrupted (the ``agents mock-llm`` command).

    Prints one line ``mock-llm listening on <url> (<n> rules)`` on stderr once the socket is
    bound, then logs each request on stderr.

    Raises:
        ValueError: the script is invalid (see :func:`load_script`).
        OSError: the address cannot be bound.
    """
    script = load_script(script_path)
    server = MockLlmServer(script, host=host, port=port, verbose=True).start()
    print(f"mock-llm listening on {server.url} ({len(script['rules'])} rules)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m devtools.mockllm --script FILE [--host H] [--port P]``; returns the exit code."""
    parser = argparse.ArgumentParser(prog="mock-llm", description="Scripted OpenAI-compatible LLM server.")
    parser.add_argument("--script", required=True, help="the JSON script file (format: see the devtools.mockllm docs)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args(argv)
    try:
        serve_forever(args.script, args.host, args.port)
    except (ValueError, OSError) as err:
        print(f"mock-llm: {err}", file=sys.stderr)
        return 2
    return 0
