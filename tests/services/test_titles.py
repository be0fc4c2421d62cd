"""Titles of the session list (docs/api.md §7.2): the first words the person wrote."""

from __future__ import annotations

from sessions_app.selectors import _first_words


def test_a_conversation_opened_by_mail_is_titled_by_the_mails_words() -> None:
    turn = {
        "tag": "UserTurn",
        "contents": {
            "userQuery": "[mail 8c5ed81b-ff53-4fe4-a025-f4fa4c8a318e from the user]\nvia mail first",
            "userMail": [{"id": "8c5ed81b", "body": {"tag": "userMessage", "query": "via mail first"}}],
        },
    }
    assert _first_words(turn) == "via mail first"


def test_a_prompt_is_its_own_title_cut_at_eight_words() -> None:
    turn = {"tag": "UserTurn", "contents": {"userQuery": "one two three four five six seven eight nine"}}
    assert _first_words(turn) == "one two three four five six seven eight…"
    assert _first_words({"tag": "UserTurn", "contents": {"userQuery": {"text": "", "media": []}}}) is None
