"""``agents check`` on an agent with every tool kind of issue 15 (acceptance 5): it lists every
generated tool name, and every one is a name the LLM APIs accept."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.harness import FIXTURES, ROOT, Processes, base_env, write_agent, write_tool
from tests.skillfiles import write_skill
from tests.tools.test_postgrest import POSTGREST_DOCUMENT
from tests.upstream import Upstream

LLM_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ODD_DOCUMENT = {
    "openapi": "3.0.0",
    "info": {"title": "odd", "version": "1"},
    "paths": {
        "/v2/pets/{id}": {
            "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {"operationId": "pets.get by:id/" + "x" * 70, "responses": {"200": {"description": "ok"}}},
            "delete": {"responses": {"204": {"description": "gone"}}},
        }
    },
}


def test_check_lists_every_generated_tool_name_and_all_are_valid(tmp_path: Path, processes: Processes) -> None:
    upstream = Upstream(
        {
            "/petstore.json": json.loads((FIXTURES / "openapi" / "petstore.json").read_text()),
            "/odd.json": ODD_DOCUMENT,
            "/": POSTGREST_DOCUMENT,
        }
    )
    try:
        write_skill(tmp_path / "skills", "pdf-tools")
        write_tool(tmp_path / "asking", "ask", {"slug": "ask", "description": "asks", "args": []}, "echo yes")
        agent = write_agent(
            tmp_path,
            "everything",
            "http://127.0.0.1:9/v1",
            openApiToolboxes=[
                {
                    "tag": "OpenAPIServer",
                    "contents": {"SpecUrl": upstream.url + "/petstore.json", "BaseUrl": upstream.url, "Name": "pets"},
                },
                {
                    "tag": "OpenAPIServer",
                    "contents": {
                        "SpecUrl": upstream.url + "/odd.json",
                        "BaseUrl": upstream.url,
                        "Name": "odd.api",
                        "Activation": {"tag": "on-demand", "toolgroup": "odd"},
                    },
                },
            ],
            postgrestToolboxes=[
                {
                    "tag": "PostgRESTServer",
                    "contents": {"SpecUrl": upstream.url + "/", "BaseUrl": upstream.url, "Name": "db"},
                }
            ],
            skillSources=[{"tag": "SkillDirectory", "contents": "skills"}],
            bashToolboxes=[
                {
                    "tag": "FileSystemDirectory",
                    "contents": {"Path": "asking", "activation": {"tag": "on-demand", "toolgroup": "ask-user"}},
                }
            ],
        )
        done = processes.run(
            [sys.executable, "-m", "agentsite.cli", "check", "--agent-file", str(agent)],
            cwd=ROOT,
            env=base_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        upstream.stop()
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("  everything: tools: ")]
    names = line.removeprefix("  everything: tools: ").split(", ")
    long_name = [n for n in names if n.startswith("openapi_odd_api_pets_get_by_id_")]
    assert names == [
        "bash_ask",
        "openapi_pets_listPets",
        "openapi_pets_createPet",
        "openapi_pets_getPetById",
        "openapi_pets_deletePet",
        *long_name,
        "openapi_odd_api_delete_v2_pets_id",
        "postgrest_db_get_users",
        "postgrest_db_post_users",
        "postgrest_db_put_users",
        "postgrest_db_patch_users",
        "postgrest_db_delete_users",
        "postgrest_db_get_notes",
        "skill_list",
        "skill_describe_pdf-tools",
        "skill_enable_pdf-tools",
        "skill_disable_pdf-tools",
        "skill_pdf-tools_extract-text",
        "meta_activate_tool",
        "meta_deactivate_tool",
        "meta_discover_tools",
    ]
    assert len(long_name) == 1 and len(long_name[0]) == 64
    assert all(LLM_NAME.match(name) for name in names)
    assert done.stdout.splitlines()[0] == "everything: the everything test agent (21 tools)"
