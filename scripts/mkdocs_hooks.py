"""mkdocs hooks of the documentation site: add the reference pages rendered from the code.

mkdocs.yml names this file under ``hooks``. The pages are made in memory at every build (never
written into docs/), from the code of this checkout (docs/docsite.md §2).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent


def _pages() -> dict[str, str]:
    """The generated pages, by their path in the site."""
    sys.path.insert(0, str(ROOT))
    # the settings read their key from the environment; the schema is generated without a
    # database or a request, so a key of the build's own is all they need
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "documentation-build-only")
    import django

    django.setup()
    from agentsite import docsite
    from agentsite.cli import build_parser
    from foundation.openapi import openapi_document

    return docsite.site_pages(build_parser(), ROOT, openapi_document())


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    """Add the generated pages to the site's files (mkdocs calls it before building the nav)."""
    for path, content in _pages().items():
        files.append(File.generated(config, path, content=content))
    return files
