"""The check every integration test's answers go through (tests/contract.py) catches mismatches."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from tests.contract import ContractError, check_response, openapi


def _answer(method: str, path: str, status: int, body: object) -> httpx.Response:
    request = httpx.Request(method, f"http://127.0.0.1:8080{path}")
    return httpx.Response(
        status, headers={"Content-Type": "application/json"}, content=json.dumps(body).encode(), request=request
    )


def test_the_document_is_a_valid_openapi_document_with_every_route() -> None:
    paths = set(openapi().spec["paths"].keys())
    assert {
        "/healthz",
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/events",
        "/v1/events",
        "/v1/continuations/{token}",
        "/v1/agents",
        "/v1/agents/{slug}",
    } <= paths


def test_a_documented_error_passes() -> None:
    sid = str(uuid.uuid4())
    check_response(_answer("GET", f"/v1/sessions/{sid}", 404, {"error": "unknown_session", "message": "no session"}))


def test_a_body_that_does_not_match_fails() -> None:
    sid = str(uuid.uuid4())
    with pytest.raises(ContractError):
        check_response(_answer("GET", f"/v1/sessions/{sid}", 200, {"session_id": sid}))


def test_an_error_code_outside_the_catalogue_fails() -> None:
    with pytest.raises(ContractError):
        check_response(_answer("GET", "/v1/sessions", 400, {"error": "oops", "message": "no"}))


def test_an_undocumented_status_fails() -> None:
    with pytest.raises(ContractError):
        check_response(_answer("GET", "/v1/sessions", 418, {"error": "bad_request", "message": "teapot"}))


def test_unknown_paths_are_not_operations() -> None:
    check_response(_answer("GET", "/v1/nothing-here", 404, {"error": "not_found", "message": "no route"}))
