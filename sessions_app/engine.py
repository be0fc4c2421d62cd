"""One step of a session (spec/sessions.md §2.3-2.4): pure with respect to storage.

:func:`step` looks at the head turn and does one thing: asks the LLM (head is a user turn) or
runs the tool calls of the head LLM turn, each as its policy says. It returns the new document
and the continuations to create; the run loop (``sessions_app.runner``) stores both, fenced by
the version and the lease.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents_app.llm import complete
from sessions_app import document as doc
from sessions_app.runtime import RuntimeAgent
from tools_app.base import ToolContext

log = logging.getLogger("sessions.engine")


@dataclass
class NewContinuation:
    """A deferred call that needs a Continuation row, created with the step's store."""

    token: str
    tool_call_id: str
    call: dict[str, Any]
    disposition: dict[str, Any]


@dataclass
class StepResult:
    """What one step produced: the new document and the continuations to create."""

    document: dict[str, Any]
    continuations: list[NewContinuation] = field(default_factory=list)


class NothingToDo(Exception):
    """The head turn leaves nothing for a step to do (answered, blocked, or empty)."""


def run_tool_call(agent: RuntimeAgent, call: dict[str, Any], context: ToolContext) -> tuple[str, Any]:
    """Run one tool call now and return ``(state, response)``.

    ``state`` is ``Completed`` or ``Failed``; a failure's response is an ``Error: ...`` text the
    LLM sees (spec/sessions.md §1.6: there is no error variant of a tool response).
    """
    function = call.get("function") or {}
    name = function.get("name") or ""
    tool = agent.toolset.get(name)
    if tool is None:
        return "Failed", f"Error: unknown tool {name!r}"
    raw_arguments = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw_arguments) if isinstance(raw_arguments, str) else raw_arguments
    except json.JSONDecodeError as error:
        return "Failed", f"Error: the arguments of {name} are not valid JSON: {error}"
    if not isinstance(arguments, dict):
        return "Failed", f"Error: the arguments of {name} must be a JSON object"
    result = tool.call(arguments, context)
    return ("Failed" if result.is_error else "Completed"), result.response


def step(
    document: dict[str, Any],
    agent: RuntimeAgent,
    session_id: str,
    on_text_delta: Callable[[str], None] | None = None,
    on_tool_event: Callable[..., None] | None = None,
    owner: str | None = None,
) -> StepResult:
    """Advance ``document`` by one step.

    Args:
        document: the session document (not modified).
        agent: the session's runtime agent.
        session_id: the session's id (for the ``AGENT_*`` tool environment).
        on_text_delta: called with each streamed piece of the LLM's text, when streaming.
        on_tool_event: called as ``on_tool_event(kind, **payload)`` when a tool call starts
            (``tool.started``) and ends (``tool.completed`` or ``tool.failed``).
        owner: the session's owner, whose keys file (if any) the LLM call uses.
    Returns:
        The new document and the continuations of newly deferred calls.
    Raises:
        NothingToDo: the head is a final answer, a partial turn, or there is no turn.
        agents_app.llm.LlmError: the provider failed; nothing was changed.
    """
    head = doc.head(document)
    if head is None:
        raise NothingToDo("the session has no turn")
    tag = head.get("tag")
    if tag == "UserTurn":
        answer = complete(
            spec=agent.loaded.spec,
            api_key=agent.api_key_for(owner),
            messages=doc.openai_messages(document, agent.system_prompt),
            tools=agent.openai_tools(),
            timeout=settings.AGENTS["LLM_TIMEOUT"],
            on_text_delta=on_text_delta,
        )
        turn = doc.llm_turn(answer.raw_response, answer.text, answer.thinking, answer.tool_calls, answer.usage)
        return StepResult(doc.push_turn(document, turn))
    if tag == "LlmTurn" and doc.tool_calls_of(head["contents"]):
        return _run_calls(document, head, agent, session_id, on_tool_event or _ignore)
    raise NothingToDo(f"nothing to do with a {tag} head")


def _ignore(kind: str, **payload: Any) -> None:
    """The tool-event callback when nobody listens."""


def _run_calls(
    document: dict[str, Any],
    head: dict[str, Any],
    agent: RuntimeAgent,
    session_id: str,
    on_tool_event: Callable[..., None],
) -> StepResult:
    """Run or defer every tool call of the head LLM turn (spec/sessions.md §2.4)."""
    tracked: list[dict[str, Any]] = []
    continuations: list[NewContinuation] = []
    timeout = agent.loaded.spec.asyncCallTimeoutSeconds or settings.AGENTS["TOOL_TIMEOUT"]
    turn_id = document.get("turnId") or ""
    for call in doc.tool_calls_of(head["contents"]):
        name = (call.get("function") or {}).get("name") or ""
        original = agent.toolset.original_name(name)
        disposition = agent.policy.disposition_for(name, original)
        effective = agent.policy.decide(name, original)
        if effective.get("tag") == "defer":
            token = str(uuid.uuid4())
            entry = doc.tracked_call(call, "Deferred", disposition, continuation=token)
            continuations.append(NewContinuation(token, entry["tcId"], call, disposition))
            tracked.append(entry)
            continue
        if effective.get("tag") != "runSync":
            # Background and isolated execution are not built yet: run the call inline so the
            # conversation stays valid, and say so in the log.
            log.warning(
                "disposition run inline",
                extra={"kind": "tools.inline_fallback", "session_id": session_id, "disposition": effective.get("tag")},
            )
        context = ToolContext(
            session_id=session_id,
            conversation_id=session_id,
            turn_id=turn_id,
            agent_slug=agent.slug,
            tool_call_id=str(call.get("id") or ""),
            timeout=timeout,
        )
        on_tool_event("tool.started", tool_call_id=context.tool_call_id, tool=name)
        state, response = run_tool_call(agent, call, context)
        on_tool_event(
            "tool.completed" if state == "Completed" else "tool.failed",
            tool_call_id=context.tool_call_id,
            tool=name,
            status=state.lower(),
            result=response,
        )
        tracked.append(doc.tracked_call(call, state, disposition, result=response))
    partial = doc.partial_turn(agent.system_prompt, agent.system_tools(), tracked)
    turn = doc.close_partial(partial) if doc.all_final(partial) else partial
    return StepResult(doc.push_turn(document, turn), continuations)


def apply_result(document: dict[str, Any], token: str, response: Any) -> dict[str, Any] | None:
    """Write a deferred call's result into the head partial turn (spec/sessions.md §2.7).

    Returns:
        The new document (the head closed into a full ``UserTurn`` once every call is final), or
        ``None`` when the head holds no deferred call with that token.
    """
    head = doc.head(document)
    if head is None or head.get("tag") != "PartialUserTurn":
        return None
    updated = json.loads(json.dumps(head))
    for tc in updated["contents"]["trackedCalls"]:
        if tc.get("tcContinuation") == token and tc["tcState"] == "Deferred":
            tc["tcState"] = "Completed"
            tc["tcResult"] = response
            break
    else:
        return None
    turn = doc.close_partial(updated) if doc.all_final(updated) else updated
    return doc.replace_head(document, turn)
