"""The cap on what a tool call returns: every tool kind, and bash tools reading no more than it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tools_app.base import Tool, ToolContext, ToolResult, configured_output_max_bytes, response_bytes
from tools_app.bash.loading import describe_script, load_single_tool
from tools_app.bash.process import run_process
from tools_app.bash.protocol import DescribeError

from .conftest import make_ctx, script

MIB = 1024 * 1024
FLOOD = 20_000_000


class ReturnsTool(Tool):
    """An in-process tool kind that returns whatever it is given, as a future tool kind might."""

    def __init__(self, response: Any) -> None:
        self.name = "returns"
        self.description = "returns a fixed response"
        self.parameters = {"type": "object", "properties": {}}
        self.response = response

    def run(self, arguments: dict, ctx: ToolContext) -> ToolResult:
        return ToolResult(self.response)


def test_the_cap_comes_from_the_settings(settings):
    assert configured_output_max_bytes() == MIB  # the default
    settings.AGENTS = {**settings.AGENTS, "TOOL_OUTPUT_MAX_BYTES": 1234}
    assert make_ctx().output_max_bytes == 1234


@pytest.mark.integration
def test_the_environment_variable_sets_it():
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.AGENTS['TOOL_OUTPUT_MAX_BYTES'])"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentsite.settings", "AGENTS_TOOL_OUTPUT_MAX_BYTES": "4096"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "4096"


def test_a_bash_tool_printing_20_mb_gets_the_cap_and_a_note():
    tool = load_single_tool(script("flood.sh"))
    tool.call({"bytes": 10}, make_ctx())  # warm up imports and caches outside the measure
    tracemalloc.start()
    try:
        started = time.monotonic()
        result = tool.call({"bytes": FLOOD}, make_ctx(timeout=60))
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.is_error is False
    size = response_bytes(result.response)
    assert size <= MIB
    head, note = result.response.rsplit("\n", 1)
    assert set(head) == {"x"}
    assert note == f"[output truncated: {len(head)} of {FLOOD} bytes kept]"
    assert size > MIB - 100  # the cap is used, not some smaller amount
    # Reading keeps at most the cap; cutting and decoding make a few copies of it. Keeping the
    # whole output (or 16 MiB of it, as before the cap) would be far above this.
    assert peak < 6 * MIB, f"peak {peak / MIB:.1f} MiB"
    assert elapsed < 20


def test_the_reader_holds_no_more_than_the_cap():
    argv = ["bash", "-c", f"head -c {FLOOD} /dev/zero | tr '\\0' x"]
    run_process(argv, stdin_data=None, env=None, timeout=60, max_stdout=10)
    tracemalloc.start()
    try:
        outcome = run_process(argv, stdin_data=None, env=None, timeout=60, max_stdout=MIB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome.returncode == 0
    assert len(outcome.stdout) == MIB and outcome.stdout_bytes == FLOOD and outcome.stdout_truncated
    assert peak < MIB + 512 * 1024, f"peak {peak / MIB:.2f} MiB"


def test_text_is_cut_between_characters():
    text = "é" * 600  # two bytes each
    result = ReturnsTool(text).call({}, make_ctx(output_max_bytes=200))
    assert response_bytes(result.response) <= 200
    head, note = result.response.rsplit("\n", 1)
    assert head == "é" * (len(head))
    kept = len(head.encode())
    assert kept % 2 == 0 and kept > 100
    assert note == f"[output truncated: {kept} of 1200 bytes kept]"


def test_output_within_the_cap_is_untouched():
    for response in ["x" * 100, {"type": "json", "content": {"a": 1}}]:
        assert ReturnsTool(response).call({}, make_ctx(output_max_bytes=100)).response == response
    result = load_single_tool(script("flood.sh")).call({"bytes": 100}, make_ctx(output_max_bytes=100))
    assert result.response == "x" * 100


def test_a_bash_tool_exactly_one_byte_over():
    result = load_single_tool(script("flood.sh")).call({"bytes": 101}, make_ctx(output_max_bytes=100))
    assert response_bytes(result.response) <= 100
    assert result.response.endswith(" of 101 bytes kept]")


def test_json_over_the_cap_becomes_cut_text():
    content = {"rows": list(range(1000))}
    result = ReturnsTool({"type": "json", "content": content}).call({}, make_ctx(output_max_bytes=300))
    assert isinstance(result.response, str) and response_bytes(result.response) <= 300
    text = json.dumps(content)
    assert result.response.startswith(text[:100])
    assert result.response.endswith(f" of {len(text)} bytes kept]")


def test_media_over_the_cap_is_dropped():
    image = load_single_tool(script("image.sh"))
    # 10 bytes printed, 8 kept while reading: cut binary data is useless
    result = image.call({}, make_ctx(output_max_bytes=8))
    assert result.is_error
    assert result.response == (
        "Error: tool bash_image returned 10 bytes (media, image/png), more than the 8 bytes "
        "a tool's output may take; it was dropped"
    )
    # all 10 bytes read, but the base64 result is over the cap
    result = image.call({}, make_ctx(output_max_bytes=40))
    assert result.is_error and "(media, image/png), more than the 40 bytes" in result.response
    assert image.call({}, make_ctx(output_max_bytes=1000)).is_error is False


def test_errors_are_capped_too(tmp_path: Path):
    exe = tmp_path / "loud-failure.sh"
    exe.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then echo \'{"slug": "loud", "description": "d", "args": []}\'; exit; fi\n'
        "head -c 5000 /dev/zero | tr '\\0' e >&2; exit 1\n"
    )
    exe.chmod(0o755)
    result = load_single_tool(exe).call({}, make_ctx(output_max_bytes=500))
    assert result.is_error
    assert result.response.startswith("Error: tool bash_loud exited with code 1: ")
    assert response_bytes(result.response) <= 500 and "[output truncated: " in result.response


def test_a_tool_kind_cannot_skip_the_cap():
    with pytest.raises(TypeError, match="overrides Tool.call"):

        class Uncapped(Tool):
            def call(self, arguments: dict, ctx: ToolContext) -> ToolResult:
                return ToolResult("x" * 10_000_000)


def test_a_huge_describe_is_refused(tmp_path: Path):
    exe = tmp_path / "huge-describe.sh"
    exe.write_text("#!/usr/bin/env bash\nhead -c 3000000 /dev/zero\n")
    exe.chmod(0o755)
    with pytest.raises(DescribeError, match="describe printed 3000000 bytes, more than 1048576"):
        describe_script(exe)
