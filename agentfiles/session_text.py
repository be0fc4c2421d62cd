"""Session files as text, written as agents-exe writes them (docs/sessions.md §1.12).

agents-exe writes a session document with Haskell's aeson: compact JSON (or aeson-pretty's
indented form), the keys in its order, numbers in aeson's forms, strings with aeson's escapes, a
newline at the end. :func:`session_text` writes the same bytes from the parsed document and a
:class:`FileLayout`, the part of the text that parsing loses (:func:`layout_of` reads it off a
file), so that a session file imported, stored and exported comes back byte for byte.

Plain Python: no Django, no models.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# aeson escapes the quote, the backslash and the control characters, and nothing else: the
# text is UTF-8 as it is (Python's \b and \f are \u0008 and \u000c there)
_ESCAPED = re.compile(r'["\\\x00-\x1f]')
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: The decimal exponents (of 0.d1d2... x 10^e) aeson writes without an exponent: 0.1 <= |x| < 10^7.
_FIXED_EXPONENTS = range(0, 8)


@dataclass(frozen=True)
class FileLayout:
    """How a session file's text is laid out, beyond its JSON value.

    Attributes:
        indent: spaces per level of aeson-pretty's form; ``None`` for compact JSON (agents-exe's).
        newline: whether the text ends with a newline (agents-exe's files do).
        sort_keys: whether the keys are written sorted (aeson's own order, agents-exe's files); when
            false they are written in the document's order.
    """

    indent: int | None = None
    newline: bool = True
    sort_keys: bool = True

    def to_json(self) -> dict[str, Any]:
        """``{"indent", "newline", "sort_keys"}``, as the session row keeps it."""
        return {"indent": self.indent, "newline": self.newline, "sort_keys": self.sort_keys}

    @classmethod
    def from_json(cls, data: Any) -> FileLayout:
        """The inverse of :meth:`to_json`; agents-exe's layout for ``None`` (a session this server made)."""
        if not isinstance(data, dict):
            return AGENTS_EXE
        indent = data.get("indent")
        return cls(
            indent if isinstance(indent, int) and not isinstance(indent, bool) else None,
            data.get("newline") is not False,
            data.get("sort_keys") is not False,
        )


#: What agents-exe writes: compact, sorted keys, a final newline.
AGENTS_EXE = FileLayout()


def layout_of(text: str, document: Any) -> FileLayout:
    """The layout of a session file's ``text``, whose parsed value is ``document``.

    Indented when the opening brace is followed by a line break (the indent is that of the first
    key); the keys count as sorted when every object of ``document`` has its keys in order.
    """
    body = text.lstrip("\ufeff \t\r\n")
    indent = None
    if body.startswith("{\n") or body.startswith("[\n"):
        line = body[2:].split("\n", 1)[0]
        indent = len(line) - len(line.lstrip(" "))
    return FileLayout(indent, text.endswith("\n"), _sorted_everywhere(document))


def document_layout(document: Any) -> FileLayout:
    """The layout of a document that came without its text (an API body): compact, with a final
    newline, its keys sorted if they came sorted."""
    return FileLayout(None, True, _sorted_everywhere(document))


def _sorted_everywhere(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            keys = list(item)
            if keys != sorted(keys):
                return False
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def aeson_number(value: int | float) -> str:
    """A number as aeson writes it: an integer as its digits; a float with the shortest digits that
    read back as it, fixed (``0.5``, ``2.0``) for 0.1 <= |x| < 10^7, else with an exponent
    (``1.666816e-2``, ``1.0e7``).

    Raises:
        ValueError: a float that is not finite (JSON has none).
    """
    if isinstance(value, bool) or not isinstance(value, float):
        return str(int(value))
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("JSON has no NaN or infinite number")
    sign = "-" if value < 0 else ""
    digits, exponent = _decimal_digits(abs(value))
    if exponent in _FIXED_EXPONENTS:
        if exponent == 0:
            return f"{sign}0.{digits}"
        whole = digits[:exponent].ljust(exponent, "0")
        return f"{sign}{whole}.{digits[exponent:] or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}e{exponent - 1}"


def _decimal_digits(value: float) -> tuple[str, int]:
    """``(digits, e)`` with ``value == 0.digits x 10^e``, the digits the shortest that read back
    as ``value`` (Python's ``repr`` finds them); ``("0", 0)`` for zero."""
    if value == 0:
        return "0", 0
    mantissa, _, power = f"{value!r}".partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # where the point is, counted from the first significant digit
    exponent = len(whole.lstrip("0")) if whole.strip("0") else -(len(fraction) - len(fraction.lstrip("0")))
    exponent += int(power or 0)
    return digits.rstrip("0") or "0", exponent


def _string(text: str) -> str:
    escaped = _ESCAPED.sub(lambda m: _ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text)
    return f'"{escaped}"'


def session_text(document: Any, layout: FileLayout = AGENTS_EXE) -> str:
    """The session file of ``document`` in ``layout``, as agents-exe writes it (docs/sessions.md §1.12).

    Args:
        document: the parsed session document (any JSON value is written).
        layout: the file's :class:`FileLayout`; agents-exe's by default.
    Returns:
        the file's text (to be written as UTF-8).
    """
    chunks: list[str] = []
    _write(document, layout, 0, chunks)
    if layout.newline:
        chunks.append("\n")
    return "".join(chunks)


def _write(value: Any, layout: FileLayout, level: int, out: list[str]) -> None:
    if isinstance(value, dict):
        items = sorted(value.items()) if layout.sort_keys else list(value.items())
        _container("{", "}", [(_string(str(k)), v) for k, v in items], layout, level, out)
    elif isinstance(value, list | tuple):
        _container("[", "]", [(None, v) for v in value], layout, level, out)
    elif isinstance(value, str):
        out.append(_string(value))
    elif value is None:
        out.append("null")
    elif isinstance(value, bool):
        out.append("true" if value else "false")
    elif isinstance(value, int | float):
        out.append(aeson_number(value))
    else:
        # a value json would refuse too: say so the same way
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _container(
    opening: str, closing: str, entries: list[tuple[str | None, Any]], layout: FileLayout, level: int, out: list[str]
) -> None:
    if not entries:
        out.append(opening + closing)
        return
    out.append(opening)
    inner = "" if layout.indent is None else "\n" + " " * (layout.indent * (level + 1))
    colon = ":" if layout.indent is None else ": "
    for index, (key, item) in enumerate(entries):
        if index:
            out.append(",")
        out.append(inner)
        if key is not None:
            out.append(key + colon)
        _write(item, layout, level + 1, out)
    if layout.indent is not None:
        out.append("\n" + " " * (layout.indent * level))
    out.append(closing)


def parse_session_text(text: str) -> tuple[Any, FileLayout]:
    """A session file's JSON value and layout.

    Raises:
        json.JSONDecodeError: the text is not JSON.
    """
    document = json.loads(text)
    return document, layout_of(text, document)
