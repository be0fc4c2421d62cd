"""The prompt of ``run``, ``echo-prompt`` and ``session start``: directives in command-line order,
aliases and media (docs/cli.md §3.2).
"""

from __future__ import annotations

import argparse
import base64
import json
import mimetypes
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentfiles.project_config import ProjectConfig
from agentsite.cli.common import EXIT_CONFIG, CliError

#: Media files larger than this are refused (bytes).
MAX_MEDIA_BYTES = 50 * 1024 * 1024

#: The aliases every project has; ``promptAliases`` of the config file replaces one by name.
BUILTIN_ALIASES: dict[str, dict[str, str]] = {
    "translate": {
        "description": "translate stdin to English",
        "inputMode": "stdin",
        "template": "Translate this text into English:\n\n{{content}}",
    },
    "summarize": {
        "description": "summarize stdin",
        "inputMode": "stdin",
        "template": "Summarize this text briefly:\n\n{{content}}",
    },
    "code-review": {
        "description": "review a file of code",
        "inputMode": "file",
        "template": "Review this code for bugs, security problems and style:\n\n```{{language}}\n{{content}}\n```",
    },
    "explain": {
        "description": "explain a file of code",
        "inputMode": "file",
        "template": "Explain in plain English what this code does:\n\n```{{language}}\n{{content}}\n```",
    },
}

#: File extensions and the language name of their code fences.
LANGUAGES = {
    ".hs": "haskell", ".py": "python", ".js": "javascript", ".ts": "typescript", ".rs": "rust", ".go": "go",
    ".sh": "bash", ".rb": "ruby", ".java": "java", ".c": "c", ".h": "c", ".cpp": "cpp", ".json": "json",
    ".md": "markdown", ".sql": "sql", ".yaml": "yaml", ".yml": "yaml", ".html": "html", ".css": "css",
}

#: The ``--session-*`` directives and the ``session-print`` options each stands for.
SESSION_LEVELS = ("xs", "s", "m", "l", "xl")


class _Directive(argparse.Action):
    """Appends ``(kind, value)`` to ``namespace.script``, so that the order of the command line is kept."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        items = list(getattr(namespace, "script", None) or [])
        items.append((self.const, values))
        namespace.script = items


def add_prompt_flags(parser: argparse.ArgumentParser, *, media: bool = True) -> None:
    """The prompt directives (repeatable, kept in order), ``--alias`` and ``-m/--media``."""
    for flags, kind, metavar, help_text in (
        (("-p", "--prompt"), "prompt", "TEXT", "text, as is"),
        (("-f", "--file"), "file", "FILE", "a file's contents"),
        (("--shell",), "shell", "CMD", "what `sh -c CMD` prints"),
        (("-s", "--sep4"), "sep4", "SEP", "SEP four times"),
        (("-S", "--sep40"), "sep40", "SEP", "SEP forty times"),
        *(((f"--session-{level}",), f"session-{level}", "FILE", f"a session file as markdown ({level})")
          for level in SESSION_LEVELS),
    ):
        parser.add_argument(*flags, action=_Directive, const=kind, dest="script", default=argparse.SUPPRESS,
                            metavar=metavar, help=help_text)
    parser.add_argument("--alias", default=None, metavar="NAME", help="a prompt alias (always first)")
    if media:
        parser.add_argument("-m", "--media", action="append", default=[], metavar="[MIME;]PATH",
                            help="attach a file (repeatable)")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error}") from error


def _shell(command: str) -> str:
    done = subprocess.run(["sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=False)  # noqa: S603, S607 - the operator's own shell directive of agents run
    if done.returncode != 0:
        raise CliError(f"--shell {command!r} exited with status {done.returncode}")
    return done.stdout.decode("utf-8", errors="replace")


def _session_markdown(level: str, path: str) -> str:
    from sessions_app.markdown import LEVELS, render_markdown

    try:
        document = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        return render_markdown(document, LEVELS[level])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        print(f"warning: cannot load session {path}: {error}", file=sys.stderr)
        return f"_(Error loading session: {error} )_"


def _alias(name: str, config: ProjectConfig, script: list[tuple[str, str]], session_file: str | None,
           stdin_text: str | None) -> tuple[str, list[tuple[str, str]]]:
    """The alias's text and the directives left (a ``file``-mode alias takes the first ``--file``)."""
    aliases = {**BUILTIN_ALIASES, **config.aliases}
    alias = aliases.get(name)
    if not isinstance(alias, dict):
        listing = "\n".join(f"  - {key}" for key in sorted(aliases))
        raise CliError(f"Error: Unknown alias '{name}'\nAvailable aliases:\n{listing}", EXIT_CONFIG)
    if "template" not in alias:
        # the {systemPrompt, userPromptPrefix} form: the prefix opens the prompt
        return str(alias.get("userPromptPrefix") or ""), script
    filename = ""
    if alias.get("inputMode") == "file":
        files = [value for kind, value in script if kind == "file"]
        source = files[0] if files else session_file
        if source is not None:
            script = [item for item in script if item != ("file", source)] if files else script
            content, filename = _read(source), Path(source).name
        else:
            content = stdin_text if stdin_text is not None else sys.stdin.read()
    else:
        content = stdin_text if stdin_text is not None else sys.stdin.read()
    text = str(alias["template"])
    text = text.replace("{{content}}", content).replace("{{filename}}", filename)
    text = text.replace("{{language}}", LANGUAGES.get(Path(filename).suffix, ""))
    return text, script


