"""OpenAPI toolboxes in process: every fixture document loads, ``$ref``s are expanded (nested,
array items, allOf/anyOf, circular), names are made LLM-valid and mapped back, calls reach a real
HTTP service with their path, query, body, headers and secrets, and every bad entry or document
is a load error naming the toolbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfiles.parameters import ParamValue
from tests.harness import FIXTURES
from tests.upstream import NOT_FOUND_BODY, Upstream
from tools_app.openapi.document import DocumentError, parse_document
from tools_app.toolset import ToolBuildError, build_toolset

from .conftest import make_agent, make_ctx

OPENAPI = FIXTURES / "openapi"


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((OPENAPI / name).read_text())


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    service = Upstream({f"/{path.name}": _fixture(path.name) for path in OPENAPI.glob("*.json")})
    yield service
    service.stop()


def _box(upstream: Upstream, document: str, **extra: Any) -> dict[str, Any]:
    contents = {"SpecUrl": f"{upstream.url}/{document}", "BaseUrl": upstream.url, **extra}
    return {"tag": "OpenAPIServer", "contents": contents}


def _names(tmp_path: Path, upstream: Upstream, document: str, **extra: Any) -> list[str]:
    agent = make_agent(tmp_path, openApiToolboxes=[_box(upstream, document, Name="api", **extra)])
    return build_toolset(agent).names()


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ("minimal.json", ["openapi_api_healthCheck"]),
        (
            "petstore.json",
            ["openapi_api_listPets", "openapi_api_createPet", "openapi_api_getPetById", "openapi_api_deletePet"],
        ),
        ("toy-openapi3-body.json", ["openapi_api_listUsers", "openapi_api_createUser"]),
        ("with_refs.json", ["openapi_api_listUsers", "openapi_api_createUser", "openapi_api_getUser"]),
    ],
)
def test_every_fixture_document_loads_one_tool_per_operation(tmp_path, upstream, document, names):
    assert _names(tmp_path, upstream, document) == names


def test_schemas_hold_path_query_and_the_expanded_body(tmp_path, upstream):
    agent = make_agent(tmp_path, openApiToolboxes=[_box(upstream, "with_refs.json", Name="api")])
    tools = {tool.name: tool for tool in build_toolset(agent).tools}
    get_user = tools["openapi_api_getUser"].parameters
    assert get_user == {"type": "object", "properties": {"userId": {"type": "string"}}, "required": ["userId"]}
    body = tools["openapi_api_createUser"].parameters
    assert body["required"] == ["body"]
    # a ref to a schema holding a ref: both expanded
    address = body["properties"]["body"]["properties"]["address"]
    assert address == {"type": "object", "properties": {k: {"type": "string"} for k in ("street", "city", "country")}}
    pets = {
        t.name: t
        for t in build_toolset(
            make_agent(tmp_path, openApiToolboxes=[_box(upstream, "petstore.json", Name="api")])
        ).tools
    }
    limit = pets["openapi_api_listPets"].parameters["properties"]["limit"]
    described = "How many items to return at one time (max 100)"
    assert limit == {"type": "integer", "format": "int32", "description": described}
    assert pets["openapi_api_listPets"].parameters["required"] == []
    assert pets["openapi_api_createPet"].parameters["properties"]["body"]["required"] == ["id", "name"]


def test_array_items_all_of_any_of_and_circular_references_are_expanded():
    document = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/nodes": {
                "post": {
                    "operationId": "addNode",
                    "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}},
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
        "components": {
            "schemas": {
                "Named": {"type": "object", "properties": {"name": {"type": "string"}}},
                "Node": {
                    "allOf": [{"$ref": "#/components/schemas/Named"}],
                    "properties": {
                        "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                        "value": {"anyOf": [{"$ref": "#/components/schemas/Named"}, {"type": "integer"}]},
                    },
                },
            }
        },
    }
    node = parse_document(json.dumps(document), "doc")["paths"]["/nodes"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    assert node["allOf"] == [{"type": "object", "properties": {"name": {"type": "string"}}}]
    assert node["properties"]["value"]["anyOf"][0]["properties"] == {"name": {"type": "string"}}
    child = node["properties"]["children"]["items"]
    assert child["type"] == "object" and "recursive" in child["description"]


def test_names_that_llm_apis_refuse_are_rewritten_and_routed_back(tmp_path, upstream):
    upstream.documents["/odd.json"] = {
        "openapi": "3.0.0",
        "info": {"title": "odd", "version": "1"},
        "paths": {
            "/pets/{petId}": {
                "parameters": [{"name": "petId", "in": "path", "required": True, "schema": {"type": "string"}}],
                "get": {"operationId": "pet.find by:id", "responses": {"200": {"description": "ok"}}},
                "delete": {"responses": {"204": {"description": "gone"}}},
            }
        },
    }
    agent = make_agent(tmp_path, openApiToolboxes=[_box(upstream, "odd.json", Name="my pets")])
    toolset = build_toolset(agent)
    assert toolset.names() == ["openapi_my_pets_pet_find_by_id", "openapi_my_pets_delete_pets_petId"]
    assert toolset.original_name("openapi_my_pets_pet_find_by_id") == "openapi_my pets_pet.find by:id"
    result = toolset.get("openapi_my_pets_pet_find_by_id").call({"petId": "42"}, make_ctx())
    assert result.response["content"]["name"] == "Rex"
    assert upstream.seen()[-1].target == "/pets/42"


def test_the_toolbox_name_defaults_to_the_base_urls_host_and_port(tmp_path, upstream):
    agent = make_agent(tmp_path, openApiToolboxes=[_box(upstream, "minimal.json")])
    port = upstream.url.rsplit(":", 1)[1]
    assert build_toolset(agent).names() == [f"openapi_127_0_0_1_{port}_healthCheck"]


def test_a_call_sends_path_query_body_headers_token_and_secrets(tmp_path, upstream, monkeypatch):
    monkeypatch.setenv("PETS_TOKEN", "tok-from-env")
    box = _box(
        upstream,
        "petstore.json",
        Name="pets",
        Headers={"X-API-Version": "v1"},
        Token="${PETS_TOKEN}",
        Secrets=[
            {
                "source": {"tag": "ParamSource", "contents": "pet_key"},
                "decoder": {"tag": "Clear", "contents": True},
                "serializer": {"tag": "Header", "contents": ["X-Pet-Key", "Key {{secret}}"]},
            },
            {
                "source": {"tag": "Given", "contents": "q-secret"},
                "serializer": {"tag": "Query", "contents": ["api_key", "{{secret}}"]},
            },
        ],
    )
    tools = {t.name: t for t in build_toolset(make_agent(tmp_path, openApiToolboxes=[box])).tools}
    ctx = make_ctx(params={"pet_key": ParamValue("k-123", secret=True)})
    listed = tools["openapi_pets_listPets"].call({"limit": 5}, ctx)
    assert listed.response == {"type": "json", "content": [{"id": 42, "name": "Rex"}]}
    created = tools["openapi_pets_createPet"].call({"body": {"id": 1, "name": "Tom"}}, ctx)
    assert created.response["content"] == {"id": 1, "name": "Tom"}
    gone = tools["openapi_pets_deletePet"].call({"petId": "a b/c"}, ctx)
    assert gone.response == "204 No Content" and not gone.is_error
    first, second, third = upstream.seen()
    assert (first.method, first.target) == ("GET", "/pets?limit=5&api_key=q-secret")
    assert (second.method, json.loads(second.body)) == ("POST", {"id": 1, "name": "Tom"})
    assert third.target == "/pets/a%20b%2Fc?api_key=q-secret"
    for request in (first, second, third):
        assert request.headers["x-api-version"] == "v1"
        assert request.headers["authorization"] == "Bearer tok-from-env"
        assert request.headers["x-pet-key"] == "Key k-123"


def test_an_upstream_error_body_comes_back_verbatim_as_a_tool_error(tmp_path, upstream):
    tools = {
        t.name: t
        for t in build_toolset(
            make_agent(tmp_path, openApiToolboxes=[_box(upstream, "petstore.json", Name="pets")])
        ).tools
    }
    result = tools["openapi_pets_getPetById"].call({"petId": "7"}, make_ctx())
    assert result.is_error
    assert result.response == f"Error: openapi_pets_getPetById: HTTP 404 Not Found\n{NOT_FOUND_BODY}"


def test_a_param_secret_without_value_fails_the_call_without_a_request(tmp_path, upstream):
    box = _box(
        upstream,
        "petstore.json",
        Name="pets",
        Secrets=[
            {
                "source": {"tag": "ParamSource", "contents": "pet_key"},
                "serializer": {"tag": "Header", "contents": ["X-Pet-Key", "{{secret}}"]},
            }
        ],
    )
    tools = {t.name: t for t in build_toolset(make_agent(tmp_path, openApiToolboxes=[box])).tools}
    result = tools["openapi_pets_getPetById"].call({"petId": "42"}, make_ctx())
    assert (result.is_error, result.response) == (True, "Error: tool openapi_pets_getPetById is unavailable")
    assert upstream.seen() == []


def test_an_unreachable_service_is_a_tool_error(tmp_path, upstream):
    tools = {
        t.name: t
        for t in build_toolset(
            make_agent(tmp_path, openApiToolboxes=[_box(upstream, "petstore.json", Name="pets")])
        ).tools
    }
    upstream.stop()
    result = tools["openapi_pets_getPetById"].call({"petId": "42"}, make_ctx(timeout=5))
    assert result.is_error and result.response.startswith("Error: openapi_pets_getPetById: the request failed: ")


def test_a_file_spec_is_read_relative_to_the_agent(tmp_path, upstream):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "mini.json").write_text((OPENAPI / "minimal.json").read_text())
    box = {"tag": "OpenAPIServer", "contents": {"SpecUrl": "specs/mini.json", "BaseUrl": upstream.url, "Name": "m"}}
    assert build_toolset(make_agent(tmp_path, openApiToolboxes=[box])).names() == ["openapi_m_healthCheck"]


@pytest.mark.parametrize(
    ("contents", "problem"),
    [
        ({"SpecUrl": None}, "openApiToolboxes[0].contents.SpecUrl must be a non-empty string"),
        ({"SpecUrl": "http://x/a", "BaseUrl": "ftp://x"}, "openApiToolboxes[0].contents.BaseUrl must be an http"),
        ({"Headers": ["x"]}, "openApiToolboxes[0].contents.Headers must be an object"),
        ({"Token": "${NO_SUCH_VARIABLE_HERE}"}, "environment variable NO_SUCH_VARIABLE_HERE is not set"),
        (
            {
                "Secrets": [
                    {
                        "source": {"tag": "EnvVar", "contents": "NO_SUCH_VARIABLE_HERE"},
                        "serializer": {"tag": "Header", "contents": ["a", "b"]},
                    }
                ]
            },
            "EnvVar NO_SUCH_VARIABLE_HERE is not set",
        ),
        (
            {
                "Secrets": [
                    {
                        "source": {"tag": "Given", "contents": "x"},
                        "serializer": {"tag": "Cookie", "contents": ["a", "b"]},
                    }
                ]
            },
            "serializer must be",
        ),
        (
            {
                "Secrets": [
                    {
                        "source": {"tag": "Given", "contents": "x"},
                        "decoder": {"tag": "Base64"},
                        "serializer": {"tag": "Header", "contents": ["a", "b"]},
                    }
                ]
            },
            "decoder: only",
        ),
        ({"Activation": "sometimes"}, 'Activation must be "always" or'),
        ({"Bindings": [{"arg": "nope", "value": {"tag": "Literal", "contents": 1}}]}, "has an argument nope"),
    ],
)
def test_bad_entries_are_load_errors_naming_the_toolbox(tmp_path, upstream, contents, problem):
    base = {"SpecUrl": f"{upstream.url}/petstore.json", "BaseUrl": upstream.url}
    agent = make_agent(tmp_path, openApiToolboxes=[{"tag": "OpenAPIServer", "contents": {**base, **contents}}])
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(agent)
    assert any(problem in line for line in raised.value.problems), raised.value.problems


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("/missing.json", "HTTP 404"),
        ("/not-json", "does not hold an object"),
        ("/no-paths", "is not a valid OpenAPI document"),
        ("/dangling", "is not a valid OpenAPI document: "),
    ],
)
def test_documents_that_cannot_be_fetched_or_used_are_load_errors(tmp_path, upstream, document, problem):
    upstream.documents["/not-json"] = "just a string"
    upstream.documents["/no-paths"] = {"openapi": "3.0.0", "info": {"title": "t", "version": "1"}, "paths": 5}
    upstream.documents["/dangling"] = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/a": {
                "get": {
                    "parameters": [{"$ref": "#/components/schemas/Nope"}],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    if document == "/missing.json":
        upstream.documents.pop("/missing.json", None)
    agent = make_agent(
        tmp_path,
        openApiToolboxes=[
            {
                "tag": "OpenAPIServer",
                "contents": {"SpecUrl": upstream.url + document, "BaseUrl": upstream.url, "Name": "broken"},
            }
        ],
    )
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(agent)
    [line] = raised.value.problems
    assert len(line) < 600
    assert line.startswith("openApiToolboxes[0]: the OpenAPI document of toolbox 'broken': ")
    assert problem in line


def test_document_errors_name_what_is_wrong():
    with pytest.raises(DocumentError, match="neither JSON nor YAML"):
        parse_document("{: [", "doc")
    yaml_document = "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n"
    assert parse_document(yaml_document, "doc")["paths"] == {}


def test_bindings_fill_arguments_by_operation_id_from_parameters(tmp_path, upstream):
    box = _box(
        upstream,
        "petstore.json",
        Name="pets",
        Bindings=[{"tool": "getPetById", "arg": "petId", "value": {"tag": "Param", "contents": "pet"}}],
    )
    agent = make_agent(tmp_path, openApiToolboxes=[box], parameters=[{"name": "pet", "scope": "session"}])
    tools = {t.name: t for t in build_toolset(agent).tools}
    assert tools["openapi_pets_getPetById"].parameters["properties"] == {}
    assert "petId" in tools["openapi_pets_deletePet"].parameters["properties"]
    result = tools["openapi_pets_getPetById"].call({"petId": "7"}, make_ctx(params={"pet": ParamValue("42")}))
    assert result.response["content"]["id"] == 42
    assert upstream.seen()[-1].target == "/pets/42"
