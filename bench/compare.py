"""Compare two benchmark results files side by side.

    .venv/bin/python bench/compare.py before.json after.json

Each file is what one run of a script in bench/ wrote (``--json FILE``, or by default
``bench/results/<benchmark>-<time>.json``). Every number of the first file is matched with the
same figure of the second: a figure is named by its path in the document, a list item by its
text fields and its ``clients``, ``size`` and ``sessions`` (so the rows of a table pair up
whatever their order). Prints a markdown table with both values and after / before, then the
load averages both runs were taken at: figures from a loaded machine are not comparable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Fields that say which row of a table a list item is, besides its text fields.
KEY_FIELDS = ("clients", "size", "sessions", "turns", "history")
#: Parts of a document that describe the run rather than measure it.
SKIPPED = ("options", "machine", "versions")


def _label(item: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in item.items() if isinstance(v, str) or (k in KEY_FIELDS and isinstance(v, int))]
    return ",".join(parts)


def figures(document: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every number of ``document`` with its path (booleans and the run's description left out)."""
    if isinstance(document, bool):
        return
    if isinstance(document, int | float):
        yield path, float(document)
    elif isinstance(document, dict):
        for key, value in document.items():
            if key in SKIPPED or (isinstance(document, dict) and key in KEY_FIELDS and path.endswith("]")):
                continue
            yield from figures(value, f"{path}.{key}" if path else key)
    elif isinstance(document, list):
        for index, item in enumerate(document):
            label = _label(item) if isinstance(item, dict) else ""
            yield from figures(item, f"{path}[{label or index}]")


def compare(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The markdown comparison of two results documents."""
    old, new = dict(figures(before)), dict(figures(after))
    rows = ["| figure | before | after | after / before |", "|---|---|---|---|"]
    for name in [*old, *(n for n in new if n not in old)]:
        a, b = old.get(name), new.get(name)
        ratio = f"{b / a:.2f}" if a not in (None, 0) and b is not None else ""
        rows.append(f"| {name} | {_fmt(a)} | {_fmt(b)} | {ratio} |")
    loads = [doc.get("machine", {}).get("loadavg_at_end") for doc in (before, after)]
    rows.append("")
    rows.append(f"load average at the end (1, 5, 15 min): before {loads[0]}, after {loads[1]}")
    return "\n".join(rows)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main() -> int:
    """Read the two files named on the command line and print their comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    documents = [json.loads(path.read_text()) for path in (args.before, args.after)]
    kinds = {doc.get("benchmark") for doc in documents}
    if len(kinds) != 1:
        print(f"not the same benchmark: {sorted(map(str, kinds))}", file=sys.stderr)
        return 2
    print(compare(*documents))
    return 0


if __name__ == "__main__":
    sys.exit(main())