def assemble_prompt(args: argparse.Namespace, config: ProjectConfig) -> str:
    """The prompt text: each directive's text followed by a newline, in command-line order, the
    alias first; with no directive and no alias, the whole of stdin.

    Raises:
        CliError: a file that cannot be read, a failing ``--shell`` command, an unknown alias.
    """
    script: list[tuple[str, str]] = list(getattr(args, "script", None) or [])
    texts: list[str] = []
    if args.alias:
        alias_text, script = _alias(args.alias, config, script, getattr(args, "session_file", None), None)
        texts.append(alias_text)
    elif not script:
        return sys.stdin.read()
    for kind, value in script:
        if kind == "prompt":
            texts.append(value)
        elif kind == "file":
            texts.append(_read(value))
        elif kind == "shell":
            texts.append(_shell(value))
        elif kind == "sep4":
            texts.append(value * 4)
        elif kind == "sep40":
            texts.append(value * 40)
        else:
            texts.append(_session_markdown(kind.removeprefix("session-"), value))
    return "".join(f"{text}\n" for text in texts)


def read_media(specs: list[str]) -> list[dict[str, str]]:
    """``-m [MIME;]PATH`` items as the HTTP API's media (``mime``, ``base64``, ``filename``); lists
    them on stderr.

    Raises:
        CliError: a file that cannot be read or is over 50 MB, a type that cannot be guessed.
    """
    media = []
    for spec in specs:
        mime, separator, path = spec.partition(";")
        if not separator:
            mime, path = "", spec
        if not mime:
            mime = mimetypes.guess_type(path)[0] or ""
            if not mime:
                raise CliError(
                    f"Cannot infer media type for file: {path}. Please specify explicitly as 'mime/type;{path}'"
                )
        file = Path(path)
        try:
            if file.stat().st_size > MAX_MEDIA_BYTES:
                raise CliError(f"{path}: over the 50 MB limit of a media file")
            data = file.read_bytes()
        except OSError as error:
            raise CliError(f"cannot read {path}: {error}") from error
        media.append({"mime": mime, "base64": base64.b64encode(data).decode("ascii"), "filename": file.name})
    if media:
        print(f"Attaching {len(media)} media file(s):", file=sys.stderr)
        for item in media:
            print(f"  - {item['mime']}: {item['filename']}", file=sys.stderr)
    return media
