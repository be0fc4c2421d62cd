"""What a session document must look like for this server to read it (docs/sessions.md §1).

Documents are read leniently (``agentfiles.document``): unknown keys and every older shape are
fine. What is checked is only what the readers rely on, so that a document that passes never
makes a reader fail; the rules are the models of ``agentfiles.turns``, which also describe the
document in ``/openapi.json``. A document that fails is refused on import, and one found in the
database answers ``unreadable_session`` for that session (docs/api.md §2).
"""

from __future__ import annotations

from typing import Any

from agentfiles.turns import DocumentHeader, SessionDocument, Turn, Unreadable


def header_problem(document: Any) -> str | None:
    """What makes a document's top level unreadable (``None`` when it is readable)."""
    try:
        DocumentHeader.model_validate(document)
    except Unreadable as error:
        return str(error)
    return None


def turn_problem(turn: Any) -> str | None:
    """What makes one turn unreadable (``None`` when it is readable): an unknown tag, contents
    that are not an object, tool calls and responses that are not objects and pairs, tracked
    calls without a known state (``agentfiles.turns``)."""
    try:
        Turn.model_validate(turn)
    except Unreadable as error:
        return str(error)
    return None


def document_problem(document: Any) -> str | None:
    """What makes a whole document unreadable, naming the turn (``None`` when it is readable)."""
    try:
        SessionDocument.model_validate(document)
    except Unreadable as error:
        return str(error)
    return None
