"""Tests for agentfiles.keys: both API key file shapes and every error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentfiles.keys import ApiKeysError, api_key_for, load_api_keys


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


def error_of(path: str | Path) -> str:
    with pytest.raises(ApiKeysError) as caught:
        load_api_keys(path)
    return str(caught.value)


@pytest.mark.parametrize("path", [None, ""])
def test_no_file_means_no_keys(path: str | None):
    assert load_api_keys(path) == {}


def test_flat_shape(tmp_path: Path):
    path = write_json(tmp_path / "secret-keys", {"openai": "sk-1", "kimi": "sk-2", "keys": "sk-3"})
    assert load_api_keys(path) == {"openai": "sk-1", "kimi": "sk-2", "keys": "sk-3"}
    assert load_api_keys(str(path)) == {"openai": "sk-1", "kimi": "sk-2", "keys": "sk-3"}


def test_empty_flat_file(tmp_path: Path):
    assert load_api_keys(write_json(tmp_path / "k.json", {})) == {}


def test_list_shape(tmp_path: Path):
    path = write_json(
        tmp_path / "k.json",
        {"keys": [{"id": "openai", "value": "sk-1"}, {"id": "mistral", "value": "m-2", "note": "team"}]},
    )
    assert load_api_keys(path) == {"openai": "sk-1", "mistral": "m-2"}


def test_home_directory_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write_json(tmp_path / "secret-keys", {"a": "b"})
    assert load_api_keys("~/secret-keys") == {"a": "b"}


def test_byte_order_mark_is_accepted(tmp_path: Path):
    path = tmp_path / "k.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": "b"}).encode())
    assert load_api_keys(path) == {"a": "b"}


def test_missing_file(tmp_path: Path):
    path = tmp_path / "nope"
    assert error_of(path) == f"{path}: API keys file not found"


def test_directory(tmp_path: Path):
    assert error_of(tmp_path) == f"{tmp_path}: is a directory, not an API keys file"


def test_not_utf8(tmp_path: Path):
    path = tmp_path / "k.json"
    path.write_bytes(b'{"a": "\xff"}')
    assert error_of(path) == f"{path}: not UTF-8 text (bad byte at offset 7)"


def test_invalid_json(tmp_path: Path):
    path = tmp_path / "k.json"
    path.write_text('{\n  "openai": "sk-1",\n}')
    assert error_of(path) == (
        f"{path}: invalid JSON at line 3 column 1: Expecting property name enclosed in double quotes"
    )


SHAPE = 'expected {"<id>": "<value>", ...} or {"keys": [{"id": ..., "value": ...}, ...]}'


@pytest.mark.parametrize(
    "document, message",
    [
        (["sk-1"], f"{SHAPE}, got a list"),
        ("sk-1", f"{SHAPE}, got a string"),
        ({"openai": 12}, f"key 'openai': expected a string value, got a number ({SHAPE})"),
        ({"openai": None}, f"key 'openai': expected a string value, got null ({SHAPE})"),
        ({"keys": {"openai": "sk"}}, f"key 'keys': expected a string value, got an object ({SHAPE})"),
        ({"keys": ["sk-1"]}, 'keys[0]: expected an object {"id": ..., "value": ...}, got a string'),
        ({"keys": [{"value": "sk-1"}]}, "keys[0]: missing 'id'"),
        ({"keys": [{"id": "a"}]}, "keys[0]: missing 'value'"),
        ({"keys": [{"id": 1, "value": "sk-1"}]}, "keys[0].id: expected a string, got a number"),
        ({"keys": [{"id": "a", "value": True}]}, "keys[0].value: expected a string, got a boolean"),
        ({"keys": [{"id": "", "value": "sk-1"}]}, "keys[0].id: must not be empty"),
        (
            {"keys": [{"id": "a", "value": "1"}, {"id": "a", "value": "2"}]},
            "keys[1]: id 'a' is given twice",
        ),
    ],
)
def test_wrong_shapes(tmp_path: Path, document: Any, message: str):
    path = write_json(tmp_path / "k.json", document)
    assert error_of(path) == f"{path}: {message}"


def test_errors_never_show_secret_values(tmp_path: Path):
    path = write_json(tmp_path / "k.json", {"keys": [{"id": "a", "value": "sk-secret"}, {"id": "a", "value": "x"}]})
    assert "sk-secret" not in error_of(path)


def test_api_key_for():
    keys = {"openai": "sk-1", "local": ""}
    assert api_key_for(keys, "openai") == "sk-1"
    assert api_key_for(keys, "ollama") is None
    # An empty value is treated like a missing one: no Authorization header.
    assert api_key_for(keys, "local") is None
    assert api_key_for({}, "openai") is None
