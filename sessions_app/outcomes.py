"""What a step asks the run loop to create with its store: continuations, child sessions.

Kept apart from the engine so that the services that create these rows do not import the engine.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from agentfiles.parameters import ParamValue
from agentfiles.session_document import SessionDocument
from agents_app.narrowing import Narrowing


@dataclass
class NewContinuation:
    """A deferred call that needs a Continuation row, created with the step's store."""

    token: str
    tool_call_id: str
    call: dict[str, Any]
    disposition: dict[str, Any]
    #: the W3C ``traceparent`` of the call's ``execute_tool`` span (``""`` with tracing off)
    traceparent: str = ""


@dataclass
class NewChild:
    """A child session to create with the step: it answers a helper call.

    ``params`` are the values its caller gives it (``with``), ``narrowing`` the bindings of the
    call (docs/tools.md §8.6), ``None`` when nothing narrows it.
    """

    session_id: uuid.UUID
    agent_slug: str
    prompt: str
    depth: int
    params: dict[str, ParamValue] = field(default_factory=dict)
    narrowing: Narrowing | None = None
    #: the ``traceparent`` of the helper call's span, the parent of the child's runs
    traceparent: str = ""


@dataclass
class StepResult:
    """What one step produced: the new document, the continuations and background calls to create.

    ``background`` holds the JSON entries of the calls started in the background (tracked calls of
    the new head). ``ran_calls`` says that the step ran tool calls, whose start records its store drops.
    ``kind`` and ``seconds`` say what the step did (``model`` or ``tools``) and how long it took,
    for the dashboard's latencies (``sessions_app.timings``).
    """

    document: SessionDocument
    continuations: list[NewContinuation] = field(default_factory=list)
    background: list[dict[str, Any]] = field(default_factory=list)
    children: list[NewChild] = field(default_factory=list)
    ran_calls: bool = False
    kind: str = "tools"
    seconds: float = 0.0
