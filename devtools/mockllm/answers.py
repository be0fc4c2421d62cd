"""The answer to one request: a ``chat.completion`` body, or the chunks of its stream."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

from devtools.mockllm.matching import message_text

NO_MATCH_CONTENT = "(mock-llm: no rule matched)"
DEFAULT_MODEL = "mock-model"


def _split_words(text: str) -> list[str]:
    """Word-sized pieces of ``text`` that concatenate back to it exactly (spaces kept)."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


def _split_fragments(text: str) -> list[str]:
    """Two or three fragments of a tool call's arguments (one only when shorter than 2 characters)."""
    if len(text) < 2:
        return [text]
    size = -(-len(text) // (3 if len(text) >= 6 else 2))  # ceiling division
    return [text[i : i + size] for i in range(0, len(text), size)]


def _estimate_tokens(chars: int) -> int:
    """A plausible token count for ``chars`` characters (about four per token)."""
    return max(1, chars // 4)


class Answer:
    """A reply resolved for one request: texts substituted, tool call ids assigned.

    Args:
        reply: the rule's validated ``reply``.
        body: the request body (its messages and model are read).
        next_call_id: numbers for the tool calls the reply gives no ``id``.
        completion_number: makes the completion's ``id``, ``chatcmpl-mock-<n>``.
    """

    def __init__(
        self, reply: dict[str, Any], body: dict[str, Any], next_call_id: Iterator[int], completion_number: int
    ) -> None:
        messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
        last_text = message_text(messages[-1]) if messages else ""
        self.tool_calls: list[dict[str, Any]] = []
        for call in reply.get("tool_calls", []):
            arguments = call.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            self.tool_calls.append(
                {
                    "id": call.get("id") or f"call_{next(next_call_id)}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": arguments},
                }
            )
        content = reply.get("content")
        if content is not None:
            # str.replace, not str.format: scripted answers may well contain other braces (JSON).
            content = content.replace("{last_content}", last_text)
        elif not self.tool_calls:
            content = ""
        # OpenAI sends content null next to tool calls when there is no text; so do we.
        self.content: str | None = content
        self.reasoning: str | None = reply.get("reasoning")
        self.finish_reason = "tool_calls" if self.tool_calls else "stop"
        self.model = body.get("model") if isinstance(body.get("model"), str) else DEFAULT_MODEL
        #: the request's number, from 1 in the order received
        self.completion_number = completion_number
        self.id = f"chatcmpl-mock-{completion_number}"
        self.created = int(time.time())
        prompt_chars = sum(len(message_text(m)) for m in messages)
        completion_text = (self.content or "") + (self.reasoning or "")
        for call in self.tool_calls:
            completion_text += call["function"]["name"] + call["function"]["arguments"]
        prompt_tokens = _estimate_tokens(prompt_chars)
        completion_tokens = _estimate_tokens(len(completion_text))
        scripted = reply.get("usage") or {}
        prompt_tokens = scripted.get("prompt_tokens", prompt_tokens)
        completion_tokens = scripted.get("completion_tokens", completion_tokens)
        self.usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if "cached_tokens" in scripted:
            self.usage["prompt_tokens_details"] = {"cached_tokens": scripted["cached_tokens"]}

    def completion(self) -> dict[str, Any]:
        """The non-streamed ``chat.completion`` body."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def content_chunks(self) -> list[dict[str, Any]]:
        """The stream up to and including the content pieces (role, reasoning, content)."""
        chunks = [self._chunk({"role": "assistant", "content": ""})]
        chunks += [self._chunk({"reasoning_content": p}) for p in _split_words(self.reasoning or "")]
        chunks += [self._chunk({"content": p}) for p in _split_words(self.content or "")]
        return chunks

    def closing_chunks(self, include_usage: bool) -> list[dict[str, Any]]:
        """The stream after the content: tool call fragments, finish, and the optional usage."""
        chunks = []
        for index, call in enumerate(self.tool_calls):
            function = call["function"]
            first = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            chunks.append(self._chunk({"tool_calls": [first]}))
            for fragment in _split_fragments(function["arguments"]):
                piece = {"index": index, "function": {"arguments": fragment}}
                chunks.append(self._chunk({"tool_calls": [piece]}))
        chunks.append(self._chunk({}, self.finish_reason))
        if include_usage:
            chunks.append(
                {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self.usage,
                }
            )
        return chunks

    def cut_stream(self, cut: str, include_usage: bool) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """A stream cut at ``cut`` (a reply's ``cut``, see the package docs): the chunks it sends
        whole, and the chunk that would have come next (``None`` when there is none)."""
        head = self.content_chunks()
        full = head + self.closing_chunks(include_usage)
        if cut == "after_text":
            # after the first content piece (the role and reasoning chunks come before it)
            whole = len(head) - len(_split_words(self.content or "")) + (1 if self.content else 0)
        elif cut == "mid_tool_call":
            # the first call's fragment with its id and name, and the first of its arguments'
            pieces = len(_split_fragments(self.tool_calls[0]["function"]["arguments"])) if self.tool_calls else 0
            whole = len(head) + 1 + (1 if pieces > 1 else 0)
        else:  # before_finish
            whole = len(full) - (2 if include_usage else 1)
        return full[:whole], full[whole] if whole < len(full) else None


def error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI-style error body ``{"error": {"message", "type", "param", "code"}}`` for an HTTP status."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 429:
        kind = "rate_limit_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}
