"""The console's rules in one process (docs/guide-console.md §1): every store keeps a version with what
it changed, restores go through the checks, the editor's fields become the same contents a PUT
would take, a refusal lands at its field and stores nothing, and diffs show the change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.http import QueryDict

from agents_app import services
from agents_app.models import StoredAgent, StoredAgentVersion
from agents_app.registry import AgentRegistry, get_registry, set_registry
from agents_app.runtime import reset_runtime_agents
from console_app.agent_form import NO_KEY, StoredAgentForm
from console_app.diff import version_diff
from foundation.errors import ApiError

TOOL = (
    "#!/bin/sh\n"
    'if [ "$1" = describe ]; then\n'
    '  echo \'{"slug": "today", "description": "prints the date", "args": []}\'\n'
    "else\n  date +%F\nfi\n"
)


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "announce": "a stored agent",
        "systemPrompt": ["hi"],
        **extra,
    }


@pytest.fixture
def registry() -> Iterator[AgentRegistry]:
    set_registry(AgentRegistry({}, {"k": "secret-k", "other": "secret-o"}))
    reset_runtime_agents()
    yield get_registry()
    set_registry(None)
    reset_runtime_agents()


def _post(fields: dict[str, Any], files: dict[str, str] | None = None) -> QueryDict:
    """The POST an operator's browser sends: the fields, then the file rows."""
    data = QueryDict(mutable=True)
    base = {
        "slug": "today",
        "announce": "knows the date",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "flavor": "OpenAIv1",
        "apiKeyId": "k",
        "systemPrompt": "Be brief.\nAnswer with the date.",
        "executionMode": "synchronous",
        "maxConcurrency": "4",
        **fields,
    }
    for key, value in base.items():
        data.setlist(key, value if isinstance(value, list) else [value])
    rows = list((files or {}).items())
    data.update({"files-TOTAL_FORMS": str(len(rows) + 1), "files-INITIAL_FORMS": "0"})
    for index, (path, text) in enumerate(rows):
        data.update({f"files-{index}-path": path, f"files-{index}-content": text})
    return data


@pytest.mark.django_db
def test_every_store_keeps_a_version_with_what_it_changed(registry: AgentRegistry) -> None:
    services.stored_agent_put("a", _body(), "root")
    services.stored_agent_put("a", _body(announce="changed", files={"notes": "x"}), "admin:op")
    services.stored_agent_put("a", _body(announce="changed", files={"notes": "x"}), "root")
    versions = list(StoredAgentVersion.objects.filter(slug="a").order_by("version"))
    assert [(v.version, v.created_by, v.changes) for v in versions] == [
        (1, "root", ["created"]),
        (2, "admin:op", ["announce", "files/notes"]),
        (3, "root", []),
    ]
    assert registry.stored_info("a").version == 3


@pytest.mark.django_db
def test_a_slug_stored_again_after_a_delete_goes_on_from_its_last_version(registry: AgentRegistry) -> None:
    services.stored_agent_put("a", _body(), "root")
    services.stored_agent_put("a", _body(announce="two"), "root")
    services.stored_agent_delete("a")
    _, row, created = services.stored_agent_put("a", _body(announce="three"), "root")
    assert created and row.version == 3
    assert list(StoredAgentVersion.objects.filter(slug="a").values_list("version", flat=True)) == [3, 2, 1]


@pytest.mark.django_db
def test_a_restore_stores_the_old_version_again_through_the_checks(registry: AgentRegistry) -> None:
    services.stored_agent_put("helper", _body(), "root")
    services.stored_agent_put("a", _body(announce="first"), "root")
    services.stored_agent_put("a", _body(announce="second", extraAgents=[{"slug": "helper"}]), "root")
    _, row = services.stored_agent_restore("a", 1, "admin:op")
    assert row.version == 3 and row.contents["announce"] == "first" and row.helpers == []
    latest = StoredAgentVersion.objects.get(slug="a", version=3)
    assert latest.restored_from == 1 and latest.created_by == "admin:op"
    assert latest.changes == ["announce", "extraAgents"]
    # a version naming a helper deleted since is refused, and nothing is stored
    services.stored_agent_put("b", _body(extraAgents=[{"slug": "helper"}]), "root")
    services.stored_agent_put("b", _body(), "root")
    services.stored_agent_delete("helper")
    with pytest.raises(ApiError) as refused:
        services.stored_agent_restore("b", 1, "admin:op")
    assert refused.value.code == "unknown_helper"
    assert StoredAgent.objects.get(pk="b").version == 2 and StoredAgentVersion.objects.filter(slug="b").count() == 2
    with pytest.raises(ApiError) as missing:
        services.stored_agent_restore("a", 9, "admin:op")
    assert (missing.value.code, missing.value.status) == ("not_found", 404)


