"""Comments and docstrings cite only this repository: the README and the pages of ``docs/``.

A maintainer who has only this repository must be able to follow every reference, so:

* nothing cites the texts outside the repository the project was built from (the inventories
  kept in a ``spec`` folder beside it, their list of decisions and architecture notes, the
  shared reference texts), and every Markdown file named exists here;
* every section sign belongs to a citation of a ``docs/`` page, such as ``docs/api.md §7.5`` or
  the list ``docs/api.md §7.5, §7.6``, and every section cited is a numbered heading of that
  page (the pages link each other with Markdown links whose text names the page and section,
  checked the same way).

The test fixtures beside the repository (``../shared/fixtures``) are data the tests read, not a
citation, and stay allowed. No file is exempt, this one included: its patterns are written so
that they do not match themselves.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agentsite.docsite import GENERATED_PAGES
from tests.harness import ROOT

#: Where citations are looked for: the product packages, the tests, the scripts and examples,
#: and the prose (the README and the docs themselves).
SCANNED = (
    "foundation",
    "agentfiles",
    "agentsite",
    "agents_app",
    "sessions_app",
    "hooks_app",
    "console_app",
    "tools_app",
    "devtools",
    "tests",
    "bench",
    "scripts",
    "examples",
    ".ci",
    "docs",
    "README.md",
)
#: Text files by suffix ("" for scripts without one).
SUFFIXES = {"", ".py", ".md", ".json", ".sh", ".html", ".toml", ".txt", ".cfg", ".yml", ".yaml"}

SIGN = "\u00a7"
#: Citations of files that live outside the repository.
OUTSIDE = re.compile(
    r"\bspec/[\w.-]*"  # the spec folder, or a file of it
    r"|\bDECISIONS\b"  # its list of decisions, by name
    r"|\bARCHITECTURE\b"  # its architecture notes
    r"|\.\./shared/(?:spec|reference)\b"
    r"|\breference/\d{3}_"  # the reference texts themselves
)
#: Markdown file names that a feature reads from its users' directories (a skill's manifest),
#: named as data, not cited.
DATA_FILE_NAMES = {"SKILL.md"}
#: Where a Markdown name may be found besides the repository's root and the naming file's folder:
#: the documentation site's pages, which the generated reference pages (docs/docsite.md §2) and
#: their generator link by name, from the site's ``reference/`` folder.
SITE = (ROOT / "docs", ROOT / "docs" / "reference")
#: A Markdown file named anywhere (a docs page, the README, or a file that is not here).
MARKDOWN = re.compile(r"(?<![\w./-])((?:\.\./)*[\w./-]*[\w-]\.md)\b")

SECTION = r"\d+(?:\.\d+)*"
#: A citation of a docs page's section, with the further sections it may list.
CITATION = re.compile(
    rf"docs/(?P<page>[\w-]+)\.md\s+(?P<first>{SIGN}\s?{SECTION}|{SECTION}\b)"
    rf"(?P<more>(?:(?:,\s*|\s+and\s+|\s+or\s+){SIGN}\s?{SECTION}|-{SECTION})*)"
)
#: A link of one docs page to another, the link text naming the page and, optionally, a section.
LINK = re.compile(rf"\[(?P<page>[\w-]+)\.md(?:\s+{SIGN}(?P<section>{SECTION}))?\]\((?P<target>[\w-]+\.md)\)")
HEADING = re.compile(rf"^#+\s+({SECTION})\.?\s", re.MULTILINE)


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file()
                and p.suffix in SUFFIXES
                and "__pycache__" not in p.parts
                # hidden folders hold what tools install (e.g. the benchmarks' peers), not ours
                and not any(part.startswith(".") for part in p.relative_to(path).parts[:-1])
            )
    return found


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, offset) + 1}"


def _sections(page: str) -> set[str] | None:
    """The section numbers of ``docs/<page>.md``, ``None`` when there is no such page."""
    path = ROOT / "docs" / f"{page}.md"
    if not path.is_file():
        return None
    return set(HEADING.findall(_read(path)))


def _check(page: str, numbers: list[str], where: str) -> list[str]:
    sections = _sections(page)
    if sections is None:
        return [f"{where}: docs/{page}.md does not exist"]
    return [f"{where}: docs/{page}.md has no section {n}" for n in numbers if n not in sections]


def test_docs_pages_have_numbered_sections() -> None:
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages, "docs/ holds no page"
    for page in pages:
        assert _sections(page.stem), f"docs/{page.name} has no numbered section heading"


def test_no_citation_of_files_outside_the_repository() -> None:
    found = []
    for path in _files():
        text = _read(path)
        for match in OUTSIDE.finditer(text):
            found.append(f"{_where(path, text, match.start())}: {match.group(0)!r}")
        for match in MARKDOWN.finditer(text):
            named = match.group(1)
            if Path(named).name in DATA_FILE_NAMES:
                continue
            if named in GENERATED_PAGES:
                continue
            if not any(Path(os.path.normpath(base / named)).is_file() for base in (ROOT, path.parent, *SITE)):
                found.append(f"{_where(path, text, match.start())}: {named!r} is not a file of this repository")
    assert not found, "citations of files outside the repository:\n" + "\n".join(found)


def test_every_section_cited_exists() -> None:
    found = []
    for path in _files():
        text = _read(path)
        cited: set[int] = set()
        for match in CITATION.finditer(text):
            numbers = [match.group("first"), *re.findall(rf"{SIGN}?\s?{SECTION}", match.group("more"))]
            numbers = [n.lstrip(SIGN + " ") for n in numbers]
            found += _check(match.group("page"), numbers, _where(path, text, match.start()))
            cited.update(range(match.start(), match.end()))
        if path.parent == ROOT / "docs":
            for match in LINK.finditer(text):
                where = _where(path, text, match.start())
                if f"{match.group('page')}.md" != match.group("target"):
                    named, target = match.group("page"), match.group("target")
                    found.append(f"{where}: the link names {named}.md but points to {target}")
                found += _check(match.group("page"), [match.group("section")] if match.group("section") else [], where)
                cited.update(range(match.start(), match.end()))
            for match in re.finditer(rf"{SIGN}({SECTION})", text):
                if match.start() not in cited:
                    # a bare reference inside a page is to one of its own sections
                    found += _check(path.stem, [match.group(1)], _where(path, text, match.start()))
                    cited.add(match.start())
        for match in re.finditer(SIGN, text):
            if match.start() not in cited:
                found.append(f"{_where(path, text, match.start())}: a section sign that does not follow docs/<page>.md")
    assert not found, "bad section citations:\n" + "\n".join(found)
