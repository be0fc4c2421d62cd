"""PostgREST toolboxes (issue 15, acceptance 2): a PostgREST-shaped document (Swagger 2.0, as
PostgREST serves at its root) gives tools per table and method; each argument group becomes
PostgREST's URL grammar, checked on the requests a real HTTP service records."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.upstream import Upstream
from tools_app.postgrest.tools import filter_value, query_of
from tools_app.toolset import ToolBuildError, build_toolset

from .conftest import make_agent, make_ctx

ROW_FILTER = {"$ref": "#/parameters/rowFilter.users.id"}
#: What PostgREST serves at ``/`` for a database with a ``users`` table and a ``notes`` view
#: (read-only: GET only), abridged.
POSTGREST_DOCUMENT: dict[str, Any] = {
    "swagger": "2.0",
    "info": {"title": "PostgREST API", "version": "12.0"},
    "host": "localhost:3000",
    "basePath": "/",
    "schemes": ["http"],
    "consumes": ["application/json"],
    "produces": ["application/json"],
    "paths": {
        "/": {"get": {"summary": "OpenAPI description (this document)", "responses": {"200": {"description": "OK"}}}},
        "/users": {
            "get": {
                "summary": "Registered users",
                "parameters": [
                    ROW_FILTER,
                    {"$ref": "#/parameters/select"},
                    {"$ref": "#/parameters/order"},
                    {"$ref": "#/parameters/limit"},
                    {"$ref": "#/parameters/offset"},
                ],
                "responses": {
                    "200": {"description": "OK", "schema": {"type": "array", "items": {"$ref": "#/definitions/users"}}}
                },
            },
            "post": {
                "parameters": [{"$ref": "#/parameters/body.users"}],
                "responses": {"201": {"description": "Created"}},
            },
            "put": {
                "parameters": [ROW_FILTER, {"$ref": "#/parameters/body.users"}],
                "responses": {"200": {"description": "OK"}},
            },
            "patch": {
                "parameters": [ROW_FILTER, {"$ref": "#/parameters/body.users"}],
                "responses": {"204": {"description": "No Content"}},
            },
            "delete": {"parameters": [ROW_FILTER], "responses": {"204": {"description": "No Content"}}},
        },
        "/notes": {
            "get": {"parameters": [{"$ref": "#/parameters/select"}], "responses": {"200": {"description": "OK"}}}
        },
        "/rpc/login": {
            "post": {
                "parameters": [{"in": "body", "name": "args", "required": True, "schema": {"type": "object"}}],
                "responses": {"200": {"description": "OK"}},
            }
        },
    },
    "definitions": {
        "users": {
            "description": "Registered users",
            "required": ["id"],
            "properties": {
                "id": {"type": "integer", "format": "bigint", "description": "Note:\nThis is a Primary Key.<pk/>"},
                "name": {"type": "string", "format": "text"},
                "created_at": {"type": "string", "format": "timestamp with time zone"},
            },
            "type": "object",
        },
        "notes": {"properties": {"body": {"type": "string", "format": "text"}}, "type": "object"},
    },
    "parameters": {
        "body.users": {
            "name": "users",
            "description": "users",
            "required": False,
            "in": "body",
            "schema": {"$ref": "#/definitions/users"},
        },
        "rowFilter.users.id": {"name": "id", "required": False, "in": "query", "type": "string", "format": "bigint"},
        "select": {
            "name": "select",
            "description": "Filtering Columns",
            "required": False,
            "in": "query",
            "type": "string",
        },
        "order": {"name": "order", "description": "Ordering", "required": False, "in": "query", "type": "string"},
        "limit": {
            "name": "limit",
            "description": "Limiting and Pagination",
            "required": False,
            "in": "query",
            "type": "string",
        },
        "offset": {
            "name": "offset",
            "description": "Limiting and Pagination",
            "required": False,
            "in": "query",
            "type": "string",
        },
    },
}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    service = Upstream({"/": POSTGREST_DOCUMENT})
    yield service
    service.stop()


@pytest.fixture
def tools(tmp_path, upstream) -> dict[str, Any]:
    box = {"tag": "PostgRESTServer", "contents": {"SpecUrl": upstream.url + "/", "BaseUrl": upstream.url, "Name": "db"}}
    return {tool.name: tool for tool in build_toolset(make_agent(tmp_path, postgrestToolboxes=[box])).tools}


def test_one_tool_per_table_and_method_the_document_lists(tools):
    assert list(tools) == [
        "postgrest_db_get_users",
        "postgrest_db_post_users",
        "postgrest_db_put_users",
        "postgrest_db_patch_users",
        "postgrest_db_delete_users",
        "postgrest_db_get_notes",
    ]
    get = tools["postgrest_db_get_users"].parameters
    assert list(get["properties"]) == ["filters", "subset", "ranking"] and get["required"] == []
    assert list(get["properties"]["filters"]["properties"]) == ["id", "name", "created_at"]
    post = tools["postgrest_db_post_users"].parameters
    assert list(post["properties"]) == ["body"] and post["required"] == ["body"]
    assert post["properties"]["body"]["properties"]["id"]["type"] == "integer"
    assert tools["postgrest_db_patch_users"].parameters["required"] == ["filters", "body"]
    assert tools["postgrest_db_delete_users"].parameters["required"] == ["filters"]
    assert tools["postgrest_db_get_users"].description == "Read rows of the users table: Registered users"


def test_the_documented_call_becomes_the_documented_url(tools, upstream):
    result = tools["postgrest_db_get_users"].call({"filters": {"id": "eq.5"}, "subset": {"limit": 1}}, make_ctx())
    assert not result.is_error
    [request] = upstream.seen()
    assert (request.method, request.target) == ("GET", "/users?id=eq.5&limit=1")
    assert "prefer" not in request.headers


def test_every_argument_group_and_method(tools, upstream):
    ctx = make_ctx()
    calls = [
        (
            "get",
            {
                "filters": {"name": "like.*ann*", "id": ["gte.1", "lte.9"], "or": "(id.eq.1,id.eq.2)"},
                "subset": {"columns": "id,name", "limit": 10, "offset": 20},
                "ranking": {"order": "created_at.desc,id"},
            },
        ),
        ("post", {"body": {"id": 7, "name": "Ann"}}),
        ("put", {"filters": {"id": "eq.7"}, "body": {"id": 7, "name": "Anne"}}),
        ("patch", {"filters": {"id": 7}, "body": {"name": "Annie"}}),
        ("delete", {"filters": {"name": None}}),
    ]
    for method, arguments in calls:
        result = tools[f"postgrest_db_{method}_users"].call(arguments, ctx)
        assert not result.is_error, result.response
    seen = [
        (r.method, r.target, r.headers.get("prefer"), json.loads(r.body) if r.body else None) for r in upstream.seen()
    ]
    assert seen == [
        (
            "GET",
            "/users?name=like.*ann*&id=gte.1&id=lte.9&or=(id.eq.1,id.eq.2)&select=id,name"
            "&order=created_at.desc,id&limit=10&offset=20",
            None,
            None,
        ),
        ("POST", "/users", "return=representation", {"id": 7, "name": "Ann"}),
        ("PUT", "/users?id=eq.7", "return=representation", {"id": 7, "name": "Anne"}),
        ("PATCH", "/users?id=eq.7", "return=representation", {"name": "Annie"}),
        ("DELETE", "/users?name=is.null", "return=representation", None),
    ]
    answer = tools["postgrest_db_post_users"].call({"body": {"id": 8}}, ctx)
    assert answer.response == {"type": "json", "content": [{"id": 8}]}


@pytest.mark.parametrize(
    ("tool", "arguments", "error"),
    [
        ("delete", {}, "filters is required"),
        ("patch", {"filters": {"id": "eq.1"}}, "body is required"),
        ("post", {}, "body is required"),
        ("get", {"filters": "id=eq.1"}, "filters must be an object"),
        ("get", {"subset": {"limit": "ten"}}, "subset.limit must be an integer"),
        ("get", {"subset": {"offset": True}}, "subset.offset must be an integer"),
    ],
)
def test_bad_arguments_fail_without_a_request(tools, upstream, tool, arguments, error):
    result = tools[f"postgrest_db_{tool}_users"].call(arguments, make_ctx())
    assert result.is_error and result.response == f"Error: postgrest_db_{tool}_users: {error}"
    assert upstream.seen() == []


def test_groups_a_method_does_not_take_are_left_out():
    assert query_of("post", {"filters": {"id": "eq.1"}, "subset": {"limit": 1}}) == []
    assert query_of("delete", {"filters": {"id": "eq.1"}, "ranking": {"order": "id"}}) == [("id", "eq.1")]
    assert [filter_value(v) for v in ("eq.1", 1, True, None, 2.5)] == ["eq.1", "eq.1", "eq.true", "is.null", "eq.2.5"]


def test_bindings_match_method_and_table(tmp_path, upstream):
    box = {
        "tag": "PostgRESTServer",
        "contents": {
            "SpecUrl": upstream.url + "/",
            "BaseUrl": upstream.url,
            "Name": "db",
            "Bindings": [{"tool": "get_*", "arg": "ranking", "value": {"tag": "Literal", "contents": {"order": "id"}}}],
        },
    }
    tools = {t.name: t for t in build_toolset(make_agent(tmp_path, postgrestToolboxes=[box])).tools}
    assert list(tools["postgrest_db_get_users"].parameters["properties"]) == ["filters", "subset"]
    tools["postgrest_db_get_users"].call({}, make_ctx())
    assert upstream.seen()[-1].target == "/users?order=id"


def test_a_document_that_is_not_postgrest_shaped_is_a_load_error(tmp_path, upstream):
    upstream.documents["/empty"] = {"swagger": "2.0", "info": {"title": "t", "version": "1"}, "paths": {}}
    box = {"tag": "PostgRESTServer", "contents": {"SpecUrl": upstream.url + "/empty", "BaseUrl": upstream.url}}
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(make_agent(tmp_path, postgrestToolboxes=[box]))
    assert raised.value.problems == [
        f"postgrestToolboxes[0]: the PostgREST document {upstream.url}/empty describes no operation"
    ]
