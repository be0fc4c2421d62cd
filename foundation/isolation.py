"""The value of ``--isolate-tools`` (docs/guide-toolboxes.md §5): read by the command line
before Django starts, and by ``sessions_app.isolation`` when it runs a call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class IsolationSpec:
    """A parsed ``--isolate-tools`` value.

    Attributes:
        kind: ``docker`` (``docker run --rm -i IMAGE``) or ``process`` (the executable PATH).
        target: the image or the path.
    """

    kind: Literal["docker", "process"]
    target: str

    @classmethod
    def parse(cls, value: str) -> IsolationSpec:
        """Read ``docker:IMAGE`` or ``process:PATH``.

        Raises:
            ValueError: anything else, or an empty image or path.
        """
        kind, separator, target = value.partition(":")
        if kind not in ("docker", "process") or not separator or not target:
            raise ValueError(f"--isolate-tools takes docker:IMAGE or process:PATH, not {value!r}")
        return cls("docker" if kind == "docker" else "process", target)

    def argv(self) -> list[str]:
        """The worker's command line."""
        return ["docker", "run", "--rm", "-i", self.target] if self.kind == "docker" else [self.target]

    def policy(self) -> dict[str, Any]:
        """The envelope's ``policy``."""
        if self.kind == "docker":
            return {"tag": "runIsolated", "spec": {"tag": "docker", "image": self.target}}
        return {"tag": "runIsolated", "spec": {"tag": "localProcess", "path": self.target}}
