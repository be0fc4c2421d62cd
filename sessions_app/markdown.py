"""A session document as markdown: ``agents session-print`` and the ``--session-*`` prompt
directives (docs/cli.md §5.1).

Pure functions over the agents-exe session document (turns newest first, as stored): nothing
here reads the database, so a session file prints without a server.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from agentfiles.document import response_text, tool_calls_of, tracked_calls, unwrap_response
from agentfiles.usage import TokenUsage, turn_token_usage

#: How tool-call results and arguments are shown.
MODES = ("hidden", "shown", "elided")
#: An elided text keeps this many lines at each end.
ELIDE_KEEP = 10

STAMP = r"""```
   _                    _
  /_\  __ _ ___ _ _  __| |_ ___
 / _ \/ _` / -_) ' \/ _|  _(_-<
/_/ \_\__, \___|_||_\__|\__/__/
      |___/   session transcript
```"""


@dataclass(frozen=True)
class PrintOptions:
    """What :func:`render_markdown` shows.

    Attributes:
        tool_results, tool_arguments: ``hidden``, ``shown`` or ``elided`` (first and last 10 lines).
        n_turns: only the first ``n_turns`` turns in time order (``None``: all).
        repeat_system_prompt, repeat_tools: on every user turn, not only the first.
        antichronological: newest turn first.
        funny_stamp: the ASCII header.
        statistics: the statistics block (bytes, media, tool calls by name).
        thinking: the model's reasoning text.
        tool_names: the names of the calls the model made.
        queries_only: user queries and final answers only; turns that only carry tool traffic are
            skipped (``--session-xs``).
        system: the system prompt and tool list at all.
    """

    tool_results: str = "hidden"
    tool_arguments: str = "hidden"
    n_turns: int | None = None
    repeat_system_prompt: bool = False
    repeat_tools: bool = False
    antichronological: bool = False
    funny_stamp: bool = True
    statistics: bool = True
    thinking: bool = True
    tool_names: bool = True
    queries_only: bool = False
    system: bool = True


_XS = PrintOptions(funny_stamp=False, statistics=False, thinking=False, tool_names=False, queries_only=True,
                   system=False)
#: The ``--session-xs|s|m|l|xl`` directives of ``run`` (increasing detail).
LEVELS: dict[str, PrintOptions] = {
    "xs": _XS,
    "s": replace(_XS, thinking=True, tool_names=True, queries_only=False),
    "m": replace(_XS, thinking=True, tool_names=True, queries_only=False, statistics=True),
    "l": replace(_XS, thinking=True, tool_names=True, queries_only=False, statistics=True, tool_results="shown"),
    "xl": PrintOptions(funny_stamp=False, tool_results="shown", tool_arguments="shown"),
}


def _shown(text: str, mode: str) -> str | None:
    if mode == "hidden":
        return None
    lines = text.splitlines()
    if mode == "elided" and len(lines) > 2 * ELIDE_KEEP:
        cut = len(lines) - 2 * ELIDE_KEEP
        lines = [*lines[:ELIDE_KEEP], f"... ({cut} lines elided) ...", *lines[-ELIDE_KEEP:]]
    return "\n".join(lines)


def _fence(text: str, language: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{language}\n{text}\n{ticks}"


def _call_name(call: Any) -> str:
    return str(((call or {}).get("function") or {}).get("name") or "?") if isinstance(call, dict) else "?"


def call_arguments(call: Any) -> Any:
    """A tool call's arguments: its ``arguments`` JSON string parsed, or the string as it is when
    it is not JSON (models do send such)."""
    raw = ((call or {}).get("function") or {}).get("arguments") if isinstance(call, dict) else None
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _call_arguments(call: Any) -> str:
    arguments = call_arguments(call)
    return arguments if isinstance(arguments, str) else json.dumps(arguments, indent=2, ensure_ascii=False)


def _result_text(response: Any) -> str:
    response = unwrap_response(response)
    if isinstance(response, str):
        return response
    if isinstance(response, dict) and response.get("type") == "text":
        return str(response.get("content", ""))
    if isinstance(response, dict) and response.get("type") == "json":
        return json.dumps(response.get("content"), indent=2, ensure_ascii=False)
    return json.dumps(response, indent=2, ensure_ascii=False)


def _query_text(query: Any) -> tuple[str | None, int]:
    if query is None:
        return None, 0
    if isinstance(query, str):
        return query, 0
    if isinstance(query, dict):
        text = query.get("text") if "text" in query else query.get("query")
        return (str(text) if text is not None else None), len(query.get("media") or [])
    return str(query), 0


def _usage(turn: dict[str, Any]) -> dict[str, int]:
    usage = turn.get("byteUsage") or {}
    totals = {}
    for short in ("Input", "Output", "Reasoning", "Tool", "Total"):
        value = usage.get(f"step{short}Bytes", usage.get(f"{short.lower()}Bytes", 0))
        totals[short.lower()] = value if isinstance(value, int) else 0
    return totals


def statistics(document: dict[str, Any]) -> str:
    """The statistics block: turn counts, bytes (from ``byteUsage``), the provider's tokens
    (docs/sessions.md §1.11), media and tool calls by name."""
    turns = document.get("turns") or []
    kinds = Counter(str(turn.get("tag")) for turn in turns)
    totals: Counter[str] = Counter()
    media = 0
    calls: Counter[str] = Counter()
    tokens = TokenUsage()
    for turn in turns:
        totals.update(_usage(turn))
        tokens = tokens + (turn_token_usage(turn) or TokenUsage())
        contents = turn.get("contents") or {}
        media += _query_text(contents.get("userQuery"))[1]
        if turn.get("tag") == "LlmTurn":
            calls.update(_call_name(call) for call in tool_calls_of(contents))
    lines = [
        "## 📊 Statistics",
        "",
        f"- Turns: {len(turns)} ({kinds['UserTurn']} user, {kinds['LlmTurn']} LLM,"
        f" {kinds['PartialUserTurn']} partial)",
        f"- Bytes: input {totals['input']}, output {totals['output']}, reasoning {totals['reasoning']},"
        f" tool {totals['tool']}, total {totals['total']}",
        f"- Tokens: input {tokens.input_tokens}, output {tokens.output_tokens}, cached {tokens.cached_tokens}"
        f" ({tokens.model_turns} of {kinds['LlmTurn']} model answers reported usage)",
        f"- Media attachments: {media}",
        f"- Tool calls: {sum(calls.values())}",
    ]
    if calls:
        widest = max(calls.values())
        lines += ["", "| tool | calls | |", "| --- | ---: | --- |"]
        for name, count in sorted(calls.items(), key=lambda item: (-item[1], item[0])):
            bar = "█" * max(1, round(20 * count / widest))
            lines.append(f"| `{name}` | {count} | {bar} |")
    return "\n".join(lines)


def _tool_block(call: Any, result: Any, options: PrintOptions, *, state: str | None = None) -> list[str]:
    head = f"#### 🔧 `{_call_name(call)}`"
    if isinstance(call, dict) and call.get("id"):
        head += f" ({call['id']})"
    if state is not None:
        head += f": {state}"
    lines = [head]
    arguments = _shown(_call_arguments(call), options.tool_arguments)
    if arguments is not None:
        lines += ["", "Arguments:", "", _fence(arguments, "json")]
    if state in (None, "Completed", "Failed"):
        shown = _shown(_result_text(result), options.tool_results)
        if shown is not None:
            lines += ["", "Result:", "", _fence(shown)]
    return lines


def _user_turn(turn: dict[str, Any], number: int, first: bool, options: PrintOptions) -> list[str]:
    contents = turn.get("contents") or {}
    partial = turn.get("tag") == "PartialUserTurn"
    text, media = _query_text(contents.get("userQuery"))
    responses = contents.get("userToolResponses") or []
    if options.queries_only and text is None and not media:
        return []
    title = f"## ⏸️ Step {number}: Partial Turn (in progress)" if partial else f"## 👤 Step {number}: User"
    lines = [title, ""]
    if options.system and (first or options.repeat_system_prompt) and contents.get("userPrompt"):
        lines += ["### System prompt", "", _fence(str(contents["userPrompt"])), ""]
    tools = contents.get("userTools") or []
    if options.system and (first or options.repeat_tools) and tools:
        lines += ["### Tools", ""]
        for tool in tools:
            inner = tool.get("contents") if isinstance(tool, dict) else None
            inner = inner if isinstance(inner, dict) else {}
            lines.append(f"- `{inner.get('llmName') or inner.get('name') or '?'}`: {inner.get('description', '')}")
        lines.append("")
    if text is not None:
        lines += ["### Query", "", text, ""]
    if media:
        lines += [f"_{media} media attachment(s)_", ""]
    if partial:
        lines += ["### ⏳ Tool Call Status", ""]
        for tracked in tracked_calls(turn):
            token = f", token {tracked['tcContinuation']}" if tracked.get("tcContinuation") else ""
            lines.append(f"- `{_call_name(tracked.get('tcCall'))}` ({(tracked.get('tcCall') or {}).get('id', '')}):"
                         f" {tracked.get('tcState')}{token}")
        lines.append("")
        if options.tool_names:
            for tracked in tracked_calls(turn):
                lines += [*_tool_block(tracked.get("tcCall"), tracked.get("tcResult"), options,
                                       state=str(tracked.get("tcState"))), ""]
    elif responses and options.tool_names:
        lines += ["### Tool responses", ""]
        for pair in responses:
            call, result = (pair[0], pair[1]) if isinstance(pair, list) and len(pair) == 2 else ({}, pair)
            lines += [*_tool_block(call, result, options), ""]
    return lines


def _llm_turn(turn: dict[str, Any], number: int, options: PrintOptions) -> list[str]:
    contents = turn.get("contents") or {}
    calls = tool_calls_of(contents)
    if options.queries_only and calls:
        return []
    response = contents.get("llmResponse")
    thinking = response.get("responseThinking") if isinstance(response, dict) else None
    lines = [f"## 🤖 Step {number}: LLM", ""]
    if options.thinking and thinking:
        lines += ["### Thinking", "", "> " + str(thinking).replace("\n", "\n> "), ""]
    text = response_text(contents)
    if text:
        lines += ["### Response", "", text, ""]
    if calls and options.tool_names:
        lines += ["### Tool calls", ""]
        for call in calls:
            lines.append(f"- `{_call_name(call)}` ({call.get('id', '')})")
            arguments = _shown(_call_arguments(call), options.tool_arguments)
            if arguments is not None:
                lines += ["", _fence(arguments, "json"), ""]
        lines.append("")
    return lines


def render_markdown(document: dict[str, Any], options: PrintOptions | None = None) -> str:
    """The session as markdown (docs/cli.md §5.1).

    Args:
        document: an agents-exe session document (turns newest first; older shapes accepted).
        options: what to show (:class:`PrintOptions`; defaults: results and arguments hidden).
    Returns:
        The markdown text, ending with a newline.
    Raises:
        TypeError, AttributeError, KeyError: a document that is not a session document.
    """
    options = options or PrintOptions()
    turns = list(reversed(document.get("turns") or []))
    if options.n_turns is not None:
        turns = turns[: options.n_turns]
    blocks: list[list[str]] = []
    first_user = True
    for number, turn in enumerate(turns, start=1):
        if turn.get("tag") == "LlmTurn":
            blocks.append(_llm_turn(turn, number, options))
        else:
            blocks.append(_user_turn(turn, number, first_user, options))
            first_user = False
    if options.antichronological:
        blocks.reverse()
    parts = []
    if options.funny_stamp:
        parts.append(STAMP)
    parts.append(f"# Session {document.get('sessionId', '')}")
    if document.get("forkedFromSessionId"):
        parts.append(f"_Forked from {document['forkedFromSessionId']}_")
    if options.statistics:
        parts.append(statistics(document))
    text = "\n\n".join(parts) + "\n\n"
    text += "\n".join(line for block in blocks for line in block)
    return text.rstrip("\n") + "\n"
