"""Reading and checking mock-llm scripts (the format is in the package docstring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_WHEN_KEYS: dict[str, tuple[type, ...]] = {
    "last_role": (str,),
    "last_contains": (str,),
    "any_contains": (str,),
    "model": (str,),
    "has_tool": (str,),
    "tool_results": (int,),
}
_REPLY_KEYS = {
    "content",
    "reasoning",
    "tool_calls",
    "status",
    "error",
    "delay",
    "malformed",
    "stream_error",
    "cut",
    "cut_half_event",
    "usage",
}
#: The token counts a reply's ``usage`` may set (``cached_tokens`` goes under
#: ``prompt_tokens_details``, as OpenAI sends it).
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens")
#: Where a reply's ``cut`` ends its stream (see the package docs).
CUTS = ("after_text", "mid_tool_call", "before_finish")
_RULE_KEYS = {"when", "reply", "times"}
_TOOL_CALL_KEYS = {"name", "arguments", "id"}


def validate_script(script: Any) -> dict[str, Any]:
    """Check a decoded script and return it unchanged.

    Unknown keys are refused rather than ignored: a misspelt matcher would otherwise match every
    request and make a demo or a test silently wrong.

    Raises:
        ValueError: naming the rule (counted from 0) and the key at fault.
    """
    if not isinstance(script, dict):
        raise ValueError('a mock-llm script must be a JSON object {"rules": [...]}')
    extra = set(script) - {"rules"}
    if extra:
        raise ValueError(f"unknown top-level key(s) in mock-llm script: {', '.join(sorted(extra))}")
    rules = script.get("rules")
    if not isinstance(rules, list):
        raise ValueError('a mock-llm script needs "rules": a list of rules')
    for number, rule in enumerate(rules):
        _validate_rule(number, rule)
    return script


def _validate_rule(number: int, rule: Any) -> None:
    where = f"rule {number}"
    if not isinstance(rule, dict):
        raise ValueError(f"{where}: a rule must be an object with 'reply' (and optionally 'when', 'times')")
    extra = set(rule) - _RULE_KEYS
    if extra:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(extra))}; expected when, reply, times")
    when = rule.get("when", {})
    if not isinstance(when, dict):
        raise ValueError(f"{where}: 'when' must be an object")
    for key, value in when.items():
        if key not in _WHEN_KEYS:
            raise ValueError(f"{where}: unknown matcher when.{key}; known: {', '.join(sorted(_WHEN_KEYS))}")
        # bool is an int subclass, so refuse it explicitly for tool_results.
        if not isinstance(value, _WHEN_KEYS[key]) or isinstance(value, bool):
            kind = "an integer" if key == "tool_results" else "a string"
            raise ValueError(f"{where}: when.{key} must be {kind}")
    if "times" in rule:
        times = rule["times"]
        if not isinstance(times, int) or isinstance(times, bool) or times < 1:
            raise ValueError(f"{where}: 'times' must be a positive integer")
    if "reply" not in rule:
        raise ValueError(f"{where}: missing 'reply'")
    _validate_reply(where, rule["reply"])


def _validate_reply(where: str, reply: Any) -> None:
    if not isinstance(reply, dict):
        raise ValueError(f"{where}: 'reply' must be an object")
    extra = set(reply) - _REPLY_KEYS
    if extra:
        raise ValueError(f"{where}: unknown reply key(s) {', '.join(sorted(extra))}")
    for key in ("content", "reasoning", "error", "stream_error"):
        if key in reply and not isinstance(reply[key], str):
            raise ValueError(f"{where}: reply.{key} must be a string")
    if "status" in reply:
        status = reply["status"]
        if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
            raise ValueError(f"{where}: reply.status must be an HTTP error status (400-599)")
    if "delay" in reply:
        delay = reply["delay"]
        if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
            raise ValueError(f"{where}: reply.delay must be a number of seconds >= 0")
    if "malformed" in reply and not isinstance(reply["malformed"], bool):
        raise ValueError(f"{where}: reply.malformed must be true or false")
    calls = reply.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ValueError(f"{where}: reply.tool_calls must be a list")
    _validate_cut(where, reply)
    _validate_usage(where, reply)
    for position, call in enumerate(calls):
        at = f"{where}: reply.tool_calls[{position}]"
        if not isinstance(call, dict):
            raise ValueError(f"{at} must be an object with 'name' and 'arguments'")
        extra = set(call) - _TOOL_CALL_KEYS
        if extra:
            raise ValueError(f"{at}: unknown key(s) {', '.join(sorted(extra))}")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise ValueError(f"{at}: 'name' must be a non-empty string")
        if not isinstance(call.get("arguments", {}), dict | str):
            raise ValueError(f"{at}: 'arguments' must be an object or a JSON string")
        if "id" in call and not isinstance(call["id"], str):
            raise ValueError(f"{at}: 'id' must be a string")


def _validate_usage(where: str, reply: dict[str, Any]) -> None:
    if "usage" not in reply:
        return
    usage = reply["usage"]
    if not isinstance(usage, dict) or set(usage) - set(USAGE_KEYS):
        raise ValueError(f"{where}: reply.usage must be an object with {', '.join(USAGE_KEYS)} (each optional)")
    for key, value in usage.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}: reply.usage.{key} must be an integer >= 0")


def _validate_cut(where: str, reply: dict[str, Any]) -> None:
    if "cut" not in reply:
        if "cut_half_event" in reply:
            raise ValueError(f"{where}: reply.cut_half_event needs reply.cut")
        return
    if reply["cut"] not in CUTS:
        raise ValueError(f"{where}: reply.cut must be one of {', '.join(CUTS)}")
    if "cut_half_event" in reply and not isinstance(reply["cut_half_event"], bool):
        raise ValueError(f"{where}: reply.cut_half_event must be true or false")
    clash = sorted({"status", "malformed", "stream_error"} & set(reply))
    if clash:
        raise ValueError(f"{where}: reply.cut cannot be combined with reply.{clash[0]}")
    if reply["cut"] == "mid_tool_call" and not reply.get("tool_calls"):
        raise ValueError(f"{where}: reply.cut mid_tool_call needs reply.tool_calls")


def load_script(path: str | Path) -> dict[str, Any]:
    """Read and validate a script file (the format is in the ``devtools.mockllm`` docstring).

    Raises:
        ValueError: the file cannot be read, is not JSON, or is not a valid script; the message
            names the file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"cannot read mock-llm script {path}: {err.strerror or err}") from err
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"mock-llm script {path} is not valid JSON: {err}") from err
    try:
        return validate_script(document)
    except ValueError as err:
        raise ValueError(f"mock-llm script {path}: {err}") from err
