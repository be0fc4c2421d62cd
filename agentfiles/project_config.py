"""Where the command line and the agent loader find things: ``agents-exe.cfg.json``, the config
directory, the agent files, the API keys file (docs/cli.md §2).

Nothing here starts Django or reads the database: these are files on disk, found the way
agents-exe finds them, so that a project laid out for agents-exe works unchanged.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The project configuration file, looked for in the working directory and then upward.
CONFIG_FILE_NAME = "agents-exe.cfg.json"
#: The API keys file inside the config directory.
SECRET_KEYS_NAME = "secret-keys"  # noqa: S105 - a name or a code, not a credential
#: Agent files are the ``.json`` (and ``.tramaj``) files of a directory.
AGENT_SUFFIXES = (".json", ".tramaj")


class ConfigError(Exception):
    """``agents-exe.cfg.json`` cannot be read or has a field of the wrong type (exit code 3)."""


@dataclass
class ProjectConfig:
    """The project configuration as found from the working directory.

    Attributes:
        path: the ``agents-exe.cfg.json`` file, ``None`` when none was found.
        data: its JSON object (``{}`` without a file).
        config_dir: the config directory: ``agentsConfigDir`` of the file, else
            ``AGENTS_CONFIG_DIR``, else ``~/.config/agents-exe`` (absolute, ``~`` expanded).
    """

    path: Path | None
    data: dict[str, Any] = field(default_factory=dict)
    config_dir: Path = field(default_factory=lambda: default_config_dir())

    def resolve(self, value: str) -> Path:
        """A path named in the file: ``~`` expanded, relative ones taken from the file's directory."""
        path = Path(value).expanduser()
        if not path.is_absolute() and self.path is not None:
            path = self.path.parent / path
        return path.resolve()

    def paths(self, key: str) -> list[Path]:
        """The list of paths under ``key`` (``agentsFiles``, ``agentsDirectories``, ``tramajLibraries``),
        resolved."""
        return [self.resolve(value) for value in self.data.get(key) or []]

    @property
    def aliases(self) -> dict[str, Any]:
        """The ``promptAliases`` object (``{}`` when absent)."""
        return self.data.get("promptAliases") or {}


def default_config_dir() -> Path:
    """``AGENTS_CONFIG_DIR``, else ``~/.config/agents-exe`` (not created)."""
    given = os.environ.get("AGENTS_CONFIG_DIR", "")
    return Path(given or "~/.config/agents-exe").expanduser().resolve()


def find_config_file(start: Path | None = None) -> Path | None:
    """The first ``agents-exe.cfg.json`` in ``start`` (default: the working directory) or a parent."""
    directory = (start or Path.cwd()).resolve()
    for candidate in (directory, *directory.parents):
        path = candidate / CONFIG_FILE_NAME
        if path.is_file():
            return path
    return None


def load_project_config(start: Path | None = None) -> ProjectConfig:
    """Find and read the project configuration (docs/cli.md §2.1).

    Raises:
        ConfigError: the file found is not a JSON object, or a known key has the wrong type.
    """
    path = find_config_file(start)
    if path is None:
        return ProjectConfig(path=None)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"failed to load {path}: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"failed to load {path}: not a JSON object")
    for key in ("agentsFiles", "agentsDirectories", "tramajLibraries"):
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ConfigError(f"{path}: {key} must be a list of paths")
    for key in ("agentsConfigDir",):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ConfigError(f"{path}: {key} must be a path")
    if data.get("promptAliases") is not None and not isinstance(data["promptAliases"], dict):
        raise ConfigError(f"{path}: promptAliases must be an object")
    config = ProjectConfig(path=path, data=data)
    if data.get("agentsConfigDir"):
        config.config_dir = config.resolve(data["agentsConfigDir"])
    return config


def _agent_files_under(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    found = [p for p in directory.rglob("*") if p.suffix in AGENT_SUFFIXES and p.is_file()]
    return sorted(p.resolve() for p in found)


def discovered_agent_files(config: ProjectConfig) -> list[Path]:
    """The agent files found without ``--agent-file`` (docs/cli.md §2.2).

    With a project config: its ``agentsFiles`` then every agent file under its
    ``agentsDirectories`` (recursively, sorted); without one, every agent file under
    ``<config dir>/default``. A file found twice is kept once, at its first place.
    """
    if config.path is not None:
        candidates = config.paths("agentsFiles")
        for directory in config.paths("agentsDirectories"):
            candidates.extend(_agent_files_under(directory))
    else:
        candidates = _agent_files_under(config.config_dir / "default")
    unique: list[Path] = []
    for path in candidates:
        if path not in unique:
            unique.append(path)
    return unique


def default_api_keys_file(config: ProjectConfig) -> Path | None:
    """``<config dir>/secret-keys`` when that file exists, else ``None`` (no keys, no error)."""
    path = config.config_dir / SECRET_KEYS_NAME
    return path if path.is_file() else None
