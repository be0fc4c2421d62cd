"""Session files written as agents-exe writes them (docs/sessions.md §1.12): aeson's number forms,
its escapes, the layout of each real agents-exe file, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfiles.session_text import AGENTS_EXE, FileLayout, aeson_number, parse_session_text, session_text
from tests.harness import FIXTURES

SESSION_FILES = sorted((FIXTURES / "sessions").glob("*.json"))


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (0.01666816, "1.666816e-2"),
        (0.05, "5.0e-2"),
        (1e-7, "1.0e-7"),
        (0.1, "0.1"),
        (0.5, "0.5"),
        (2.0, "2.0"),
        (100.0, "100.0"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0e7"),
        (12345678.9, "1.23456789e7"),
        (1.5e16, "1.5e16"),
        (-0.25, "-0.25"),
        (0.0, "0.0"),
        (42, "42"),
        (-7, "-7"),
        (2**70, str(2**70)),
    ],
)
def test_numbers_are_written_in_aesons_forms(value: float, written: str) -> None:
    assert aeson_number(value) == written
    assert float(written) == value


def test_strings_get_aesons_escapes_and_stay_utf8() -> None:
    text = session_text({"s": 'a"b\\c\nd\te\rf\x08g\x0ch\x1bi é λ / \u2028'})
    assert text == '{"s":"a\\"b\\\\c\\nd\\te\\rf\\u0008g\\u000ch\\u001bi é λ / \u2028"}\n'


def test_the_default_layout_is_agents_exes_compact_sorted_form_with_a_newline() -> None:
    assert session_text({"turns": [], "b": {"y": 1, "x": [1.5, None, True]}, "a": "z"}) == (
        '{"a":"z","b":{"x":[1.5,null,true],"y":1},"turns":[]}\n'
    )
    layout = FileLayout(indent=4, newline=False, sort_keys=False)
    assert session_text({"b": {}, "a": [1]}, layout) == '{\n    "b": {},\n    "a": [\n        1\n    ]\n}'
    assert FileLayout.from_json(layout.to_json()) == layout
    assert FileLayout.from_json(None) == AGENTS_EXE


@pytest.mark.parametrize("path", SESSION_FILES, ids=[p.name for p in SESSION_FILES])
def test_every_agents_exe_session_file_is_written_back_byte_for_byte(path: Path) -> None:
    original = path.read_bytes()
    document, layout = parse_session_text(original.decode("utf-8"))
    assert session_text(document, layout).encode("utf-8") == original


def test_the_fixtures_hold_each_layout() -> None:
    layouts = {path.name: parse_session_text(path.read_text(encoding="utf-8"))[1] for path in SESSION_FILES}
    assert layouts["gh-155.session.json"] == AGENTS_EXE
    assert layouts["activation-session.json"] == FileLayout(indent=2, newline=True, sort_keys=True)
    assert layouts["partial-turn-older.json"] == FileLayout(indent=2, newline=False, sort_keys=False)


@pytest.mark.django_db
@pytest.mark.parametrize("path", SESSION_FILES, ids=[p.name for p in SESSION_FILES])
def test_a_stored_session_is_exported_over_http_as_its_file(path: Path) -> None:
    from rest_framework.test import APIClient

    from sessions_app.models import DOCUMENTS, Session
    from sessions_app.services.sessions import session_import

    original = path.read_bytes()
    document, layout = parse_session_text(original.decode("utf-8"))
    session = session_import(document=document, agent_slug="any", layout=layout)
    # read back from the rows, not from this process's cache
    DOCUMENTS.forget(session.pk)
    assert Session.objects.get(pk=session.pk).session_file_text().encode("utf-8") == original
    answer = APIClient().get(f"/v1/sessions/{session.pk}/export")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/json"
    assert answer.content == original
