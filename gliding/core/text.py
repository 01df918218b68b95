"""Text rules the summaries, tool answers and records share. Cutting to a width: keep the
start, end with "…" when anything was cut, never pass ``width`` characters. ``MARKUP_TAG``: the
tags a harness wraps output in (``<output>``, ``</returncode>``), which are not content.

Error text has bounds of its own: ``error_line`` is what a record keeps of an error (a report's
``why``, a queue entry, an agent's answer), ``traceback_text`` what a log line keeps of an
exception: never its frames' locals, never more than ``TRACEBACK_FRAMES`` frames or
``TRACEBACK_CHARS`` characters, however large the error's own message (a provider's error can
carry megabytes of someone else's traceback)."""

from __future__ import annotations

import re
import traceback

MARKUP_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")  # <output>, </returncode>: a harness's wrapping


def clip(text: str, width: int) -> str:
    """``text`` if it fits ``width`` characters, else its first ``width - 1`` and "…"."""
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str, width: int) -> str:
    """``text`` with every run of whitespace (newlines included) made one space, clipped."""
    return clip(" ".join(text.split()), width)


ERROR_CHARS = 500
"""Characters of an error a record keeps (``error_line``)."""
TRACEBACK_FRAMES = 12
"""Frames of each exception a logged traceback shows (the innermost ones)."""
TRACEBACK_CHARS = 6_000
"""Characters of a logged traceback, at most."""
_TRACEBACK_LINE = 500


def error_line(text: str, width: int = ERROR_CHARS) -> str:
    """The first non-blank line of ``text``, its whitespace made single spaces, clipped: what
    a report, a job record or an answer keeps of an error."""
    for line in text.splitlines():
        if line.strip():
            return one_line(line, width)
    return ""


def traceback_text(exc: BaseException, *, frames: int = TRACEBACK_FRAMES,
                   chars: int = TRACEBACK_CHARS) -> str:
    """``exc``'s traceback as plain text for a log line: the innermost ``frames`` frames of it
    and of each exception it was raised from, no locals, each line at most 500 characters,
    the whole at most ``chars`` (its end kept: where it was raised and the message)."""
    try:
        found = traceback.TracebackException.from_exception(
            exc, limit=-frames, capture_locals=False, max_group_width=8, max_group_depth=4)
        lines = [clip(line, _TRACEBACK_LINE) for chunk in found.format()
                 for line in chunk.splitlines()]
    except Exception:  # noqa: BLE001 - a traceback that cannot be rendered still leaves its kind and message
        lines = [f"{type(exc).__name__}: {clip(_safe_str(exc), _TRACEBACK_LINE)}"]
    text = "\n".join(lines).strip("\n")
    if len(text) <= chars:
        return text
    head, tail = text[: chars // 4], text[len(text) - chars * 3 // 4:]
    return f"{head}\n[… {len(text) - len(head) - len(tail)} characters left out …]\n{tail}"


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - str() of any error may raise; shown anyway
        return "<the error's text cannot be shown>"
