"""``agents manage import_session FILE --agent SLUG``: a session file of agents-exe becomes a session."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agentfiles.session_text import parse_session_text
from foundation.errors import ApiError
from sessions_app.services.sessions import session_import


class Command(BaseCommand):
    """Import one session file (``sessions_app.services.sessions.session_import``); prints its id."""

    help = "Import an agents-exe session file as a session of an agent; prints the session id."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("file", help="the session file (JSON)")
        parser.add_argument("--agent", required=True, help="the slug of the agent the session runs with")
        parser.add_argument("--owner", default=None, help="its owner, when the server has authentication on")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        try:
            # the layout is kept so that the export gives the file's bytes back (docs/sessions.md §1.11)
            document, layout = parse_session_text(path.read_bytes().decode("utf-8-sig"))
        except (OSError, ValueError) as error:
            raise CommandError(f"{path}: {error}") from error
        try:
            session = session_import(
                document=document, agent_slug=options["agent"], owner=options["owner"], layout=layout
            )
        except ApiError as error:
            raise CommandError(f"{path}: {error.message}") from error
        self.stdout.write(f"{session.pk} {session.status}")
