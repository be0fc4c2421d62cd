"""The documentation site (docs/docsite.md §1, §2): its reference pages are rendered from the code,
so that a change there changes the page, and its build refuses a broken link.

The renderers run in this process on the real parser, settings, error catalogue and event kinds;
the build runs mkdocs itself, as scripts/test does, on a copy of docs/ with one broken link.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import pytest

from agentsite import docsite
from agentsite.cli import build_parser
from foundation.errors import ErrorCode
from sessions_app.event_types import EventKind
from tests.harness import ROOT, Processes, base_env


def _serve_port(parser: argparse.ArgumentParser) -> argparse.Action:
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next(a for a in commands.choices["serve"]._actions if "--port" in a.option_strings)


def test_changing_a_flags_help_text_changes_the_page() -> None:
    parser = build_parser()
    before = docsite.command_line_page(parser)
    port = _serve_port(parser)
    assert f"| `--port` `PORT` | `{port.default!r}` | {port.help} |" in before
    port.help = "the TCP port, a help text no page has yet"
    after = docsite.command_line_page(parser)
    assert "| the TCP port, a help text no page has yet |" in after
    assert after.replace("the TCP port, a help text no page has yet", str(_serve_port(build_parser()).help)) == before


def test_every_command_and_group_has_its_section() -> None:
    page = docsite.command_line_page(build_parser())
    for heading in ("### `serve`", "### `worker`", "### `check`", "### `session`", "#### `session start`"):
        assert f"\n{heading}\n" in page, heading
    # the global options are listed once, not again under every command
    assert page.count("| `--params-file` `FILE` |") == 1


def test_a_new_environment_read_is_listed_with_its_comment_and_flag(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "conf.py").write_text(
        "from foundation.env import env\n"
        "# Widgets a run may make, a reason written above the read.\n"
        'WIDGETS = env.int("AGENTS_WIDGETS", default=3)\n'
        'AGENTS = {"SIZE": env.float("AGENTS_SIZE", default=1.5)}\n'
        'parser.add_argument("--colour", default=env.str("AGENTS_COLOUR", default="blue"))\n'
        'HOME = os.environ.get("HOME_OF_WIDGETS")\n'
        'NAME = "agents_lowercase"\n'
        "VALUE = env.str(NAME)\n"
    )
    reads = docsite.environment_reads(tmp_path, ["pkg"])
    assert sorted(reads) == ["AGENTS_COLOUR", "AGENTS_SIZE", "AGENTS_WIDGETS", "HOME_OF_WIDGETS"]
    widgets = reads["AGENTS_WIDGETS"]
    assert (widgets.kinds, widgets.defaults, widgets.flags) == ({"integer"}, ["3"], [])
    assert widgets.notes == ["Widgets a run may make, a reason written above the read."]
    assert widgets.places == ["pkg/conf.py:3"] and widgets.settings == ["WIDGETS"]
    assert reads["AGENTS_SIZE"].settings == ['AGENTS["SIZE"]'] and reads["AGENTS_SIZE"].kinds == {"number"}
    assert reads["AGENTS_COLOUR"].flags == ["--colour"] and reads["AGENTS_COLOUR"].defaults == ['"blue"']


def test_the_settings_page_lists_what_the_code_reads() -> None:
    page = docsite.settings_page(ROOT)
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "AGENTS_LEASE_SECONDS", "AGENTS_CONFIG_DIR"):
        assert f"| `{name}` |" in page, name
    port = next(line for line in page.splitlines() if line.startswith("| `AGENTS_PORT` |"))
    assert "| integer | `8080` | `--port` |" in port and "`agentsite/cli/server.py:" in port
    lease = next(line for line in page.splitlines() if line.startswith("| `AGENTS_LEASE_SECONDS` |"))
    assert '| `AGENTS["LEASE_SECONDS"]` |' in lease


def test_every_error_code_and_event_kind_is_on_its_page() -> None:
    errors, events = docsite.errors_page(), docsite.events_page()
    for code in ErrorCode:
        assert f"| `{code}` |" in errors, code
    assert "| `payload_too_large` | 413 | `PayloadTooLarge` |" in errors
    for kind in EventKind:
        assert f"\n## `{kind}`\n" in events, kind
    assert "| `progress` | `float` | no |" in events


def test_the_http_api_page_renders_operations_and_schemas() -> None:
    document = {
        "info": {"title": "agents-server", "version": "1"},
        "paths": {
            "/v1/things/{id}": {
                "get": {
                    "summary": "One thing.",
                    "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {
                        "404": {"description": "", "content": {"application/json": {"schema": {"$ref": "#/x/Error"}}}},
                        "200": {"description": "the thing", "content": {"application/json": {"schema": {}}}},
                    },
                }
            }
        },
        "components": {"schemas": {"Error": {"type": "object", "properties": {"error": {"type": "string"}}}}},
    }
    page = docsite.http_api_page(document)
    assert "### `GET /v1/things/{id}`\n\nOne thing." in page
    assert "| `id` | path | `string` | yes |" in page
    # answers in the order of their status, links to the schemas they name
    assert page.index("| `200` | the thing |") < page.index("| `404` |  | [`Error`](#error) (`application/json`) |")
    assert "### Error\n" in page and "| `error` | `string` | no |" in page


def test_the_site_pages_are_the_generated_pages() -> None:
    pages = docsite.site_pages(build_parser(), ROOT, {"paths": {}, "components": {}})
    assert set(pages) == {*docsite.GENERATED_PAGES, "reference/openapi.json"}
    # none of them is stored in docs/: they exist only in the built site
    assert not any((ROOT / "docs" / name).exists() for name in pages)


def test_the_front_page_stays_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text()
    # a front page, not the manual: everything else lives in docs/
    assert len(readme.encode()) < 16 * 1024
    targets = re.findall(r"\]\(([^)#]+)", readme)
    assert targets and [t for t in targets if not (ROOT / t).exists()] == []
    # every page of the site is listed in the nav (mkdocs --strict refuses the others too)
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f": {p.name}\n" not in nav] == []


@pytest.mark.integration
def test_the_build_refuses_a_broken_link(tmp_path: Path, processes: Processes) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    config = (ROOT / "mkdocs.yml").read_text()
    config = config.replace("- scripts/mkdocs_hooks.py", f"- {ROOT / 'scripts' / 'mkdocs_hooks.py'}")
    config = config.replace('base_path: ["."]', f'base_path: ["{ROOT}"]')
    (tmp_path / "mkdocs.yml").write_text(config)
    missing = "no-such-page" + ".md"  # spelt apart: the citation test would take it for a citation
    with (tmp_path / "docs" / "unsupported.md").open("a") as page:
        page.write(f"\nSee [the missing page]({missing}).\n")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    done = processes.run(build, cwd=tmp_path, env=base_env(NO_MKDOCS_2_WARNING="1"), capture_output=True, text=True)
    assert done.returncode != 0
    assert missing in done.stderr and "unsupported.md" in done.stderr
