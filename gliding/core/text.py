"""Cutting text to a width: the one rule the summaries, tool answers and records share — keep
the start, end with "…" when anything was cut, never pass ``width`` characters."""

from __future__ import annotations


def clip(text: str, width: int) -> str:
    """``text`` if it fits ``width`` characters, else its first ``width - 1`` and "…"."""
    return text if len(text) <= width else text[: width - 1] + "…"


def one_line(text: str, width: int) -> str:
    """``text`` with every run of whitespace (newlines included) made one space, clipped."""
    return clip(" ".join(text.split()), width)
