"""The session status transitions (docs/sessions.md §2.1): one table in code that the store
enforces, the same on the ``Session`` model and in the docs."""

from __future__ import annotations

import importlib
import re
import uuid

import pytest

from agentfiles import document as doc
from sessions_app import transitions
from sessions_app.models import Session
from sessions_app.store import insert_session, store, store_columns
from sessions_app.transitions import TRANSITIONS, StatusTransitionRefused
from tests.factories import SessionFactory
from tests.harness import ROOT

#: A row as the written tables give it: (from, to, the functions named in "by").
Row = tuple[frozenset[str], frozenset[str], frozenset[str]]

_NAME = re.compile(r"`+([a-z_]+\.[a-z_]+)`+")


def _statuses(cell: str) -> frozenset[str]:
    """The statuses a cell stands for: a status, ``(new)``, or a group's name."""
    word = cell.strip().strip("`")
    if word in transitions.GROUPS:
        return transitions.GROUPS[word]
    assert word == transitions.NEW or word in Session.Status.values, f"not a status: {cell!r}"
    return frozenset({word})


def _row(source: str, target: str, by: str) -> Row:
    names = frozenset(_NAME.findall(by))
    assert names, f"a row that names nobody: {source} -> {target}"
    return _statuses(source), _statuses(target), names


def _code_rows() -> list[Row]:
    return [(row.sources, row.targets, frozenset(row.by)) for row in TRANSITIONS]


def _docstring_rows() -> list[Row]:
    """The rows of the reStructuredText table on ``Session``: columns as the rulers cut them, a
    line with an empty first column continuing the row above."""
    lines = (Session.__doc__ or "").splitlines()
    rulers = [n for n, line in enumerate(lines) if re.fullmatch(r"\s*=+(\s+=+)+\s*", line)]
    assert len(rulers) == 3, "the table on Session has lost its rulers"
    spans = [m.span() for m in re.finditer(r"=+", lines[rulers[0]])]
    cells: list[list[str]] = []
    for line in lines[rulers[1] + 1 : rulers[2]]:
        parts = [line[start:end if n < len(spans) - 1 else None].strip() for n, (start, end) in enumerate(spans)]
        if parts[0]:
            cells.append(parts)
        else:
            assert cells and not parts[1], f"a continuation line under no row: {line!r}"
            cells[-1][2] += " " + parts[2]
    return [_row(*row) for row in cells]


def _docs_rows() -> list[Row]:
    """The rows of the table in docs/sessions.md §2.1."""
    text = (ROOT / "docs/sessions.md").read_text()
    section = text.split("### 2.1 Status transitions", 1)[1].split("\n#", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert [cell.strip() for cell in lines[0].strip("|").split("|")] == ["from", "to", "by"]
    return [_row(*line.strip("|").split("|")) for line in lines[2:]]


def test_the_table_in_code_on_the_model_and_in_the_docs_agree() -> None:
    code = _code_rows()
    assert _docstring_rows() == code
    assert _docs_rows() == code


def test_every_function_the_table_names_exists() -> None:
    for _, _, names in _code_rows():
        for name in names:
            module, _, function = name.partition(".")
            path = "sessions_app.runner" if module == "runner" else f"sessions_app.services.{module}"
            assert callable(getattr(importlib.import_module(path), function, None)), name


def test_the_groups_are_the_statuses_without_a_run_and_those_the_turns_imply() -> None:
    assert transitions.AT_REST == set(Session.Status.values) - {Session.Status.RUNNING}
    implied = {
        doc.status_of({"turns": []}),
        doc.status_of({"turns": [{"tag": "LlmTurn", "contents": {"llmResponse": {"responseText": "hi"}}}]}),
    }
    assert implied <= transitions.IMPLIED
    assert transitions.IMPLIED <= set(Session.Status.values) - {Session.Status.FAILED, Session.Status.PAUSED}


@pytest.mark.django_db
def test_a_new_session_may_not_start_failed_or_paused() -> None:
    for status in (Session.Status.FAILED, Session.Status.PAUSED):
        session_id = uuid.uuid4()
        with pytest.raises(StatusTransitionRefused, match=rf"session {session_id}: the status \(new\) -> {status} "):
            insert_session(doc.new_document(str(session_id)), id=session_id, agent_slug="a", status=status)
        assert not Session.objects.filter(pk=session_id).exists()


@pytest.mark.django_db
def test_a_change_outside_the_table_is_refused_before_anything_is_written() -> None:
    session = SessionFactory()
    assert session.status == Session.Status.READY
    for write in (store, store_columns):
        args = (session, session.document) if write is store else (session,)
        with pytest.raises(StatusTransitionRefused, match="the status ready -> failed is not in the transition table"):
            write(*args, status=Session.Status.FAILED, status_detail="made up")
        stored = Session.objects.get(pk=session.pk)
        assert (stored.status, stored.version, stored.status_detail) == ("ready", 1, None)


@pytest.mark.django_db
def test_a_change_in_the_table_and_a_store_that_keeps_the_status_are_stored() -> None:
    session = SessionFactory()
    session = store(session, session.document, status=Session.Status.READY)
    session = store_columns(session, status=Session.Status.PAUSED)
    stored = Session.objects.get(pk=session.pk)
    assert (stored.status, stored.version) == ("paused", 3)
    with pytest.raises(StatusTransitionRefused, match="paused -> failed"):
        store(stored, stored.document, status=Session.Status.FAILED)
