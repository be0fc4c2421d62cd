"""An operator's browser for the console tests: Debian's chromium driven by Playwright, accounts
made with ``agents manage``, and the stored-agent editor filled as a person would fill it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.harness import ROOT, Server, base_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PASSWORD = "operator-password-1"


def require_chromium() -> None:
    """Fail (never skip) when chromium is missing."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"


def manage(server: Server, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``agents manage ARGS`` on the server's database."""
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "manage", *args],
        cwd=ROOT,
        env=base_env(DATABASE_URL=f"sqlite:///{server.db}", **env),
        check=True,
        capture_output=True,
        text=True,
        # a Django start on a machine shared with other test runs can take over a minute
        timeout=180,
    )


def create_superuser(server: Server, username: str = "operator") -> None:
    """A superuser with :data:`PASSWORD`."""
    manage(
        server,
        "createsuperuser",
        "--noinput",
        "--username",
        username,
        "--email",
        f"{username}@example.com",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
    )


def create_staff(server: Server, username: str, permissions: list[str]) -> None:
    """A staff user (not superuser) with :data:`PASSWORD` and only ``permissions`` (``app.codename``)."""
    code = (
        "from django.contrib.auth.models import Permission, User\n"
        f"user = User.objects.create_user({username!r}, password={PASSWORD!r}, is_staff=True)\n"
        f"for name in {permissions!r}:\n"
        "    app, codename = name.split('.')\n"
        "    user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))\n"
    )
    manage(server, "shell", "-c", code)


def log_in(page: Page, server: Server, username: str = "operator") -> None:
    """Log into the admin."""
    page.goto(f"{server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_contain_text("agents-server")


def fill_agent(page: Page, *, slug: str | None, model_url: str, announce: str, prompt: str, api_key: str) -> None:
    """Fill the editor's common fields (``slug`` only on the add page), typing no JSON."""
    if slug is not None:
        page.fill("#id_slug", slug)
    page.fill("#id_announce", announce)
    page.fill("#id_modelUrl", model_url)
    page.fill("#id_modelName", "scripted")
    page.select_option("#id_flavor", "OpenAIv1")
    page.select_option("#id_apiKeyId", api_key)
    page.fill("#id_systemPrompt", prompt)


def fill_file(page: Page, index: int, path: str, content: str) -> None:
    """Fill file row ``index``, adding rows with the page's "Add a file" button as needed."""
    while page.locator(f"#id_files-{index}-path").count() == 0:
        page.click("#add-file-row")
    page.fill(f"#id_files-{index}-path", path)
    page.fill(f"#id_files-{index}-content", content)


#: Where the browser tests keep their screenshots: ``AGENTS_TEST_ARTIFACTS``, or
#: ``test-artifacts/`` in the working tree (git ignores it).
ARTIFACTS = Path(os.environ.get("AGENTS_TEST_ARTIFACTS") or ROOT / "test-artifacts")

#: axe-core as the npm registry ships it (tests/vendor/axe-core/README.md).
AXE = ROOT / "tests" / "vendor" / "axe-core" / "axe.min.js"


def keep_screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot of ``page`` as ``ARTIFACTS/<name>.png`` and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def axe_violations(page: Page, impacts: tuple[str, ...] = ("serious", "critical")) -> list[dict[str, Any]]:
    """The axe-core violations of the page as it is now whose impact is one of ``impacts``:
    ``[{"id", "impact", "help", "nodes": [html, ...]}]`` (WCAG 2.x A and AA rules and axe's best
    practices)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(content=AXE.read_text())
    found = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations.map((v) => ({
            id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.html)}))"""
    )
    return [violation for violation in found if violation["impact"] in impacts]
