"""``--isolate-tools``: a worker's answer too long to keep whole is capped like any tool output
(docs/guide-toolboxes.md §5; tools_app.base.cap_result), not reported as "not JSON".

In-process: ``sessions_app.isolation.run`` with a real worker process (``process:PATH``) that
prints the answer its call's ``mode`` argument names.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from sessions_app import isolation
from tools_app.base import ToolContext, ToolResult

MIB = 1024 * 1024

#: The worker: prints a 50 MiB answer (or another, as "mode" says) for the envelope's token.
WORKER = """#!{python}
import json, sys
envelope = json.load(sys.stdin)
mode = json.loads(envelope["toolCall"]["function"]["arguments"])["mode"]
token = envelope["token"]
big = "sunny " * (50 * 1024 * 1024 // 6)
if mode == "text":
    answer = {{"token": token, "status": "success", "result": big}}
elif mode == "escaped":
    text = {{"type": "text", "content": "é\\n" * (2 * 1024 * 1024)}}
    answer = {{"token": token, "status": "success", "result": text}}
elif mode == "media":
    media = {{"type": "media", "mimeType": "image/png", "base64Data": "A" * len(big)}}
    answer = {{"token": token, "status": "success", "result": media}}
elif mode == "result-first":
    answer = {{"result": big, "status": "success", "token": token}}
elif mode == "error":
    answer = {{"token": token, "status": "error", "error": "no forecast: " + big}}
else:
    answer = {{"token": "not-the-token", "status": "success", "result": big}}
sys.stdout.write(json.dumps(answer))
"""


@pytest.fixture
def worker(tmp_path: Path, settings) -> Path:
    path = tmp_path / "worker"
    path.write_text(WORKER.format(python=sys.executable))
    path.chmod(0o755)
    settings.AGENTS = {**settings.AGENTS, "ISOLATE_TOOLS": f"process:{path}"}
    return path


def _call(mode: str, output_max_bytes: int = MIB) -> ToolResult:
    function = {"name": "bash_weather", "arguments": json.dumps({"mode": mode})}
    call = {"id": "call_1", "type": "function", "function": function}
    context = ToolContext(
        session_id=str(uuid.uuid4()),
        conversation_id=str(uuid.uuid4()),
        turn_id=str(uuid.uuid4()),
        agent_slug="forecaster",
        tool_call_id="call_1",
        timeout=120,
        output_max_bytes=output_max_bytes,
    )
    return isolation.run(call, context)


def _printed(mode: str) -> int:
    """The size of the answer the worker prints for ``mode``, as it prints it."""
    big = "sunny " * (50 * MIB // 6)
    token = "x" * 36
    answers = {
        "text": {"token": token, "status": "success", "result": big},
        "escaped": {"token": token, "status": "success", "result": {"type": "text", "content": "é\n" * (2 * MIB)}},
        "result-first": {"result": big, "status": "success", "token": token},
    }
    return len(json.dumps(answers[mode]).encode())


def test_a_50_mib_text_answer_is_cut_to_the_cap_with_the_usual_note(worker: Path) -> None:
    result = _call("text")
    assert not result.is_error
    text = result.response
    assert isinstance(text, str) and len(text.encode()) <= MIB
    body, note = text.rsplit("\n", 1)
    assert body.startswith("sunny sunny ") and set(body.split(" ")) <= {"sunny", "sunn", "sun", "su", "s", ""}
    assert note == f"[output truncated: {len(body.encode())} of {_printed('text')} bytes kept]"
    assert len(body.encode()) > MIB - 100


def test_a_cut_text_part_keeps_whole_characters_and_decoded_escapes(worker: Path) -> None:
    result = _call("escaped", output_max_bytes=4096)
    body, note = result.response.rsplit("\n[output truncated: ", 1)
    assert len(result.response.encode()) <= 4096 and body.strip("é\n") == "" and body.startswith("é\né\n")
    assert note == f"{len(body.encode())} of {_printed('escaped')} bytes kept]"


def test_a_too_long_media_answer_is_dropped_as_any_tool_media_is(worker: Path) -> None:
    result = _call("media")
    assert result.is_error
    assert result.response.startswith("Error: tool bash_weather returned ")
    assert result.response.endswith(
        f"(media, image/png), more than the {MIB} bytes a tool's output may take; it was dropped"
    )


def test_a_too_long_error_is_capped_and_a_too_long_answer_still_needs_its_token_first(worker: Path) -> None:
    failed = _call("error", output_max_bytes=2048)
    assert failed.is_error and failed.response.startswith("isolation error: no forecast: sunny sunny")
    assert len(failed.response.encode()) <= 2048 and "[output truncated: " in failed.response
    mismatch = _call("mismatch")
    assert mismatch.is_error and mismatch.response == (
        "isolation error: the worker answered for token 'not-the-token', not this call's"
    )
    late = _call("result-first", output_max_bytes=2048)
    assert late.is_error
    assert late.response.startswith('isolation error: the worker did not answer a result envelope ({"token", ')
    kept = 2048 + isolation.ENVELOPE_OVERHEAD_BYTES
    assert late.response.endswith(f"...}}) before the first {kept} of its {_printed('result-first')} bytes")
