"""Identifiers: the tokens of a text that a later step tends to need verbatim — paths, dotted
and snake_case names, numbers of three or more digits. One definition for the router, the L1
lines, the prefetch index and the benchmarks' fact recall."""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"[A-Za-z0-9_./-]*[/_.][A-Za-z0-9_./-]*[A-Za-z0-9]|\b\d{3,}\b")
_RUN = re.compile(r"[A-Za-z0-9_./-]+")
MAX_RUN = 300  # longer runs (hashes, base64) are not identifiers a later step types


def identifiers(text: str) -> list[str]:
    """Identifiers of at least 4 characters, in order of first appearance, without repeats.

    ``IDENTIFIER`` is applied run by run (maximal stretches of identifier characters, at most
    ``MAX_RUN`` long): on one long unbroken run the pattern would backtrack quadratically."""
    found: dict[str, None] = {}
    for run in _RUN.findall(text):
        if len(run) > MAX_RUN:
            continue
        for m in IDENTIFIER.findall(run):
            if len(m) >= 4:
                found.setdefault(m)
    return list(found)
