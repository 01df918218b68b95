"""Text rules the summaries, tool answers and records share. Cutting to a width: keep the
start, end with "…" when anything was cut, never pass ``width`` characters. ``MARKUP_TAG``: the
tags a harness wraps output in (``<output>``, ``</returncode>``), which are not content."""

from __future__ import annotations

import re

MARKUP_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")  # <output>, </returncode>: a harness's wrapping


def clip(text: str, width: int) -> str:
    """``text`` if it fits ``width`` characters, else its first ``width - 1`` and "…"."""
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str, width: int) -> str:
    """``text`` with every run of whitespace (newlines included) made one space, clipped."""
    return clip(" ".join(text.split()), width)