@pytest.mark.django_db
def test_the_editor_builds_the_contents_a_put_would_take(registry: AgentRegistry) -> None:
    # a browser sends a text box's lines ended by CRLF: the files are stored with Unix line ends
    form = StoredAgentForm(
        _post(
            {"toolDirectory": "tools", "policy_default": "defer", "policy_reason": "a human answers"},
            {"tools/today": TOOL.replace("\n", "\r\n")},
        )
    )
    assert form.is_valid(), form.errors
    assert form.file_rows.file_map() == {"tools/today": TOOL}
    assert form.contents() == {
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "flavor": "OpenAIv1",
        "apiKeyId": "k",
        "announce": "knows the date",
        "systemPrompt": ["Be brief.", "Answer with the date."],
        "toolDirectory": "tools",
        "toolCallPolicyConfig": {"default": {"tag": "defer", "reason": "a human answers"}, "rules": []},
    }
    # checking runs nothing: the bash tools are described when the agent is loaded
    assert form.check_report() == [
        "today: knows the date (0 tools known before loading)",
        "today: toolDirectory 'tools': built when the agent is loaded",
    ]
    assert StoredAgent.objects.count() == 0


@pytest.mark.django_db
def test_editing_keeps_what_the_fields_do_not_show(registry: AgentRegistry) -> None:
    body = _body(
        wakeOn=["mail"],
        extraAgents=[{"slug": "helper", "narrowable": False}],
        toolCallPolicyConfig={"default": {"tag": "defer", "reason": "r", "queue": "humans"}, "rules": []},
        maxConcurrency=4,
    )
    services.stored_agent_put("helper", _body(), "root")
    services.stored_agent_put("a", body, "root")
    row = StoredAgent.objects.get(pk="a")
    unbound = StoredAgentForm(instance=row)
    typed = {name: unbound[name].value() for name in unbound.fields if unbound[name].value() is not None}
    typed["helpers"] = ["helper"]
    typed["systemPrompt"] = "hi"
    form = StoredAgentForm(_post({**typed, "announce": "a stored agent"}), instance=row)
    assert form.is_valid(), form.errors
    assert {key: value for key, value in form.contents().items() if key != "slug"} == body


@pytest.mark.django_db
def test_a_refusal_lands_at_its_field_and_keeps_the_input(registry: AgentRegistry) -> None:
    form = StoredAgentForm(_post({"toolDirectory": "tools"}, {"lib/notes": "not a tool"}))
    assert not form.is_valid()
    assert form.errors["toolDirectory"] == [
        "agent_failed_to_load: toolDirectory 'tools' is not a directory of the files"
    ]
    assert form["toolDirectory"].value() == "tools" and form.file_rows.forms[0]["path"].value() == "lib/notes"
    bad_json = StoredAgentForm(_post({"bashToolboxes": '[{"tag": "SingleTool", "contents": {}}]'}))
    assert not bad_json.is_valid()
    assert "bash toolbox needs contents with a 'Path'" in " ".join(bad_json.errors["bashToolboxes"])
    owned = StoredAgentForm(_post({"other": '{"announce": "x", "wakeOn": []}'}))
    assert not owned.is_valid() and owned.errors["other"] == ["set announce with the field above"]
    assert StoredAgent.objects.count() == 0 and StoredAgentVersion.objects.count() == 0


@pytest.mark.django_db
def test_the_key_choices_are_the_ids_the_server_knows(registry: AgentRegistry) -> None:
    choices = [value for value, _ in StoredAgentForm().fields["apiKeyId"].choices]
    assert choices == ["k", "other", NO_KEY]
    assert not StoredAgentForm(_post({"apiKeyId": "made-up"})).is_valid()


def _save(form: StoredAgentForm) -> StoredAgent:
    assert form.is_valid(), form.errors
    assert form.prepared is not None
    return services.stored_agent_commit(form.prepared, "admin:op")[0]


