"""Fixtures for the LLM tests: fast retry backoff (the scripted model is ``llm_server`` of
tests/conftest.py)."""

from __future__ import annotations

import pytest

from agents_app import llm


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep retry backoff tiny so that the retry tests take milliseconds, not seconds."""
    monkeypatch.setattr(llm, "RETRY_BASE_DELAY", 0.01)
    monkeypatch.setattr(llm, "RETRY_MAX_DELAY", 0.05)
