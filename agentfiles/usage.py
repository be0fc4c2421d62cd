"""Byte and token usage of session turns, as agents-exe records them (docs/sessions.md §1.11).

Bytes are agents-exe's ``byteUsage`` (``stepInputBytes``, ``stepOutputBytes``,
``stepReasoningBytes``, ``stepToolBytes``, ``stepTotalBytes``): rough sizes, not tokens. Tokens
are the provider's ``usage`` object of a model answer, which agents-exe keeps three times on an
``LlmTurn``: ``byteUsage.stepTokenUsage``, ``llmResponse.responseTokenUsage`` and
``llmResponse.rawResponse.usage`` (older files hold only the last). Every function here reads
hostile JSON: a missing or mistyped field counts as nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentfiles.tool_responses import unwrap_response

#: The ``byteUsage`` keys, in the order agents-exe writes them.
BYTE_KEYS = ("stepInputBytes", "stepOutputBytes", "stepReasoningBytes", "stepToolBytes", "stepTotalBytes")


def _json_bytes(value: Any) -> int:
    """The UTF-8 length of ``value`` as compact JSON (what Aeson's ``encode`` writes)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _count(value: Any) -> int:
    """A non-negative integer count, 0 for anything else (booleans included)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def response_bytes(response: Any) -> int:
    """The bytes agents-exe counts for one stored tool response (docs/sessions.md §1.11).

    A bare string (how agents-exe files store a tool's text) counts as its JSON encoding, as in
    the real files; ``{"type": "json"}`` its content's JSON; ``{"type": "text"}`` four bytes a
    character (UTF-8's worst case); media the length of its base64 text; mixed the sum of its
    parts (text four bytes a character, media its base64 length).
    """
    response = unwrap_response(response)
    if isinstance(response, str):
        return _json_bytes(response)
    if not isinstance(response, dict):
        return _json_bytes(response)
    kind = response.get("type")
    if kind == "json":
        return _json_bytes(response.get("content"))
    if kind == "text":
        return len(str(response.get("content", ""))) * 4
    if kind == "media":
        return len(str(response.get("base64Data", "")))
    if kind == "mixed":
        total = 0
        for part in response.get("parts") or []:
            if isinstance(part, dict) and part.get("type") == "text":
                total += len(str(part.get("text", ""))) * 4
            elif isinstance(part, dict):
                total += len(str(part.get("base64Data", "")))
        return total
    return _json_bytes(response)


def query_bytes(query: Any) -> int:
    """The bytes of a ``userQuery``: four a character of its text, plus each attachment's base64."""
    if isinstance(query, str):
        return len(query) * 4
    if not isinstance(query, dict):
        return 0
    total = len(str(query.get("text") or "")) * 4
    for item in query.get("media") or []:
        if isinstance(item, dict):
            total += len(str(item.get("base64Data", "")))
    return total


def user_byte_usage(
    system_prompt: str, system_tools: list[Any], query: Any, tool_responses: list[list[Any]]
) -> dict[str, int]:
    """The ``byteUsage`` of a ``UserTurn`` (docs/sessions.md §1.11).

    Args:
        system_prompt: the turn's ``userPrompt``.
        system_tools: the turn's ``userTools``.
        query: the turn's ``userQuery`` (``None``, a string or ``{"text", "media"}``).
        tool_responses: the turn's ``[call, response]`` pairs.
    Returns:
        ``stepInputBytes`` (prompt and query text four bytes a character, attachments their base64
        length, each tool definition its compact JSON), ``stepToolBytes`` (the responses, by
        :func:`response_bytes`), ``stepOutputBytes`` and ``stepReasoningBytes`` 0, and their total.
    """
    input_bytes = len(system_prompt) * 4 + query_bytes(query) + sum(_json_bytes(tool) for tool in system_tools)
    tool_bytes = sum(
        response_bytes(pair[1]) for pair in tool_responses if isinstance(pair, list | tuple) and len(pair) == 2
    )
    return {
        "stepInputBytes": input_bytes,
        "stepOutputBytes": 0,
        "stepReasoningBytes": 0,
        "stepToolBytes": tool_bytes,
        "stepTotalBytes": input_bytes + tool_bytes,
    }


@dataclass(frozen=True)
class TokenUsage:
    """The provider's token counts of one model answer, or of many added up.

    Attributes:
        input_tokens: ``prompt_tokens`` (or ``input_tokens``).
        output_tokens: ``completion_tokens`` (or ``output_tokens``).
        cached_tokens: ``prompt_tokens_details.cached_tokens`` (or a top-level ``cached_tokens``);
            0 where the provider did not say.
        model_turns: how many model answers reported usage.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    model_turns: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_tokens + other.cached_tokens,
            self.model_turns + other.model_turns,
        )


def provider_usage(usage: Any) -> TokenUsage | None:
    """The counts of one provider ``usage`` object (OpenAI's or the Responses API's names).

    Returns:
        ``None`` when ``usage`` is not an object or names neither input nor output tokens.
    """
    if not isinstance(usage, dict):
        return None
    if not any(key in usage for key in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")):
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = usage.get("cached_tokens")
    return TokenUsage(
        input_tokens=_count(usage.get("prompt_tokens", usage.get("input_tokens"))),
        output_tokens=_count(usage.get("completion_tokens", usage.get("output_tokens"))),
        cached_tokens=_count(cached),
        model_turns=1,
    )


def turn_token_usage(turn: Any) -> TokenUsage | None:
    """The token counts an ``LlmTurn`` holds, wherever agents-exe put them; ``None`` for other
    turns and for answers without usage."""
    if not isinstance(turn, dict) or turn.get("tag") != "LlmTurn":
        return None
    byte_usage = turn.get("byteUsage")
    if isinstance(byte_usage, dict) and (found := provider_usage(byte_usage.get("stepTokenUsage"))):
        return found
    contents = turn.get("contents")
    response = contents.get("llmResponse") if isinstance(contents, dict) else None
    if not isinstance(response, dict):
        return None
    if found := provider_usage(response.get("responseTokenUsage")):
        return found
    raw = response.get("rawResponse")
    return provider_usage(raw.get("usage")) if isinstance(raw, dict) else None


def turn_bytes(turn: Any) -> dict[str, int]:
    """A turn's ``byteUsage`` counts (the ``step*`` keys, or the older ``inputBytes`` ones), 0 each
    when absent."""
    byte_usage = turn.get("byteUsage") if isinstance(turn, dict) else None
    if not isinstance(byte_usage, dict):
        return dict.fromkeys(BYTE_KEYS, 0)
    counts = {}
    for key in BYTE_KEYS:
        older = key[4].lower() + key[5:]
        counts[key] = _count(byte_usage.get(key, byte_usage.get(older)))
    return counts


def document_totals(document: dict[str, Any]) -> dict[str, int]:
    """Token and byte totals over a session document's turns (docs/sessions.md §1.11).

    Returns:
        ``{"inputTokens", "outputTokens", "cachedTokens", "modelTurns", "inputBytes",
        "outputBytes", "reasoningBytes", "toolBytes", "totalBytes"}``, integers.
    """
    tokens = TokenUsage()
    byte_totals = dict.fromkeys(BYTE_KEYS, 0)
    for turn in document.get("turns") or []:
        tokens = tokens + (turn_token_usage(turn) or TokenUsage())
        for key, value in turn_bytes(turn).items():
            byte_totals[key] += value
    return {
        "inputTokens": tokens.input_tokens,
        "outputTokens": tokens.output_tokens,
        "cachedTokens": tokens.cached_tokens,
        "modelTurns": tokens.model_turns,
        **{key[4].lower() + key[5:]: value for key, value in byte_totals.items()},
    }