@pytest.mark.django_db
def test_no_key_stores_an_id_no_keys_file_holds(registry: AgentRegistry) -> None:
    # a new agent: <slug>-key, a non-empty id as agents-exe requires, never the word "none"
    row = _save(StoredAgentForm(_post({"apiKeyId": NO_KEY})))
    assert row.contents["apiKeyId"] == "today-key"
    assert services.stored_agent_prepare("today", {**row.contents, "files": {}}).loaded.spec.apiKeyId == "today-key"
    # choosing no key again keeps that id, so the next version changes nothing of it
    again = StoredAgentForm(_post({"apiKeyId": NO_KEY}), instance=row)
    assert again.initial["apiKeyId"] == NO_KEY
    assert _save(again).contents["apiKeyId"] == "today-key"
    assert not any("apiKeyId" in change for change in StoredAgentVersion.objects.get(slug="today", version=2).changes)
    # an id a keys file holds is skipped
    set_registry(AgentRegistry({}, {"k": "secret-k", "busy-key": "s"}))
    services.stored_agent_put("busy", _body(apiKeyId="k"), "root")
    busy = StoredAgentForm(_post({"slug": "busy", "apiKeyId": NO_KEY}), instance=StoredAgent.objects.get(pk="busy"))
    assert _save(busy).contents["apiKeyId"] == "busy-key-2"


@pytest.mark.django_db
def test_an_older_stored_none_reads_as_no_key(registry: AgentRegistry) -> None:
    services.stored_agent_put("old", _body(apiKeyId="none"), "root")
    row = StoredAgent.objects.get(pk="old")
    unbound = StoredAgentForm(instance=row)
    assert unbound.initial["apiKeyId"] == NO_KEY
    labels = dict(unbound.fields["apiKeyId"].choices)
    assert labels[NO_KEY] == "no key is sent (stored as old-key)" and "none" not in labels
    saved = _save(StoredAgentForm(_post({"slug": "old", "apiKeyId": NO_KEY}), instance=row))
    assert saved.contents["apiKeyId"] == "old-key"
    version = StoredAgentVersion.objects.get(slug="old", version=2)
    assert version.contents["apiKeyId"] == "old-key"


def test_the_diff_shows_changed_lines_and_files() -> None:
    before = ({"announce": "one", "modelName": "m"}, {"tools/a": "echo 1\n"})
    after = ({"announce": "two", "modelName": "m"}, {"tools/a": "echo 1\n", "tools/b": "echo 2\n"})
    diff = version_diff(before, after)
    assert ("del", '-  "announce": "one",') in diff and ("add", '+  "announce": "two",') in diff
    assert ("file", "+++ files/tools/b") in diff and ("add", "+echo 2") in diff
    assert not any("tools/a" in line for _, line in diff)
    assert version_diff(after, after) == []
    assert ("file", "--- /dev/null") in version_diff(None, after)


@pytest.mark.django_db
def test_an_agent_with_an_older_flavor_and_an_unusual_default_saves_unchanged(registry: AgentRegistry) -> None:
    policy = {
        "default": {"tag": "runIsolated", "reason": "sandboxed"},
        "rules": [{"tool": "bash_x", "disposition": {"tag": "defer"}}],
    }
    body = _body(flavor="openai", toolCallPolicyConfig=policy, executionMode="asynchronous", maxConcurrency=2)
    services.stored_agent_put("old", body, "root")
    row = StoredAgent.objects.get(pk="old")
    unbound = StoredAgentForm(instance=row)
    assert ("openai", "openai (as stored)") in unbound.fields["flavor"].choices
    typed = {name: unbound[name].value() for name in unbound.fields if unbound[name].value() is not None}
    form = StoredAgentForm(_post({**typed, "announce": "a stored agent", "systemPrompt": "hi"}), instance=row)
    assert form.is_valid(), form.errors
    assert {key: value for key, value in form.contents().items() if key != "slug"} == body


@pytest.mark.django_db
def test_the_check_lists_the_tools_helpers_add(registry: AgentRegistry) -> None:
    services.stored_agent_put("helper", _body(), "root")
    form = StoredAgentForm(_post({"helpers": ["helper"]}))
    assert form.is_valid(), form.errors
    assert form.contents()["extraAgents"] == [{"slug": "helper"}]
    assert form.check_report() == [
        "today: knows the date (3 tools known before loading)",
        "today: tool io_prompt_agent_helper",
        "today: tool describe_agent",
        "today: tool derive_agent",
    ]


@pytest.mark.django_db
def test_a_refused_save_reports_a_bad_toolbox_and_a_wrong_tool_directory_together(registry: AgentRegistry) -> None:
    form = StoredAgentForm(_post({"bashToolboxes": '[{"tag": "Nonsense"}]', "toolDirectory": "tools"}))
    assert not form.is_valid()
    assert form.errors["bashToolboxes"]
    wrong = "toolDirectory 'tools' is not a directory of the files"
    assert any(wrong in problem for problem in form.errors["toolDirectory"])
    assert StoredAgent.objects.count() == 0
