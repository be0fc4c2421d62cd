"""The test layers (the README's "Tests"): the conftest marks each test by the fixtures it uses."""

from __future__ import annotations

from typing import Any

import pytest

LAYERS = ("integration", "scaled_out", "browser")


def _layers(request: pytest.FixtureRequest) -> set[str]:
    return {name for name in LAYERS if request.node.get_closest_marker(name) is not None}


def test_an_in_process_test_is_in_no_layer(request: pytest.FixtureRequest) -> None:
    assert _layers(request) == set()


def test_a_test_that_can_start_processes_is_an_integration_test(
    request: pytest.FixtureRequest, start_server: Any, start_worker: Any, llm_server: Any
) -> None:
    assert _layers(request) == {"integration"}


def test_a_test_that_needs_redis_or_postgresql_is_scaled_out_and_integration(
    request: pytest.FixtureRequest, redis_url: str
) -> None:
    assert _layers(request) == {"integration", "scaled_out"}


@pytest.mark.browser
def test_a_browser_test_is_an_integration_test(request: pytest.FixtureRequest) -> None:
    assert _layers(request) == {"integration", "browser"}


def test_the_layers_are_declared_and_markers_are_strict(request: pytest.FixtureRequest) -> None:
    declared = {line.split(":", 1)[0] for line in request.config.getini("markers")}
    assert set(LAYERS) <= declared
    assert request.config.option.strict_markers or "--strict-markers" in request.config.getini("addopts")
