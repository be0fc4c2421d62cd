"""policy.py: toolCallPolicyConfig matching (docs/tools.md §5)."""

from __future__ import annotations

from agentfiles.schema import ToolCallPolicyConfig
from tools_app.policy import ToolCallPolicy


def policy(data: dict | None) -> ToolCallPolicy:
    return ToolCallPolicy.from_config(ToolCallPolicyConfig.model_validate(data) if data is not None else None)


def test_no_config_runs_everything_sync():
    p = policy(None)
    assert p.decide("bash_anything") == {"tag": "runSync"}
    assert p.is_trivial


def test_exact_names_first_match_wins_default_otherwise():
    p = policy(
        {
            "default": {"tag": "runAsync"},
            "rules": [
                {"tool": "bash_build", "disposition": {"tag": "defer", "reason": "external worker"}},
                {"tool": "bash_build", "disposition": {"tag": "runSync"}},
                {"tool": "bash_fetch", "disposition": {"tag": "runAsync", "attachSeconds": 10}},
            ],
        }
    )
    assert p.decide("bash_build") == {"tag": "defer", "reason": "external worker"}
    assert p.decide("bash_fetch") == {"tag": "runAsync", "attachSeconds": 10}
    assert p.decide("bash_buil") == {"tag": "runAsync"}  # exact, not prefix
    assert p.decide("build") == {"tag": "runAsync"}  # the bare slug is not the wire name
    assert not p.is_trivial


def test_default_defaults_to_run_sync():
    p = policy({"rules": [{"tool": "x", "disposition": {"tag": "defer", "reason": "r"}}]})
    assert p.decide("y") == {"tag": "runSync"}


def test_prompt_agent_rule_matches_the_io_wire_name():
    p = policy(
        {
            "rules": [
                {"tool": "prompt_agent_helper", "disposition": {"tag": "defer", "reason": "ask a human"}},
                {"tool": "io_prompt_agent_other", "disposition": {"tag": "runAsync"}},
            ]
        }
    )
    assert p.decide("io_prompt_agent_helper") == {"tag": "defer", "reason": "ask a human"}
    assert p.decide("prompt_agent_helper") == {"tag": "defer", "reason": "ask a human"}
    assert p.decide("io_prompt_agent_other") == {"tag": "runAsync"}
    assert p.decide("prompt_agent_other") == {"tag": "runAsync"}
    assert p.decide("io_prompt_agent_helper2") == {"tag": "runSync"}


def test_decorate_is_flattened_for_deciding():
    p = policy(
        {
            "rules": [
                {
                    "tool": "bash_slow",
                    "disposition": {
                        "tag": "decorate",
                        "decorators": [{"tag": "WithTimeout", "contents": 30}],
                        "inner": {"tag": "decorate", "decorators": [], "inner": {"tag": "runAsync"}},
                    },
                },
                {"tool": "bash_odd", "disposition": {"tag": "decorate", "decorators": []}},
            ]
        }
    )
    assert p.decide("bash_slow") == {"tag": "runAsync"}
    raw = p.disposition_for("bash_slow")
    assert raw["tag"] == "decorate" and raw["decorators"] == [{"tag": "WithTimeout", "contents": 30}]
    assert p.decide("bash_odd") == {"tag": "runSync"}


def test_other_dispositions_are_accepted_as_given():
    p = policy(
        {
            "default": {"tag": "runIsolated", "spec": {"tag": "docker", "image": "img"}},
            "rules": [],
        }
    )
    assert p.decide("bash_x") == {"tag": "runIsolated", "spec": {"tag": "docker", "image": "img"}}


def test_original_name_also_matches():
    p = policy({"rules": [{"tool": "bash_my.tool", "disposition": {"tag": "defer", "reason": "r"}}]})
    assert p.decide("bash_my_tool") == {"tag": "runSync"}
    assert p.decide("bash_my_tool", original_name="bash_my.tool") == {"tag": "defer", "reason": "r"}


def test_results_are_copies():
    p = policy({"rules": [{"tool": "t", "disposition": {"tag": "defer", "reason": "r"}}]})
    p.decide("t")["reason"] = "changed"
    assert p.decide("t") == {"tag": "defer", "reason": "r"}
