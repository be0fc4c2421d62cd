"""HTTP toolboxes stay on their endpoints (docs/tools.md §9.3, "Staying under BaseUrl"): a path
parameter that climbs (``..``, ``.``, ``%2e%2e``, ``a/../..``, empty) is refused naming it, a URL
that would leave ``BaseUrl`` is never sent, and no redirect is followed; checked on what a real
HTTP service on loopback receives, the toolbox's token above all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.upstream import Upstream
from tools_app.openapi.paths import RequestOutsideBase, checked_url
from tools_app.toolset import build_toolset

from .conftest import make_agent, make_ctx

TOKEN = "tok-only-for-the-api"
_PATH_PARAMETER = {"in": "path", "required": True, "schema": {"type": "string"}}
_OK = {"200": {"description": "ok"}}
DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.0",
    "info": {"title": "items", "version": "1"},
    "paths": {
        "/items/{id}": {
            "parameters": [{"name": "id", **_PATH_PARAMETER}],
            "get": {"operationId": "getItem", "responses": _OK},
        },
        "/items/{id}/parts/{part}": {
            "parameters": [{"name": "id", **_PATH_PARAMETER}, {"name": "part", **_PATH_PARAMETER}],
            "delete": {"operationId": "deletePart", "responses": _OK},
        },
        # the document is the API's: a path of its own that climbs is refused too
        "/../admin": {"get": {"operationId": "climb", "responses": _OK}},
        "/moved": {"get": {"operationId": "moved", "responses": _OK}},
    },
}


@pytest.fixture
def elsewhere() -> Iterator[Upstream]:
    service = Upstream({})
    yield service
    service.stop()


@pytest.fixture
def upstream(elsewhere: Upstream) -> Iterator[Upstream]:
    service = Upstream({"/doc.json": DOCUMENT})
    service.redirects["/api/moved"] = f"{elsewhere.url}/steal"
    yield service
    service.stop()


def _tools(tmp_path: Path, upstream: Upstream) -> dict[str, Any]:
    box = {
        "tag": "OpenAPIServer",
        "contents": {"SpecUrl": f"{upstream.url}/doc.json", "BaseUrl": f"{upstream.url}/api", "Name": "api"},
    }
    box["contents"]["Token"] = TOKEN
    return {tool.name: tool for tool in build_toolset(make_agent(tmp_path, openApiToolboxes=[box])).tools}


def _outside(upstream: Upstream, prefix: str) -> list[str]:
    """The targets received outside ``prefix``."""
    return [r.target for r in upstream.seen() if not r.target.startswith(prefix)]


@pytest.mark.parametrize("value", ["..", ".", "%2e%2e", "%2E.", "a/../..", "..\\..", "%252e%252e", "./x", ""])
def test_a_path_parameter_that_climbs_is_refused_naming_it(tmp_path, upstream, value):
    tools = _tools(tmp_path, upstream)
    result = tools["openapi_api_getItem"].call({"id": value}, make_ctx())
    assert result.is_error
    assert result.response.startswith("Error: openapi_api_getItem: the path parameter 'id' ")
    assert result.response.endswith("; nothing was sent")
    assert upstream.seen() == []


def test_two_climbing_parameters_send_nothing_and_the_token_never_leaves(tmp_path, upstream):
    tools = _tools(tmp_path, upstream)
    for arguments in ({"id": "..", "part": ".."}, {"id": "7", "part": "%2e%2e"}):
        result = tools["openapi_api_deletePart"].call(arguments, make_ctx())
        assert result.is_error and "the path parameter" in result.response
    assert "'part'" in result.response
    # what may go: a value with a slash stays one segment, dots inside a name are no segment
    assert not tools["openapi_api_getItem"].call({"id": "a/b"}, make_ctx()).is_error
    assert not tools["openapi_api_getItem"].call({"id": "..."}, make_ctx()).is_error
    assert not tools["openapi_api_deletePart"].call({"id": "v1.2", "part": ".x"}, make_ctx()).is_error
    assert [r.target for r in upstream.seen()] == ["/api/items/a%2Fb", "/api/items/...", "/api/items/v1.2/parts/.x"]
    assert _outside(upstream, "/api/items/") == []
    assert {r.headers["authorization"] for r in upstream.seen()} == {f"Bearer {TOKEN}"}


def test_a_document_path_that_leaves_the_base_url_is_not_sent(tmp_path, upstream):
    result = _tools(tmp_path, upstream)["openapi_api_climb"].call({}, make_ctx())
    assert result.is_error
    assert result.response == (
        "Error: openapi_api_climb: the request path is not under BaseUrl's path; nothing was sent"
    )
    assert upstream.seen() == []


def test_a_redirect_is_not_followed_so_the_token_stays(tmp_path, upstream, elsewhere):
    result = _tools(tmp_path, upstream)["openapi_api_moved"].call({}, make_ctx())
    assert (result.is_error, result.response) == (False, "302 Found")
    assert [r.target for r in upstream.seen()] == ["/api/moved"]
    assert elsewhere.requests == []


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://h:8080/api/x", "another scheme, host or port"),
        ("http://other:8080/api/x", "another scheme, host or port"),
        ("http://h:8081/api/x", "another scheme, host or port"),
        ("http://h:8080/apix", "not under BaseUrl's path"),
        ("http://h:8080/api/x/../../admin", "not under BaseUrl's path"),
        ("http://h:8080/api/%2e%2e/admin", "holds a dot segment"),
        ("http://h:8080/api/a%2F..%2F..", "holds a dot segment"),
        ("http://h:8080/api/%252E%252e", "holds a dot segment"),
    ],
)
def test_the_url_check_refuses_what_leaves_the_base(url, reason):
    with pytest.raises(RequestOutsideBase, match=reason):
        checked_url("http://h:8080/api", url)


def test_a_url_that_cannot_be_parsed_is_refused_without_quoting_it():
    with pytest.raises(RequestOutsideBase) as refused:
        checked_url("http://h:abc/api", "http://h:abc/api/x?api_key=s3cret")
    assert str(refused.value) == "the request URL cannot be parsed"


def test_the_url_check_keeps_what_stays_under_the_base():
    assert str(checked_url("http://h:8080/api", "http://h:8080/api")) == "http://h:8080/api"
    kept = checked_url("http://H:8080/api", "http://h:8080/api/items/a%2Fb?q=..")
    assert kept.raw_path == b"/api/items/a%2Fb?q=.."
    assert checked_url("https://h", "https://h:443/x/./y").raw_path == b"/x/y"
    assert checked_url("http://h", "http://h/anything").raw_path == b"/anything"


def test_a_postgrest_table_that_climbs_is_not_sent(tmp_path):
    """PostgREST builds its path from the document's table names only, never from arguments;
    a table the document names ``..`` or ``%2e%2e`` still cannot take the request out."""
    document = {
        "swagger": "2.0",
        "info": {"title": "PostgREST API", "version": "12.0"},
        "paths": {
            "/..": {"get": {"responses": _OK}},
            "/%2e%2e": {"get": {"responses": _OK}},
            "/users": {"get": {"responses": _OK}},
        },
    }
    service = Upstream({"/db/": document})
    try:
        box = {
            "tag": "PostgRESTServer",
            "contents": {"SpecUrl": f"{service.url}/db/", "BaseUrl": f"{service.url}/db", "Name": "db", "Token": TOKEN},
        }
        tools = build_toolset(make_agent(tmp_path, postgrestToolboxes=[box])).tools
        climbing = [tool for tool in tools if tool.table != "users"]
        assert len(climbing) == 2
        for tool in climbing:
            result = tool.call({}, make_ctx())
            assert result.is_error and result.response.endswith("; nothing was sent"), result.response
        assert service.seen() == []
        assert not next(tool for tool in tools if tool.table == "users").call({}, make_ctx()).is_error
        assert [r.target for r in service.seen()] == ["/db/users"]
    finally:
        service.stop()
