"""Findings in one tool result: the lines worth remembering as facts, each with the lines of the
output it reads back from.

Pure and deterministic, no model: ``findings(tool, output)`` reads text and returns ``Finding``
values. A finding is a line that states something a later step may need verbatim — it holds
an *anchor* (an identifier: a token with a digit and a letter, such as ``HAT028``, ``3FRNFB``,
``v1.2.3``, ``#W0000157``; or a number of two or more digits) and at least ``MIN_WORDS`` words
that say what the anchor is (``price``, ``flight_number``, ``passed``). What is not a finding:
code (a line that opens or closes a block, a statement keyword, an import, a call or an
assignment of one), a diff's headers, separators, markup, comments, questions, progress
meters, lines of mostly punctuation, a bare list of numbers, and the same text seen before in
the result.

    JSON output          one finding per record, rendered as ``core.records.json_records``
                         renders it (``key=value, ...``; ids first), read back from the lines
                         the JSON spans
    any other output     one finding per line, with its display line number (``  12\\t``,
                         ``12:``) taken off, whitespace collapsed, cut to ``FACT_CHARS``

A result with more candidates than ``MAX_FINDINGS`` keeps those with the most anchors and a
``key: value`` shape (ties: the earlier line), in the order of the output. Only the first
``SCAN_CHARS`` of an output are read and lines are cut before any pattern sees them, so no
input is slow; nothing here raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gliding.core.records import parse_json_output, result_lines
from gliding.core.text import one_line

SCAN_CHARS = 256 * 1024
MAX_LINE_CHARS = 2000  # a line is cut to this before any pattern reads it
FACT_CHARS = 300
MIN_CHARS = 12
MIN_WORDS = 2
MAX_FINDINGS = 32

_PREFIX = re.compile(r"^\s*\d{1,7}(?:[\t→|]|:(?!\d)|\s{2,})\s?")  # cat -n, grep -n, editors
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_TOKEN = re.compile(r"[A-Za-z0-9_.#/-]+")
_NUMBER = re.compile(r"^[#$€£-]?\d[\d,]*(?:\.\d+)?%?$")
_KEY_VALUE = re.compile(r"^[\"']?[A-Za-z][\w .-]{0,40}[\"']?\s*[:=]\s*\S")
_CODE_START = re.compile(
    r"^(?:def|class|import|from|return|if|elif|else|for|while|try|except|finally|with|async|"
    r"await|function|const|let|var|public|private|protected|static|fn|func|package|using|"
    r"#include|@\w+|raise|throw|yield|assert|lambda|switch|case|break|continue)\b")
_CODE_END = ("{", "}", "(", "[", ";", ":", ",", "\\", "=>", "->", "&&", "||")
_DIFF = re.compile(r"^(?:[-+]{3}\s|@@\s|diff --git|index [0-9a-f]+\.\.|(?:new|deleted) file mode"
                   r"|similarity index|rename (?:from|to) )")
_DIFF_LINE = re.compile(r"^[-+] ")  # a diff's added or removed line: judged by what follows
_CALL = re.compile(r"[A-Za-z_][\w.]*\(")  # name( : a call or a definition
_PROGRESS = re.compile(r"\b\d{1,3}% \(\d+/\d+\)|\[\s*\d{1,3}%\]")  # meters
_GREP = re.compile(r"^[^\s:]{1,300}?[:-]\d{1,7}[:-]\s?")  # grep -n: path:12: or path-12-
_SYMBOLS = frozenset("()[]{}<>=;\"'`\\|&*")


@dataclass(frozen=True)
class Finding:
    """One line worth remembering and where it is: lines ``line_start``..``line_end`` (1-based,
    inclusive) of the output, as ``str.splitlines`` counts them."""

    text: str
    line_start: int
    line_end: int


def findings(tool: str, output: str) -> list[Finding]:
    """The findings of one tool's ``output`` (``tool`` is its name; a note is not read here)."""
    if not output or not output.strip():
        return []
    text = output[:SCAN_CHARS]
    parsed = parse_json_output(text) if len(output) <= SCAN_CHARS else None
    lines = result_lines(text, parsed, _PREFIX, MAX_LINE_CHARS)
    if parsed is None:
        return _keep(_line_findings(lines))
    return _keep(_json_findings(lines, len(text.splitlines())))


def anchors(text: str) -> list[str]:
    """The identifiers and numbers ``text`` holds, in order (what makes a line a finding)."""
    out = []
    for token in _TOKEN.findall(text):
        token = token.strip(".,/-")
        if len(token) < 2:
            continue
        digits = sum(c.isdigit() for c in token)
        if _NUMBER.match(token):
            if digits >= 2:
                out.append(token)
        elif digits and any(c.isalpha() for c in token) and len(token) >= 4:
            out.append(token)
    return out


def is_finding(line: str) -> bool:
    """Whether one (prefix-free, collapsed) line states something with an anchor; a grep hit
    (``path:12: text``) is judged by its text."""
    line = _DIFF_LINE.sub("", _GREP.sub("", line, count=1), count=1)
    if len(line) < MIN_CHARS or _DIFF.match(line) or _CODE_START.match(line):
        return False
    if line.endswith((*_CODE_END, "?")) or line.startswith(
            ("}", ")", "]", "//", "/*", "*", "<", "# ")):
        return False  # code, markup, comments, questions
    if (line.startswith("(") and line.endswith(")")) or _PROGRESS.search(line):
        return False  # an aside of a viewer, a progress meter
    if _CALL.search(line) and (" = " in line or line.endswith(")")):
        return False  # a call or an assignment: code
    letters = sum(c.isalpha() for c in line)
    if letters < len(line) * 0.35 or sum(c in _SYMBOLS for c in line) > len(line) * 0.12:
        return False  # separators, tables of numbers, hashes, base64; code
    words = [w for w in _WORD.findall(line) if not any(c.isdigit() for c in w)]
    return (len(line.split()) >= 3 and len(words) >= MIN_WORDS  # not a lone path or token
            and bool(anchors(line)))


def _line_findings(lines: Iterable[tuple[int, str]]) -> list[tuple[int, Finding]]:
    out: list[tuple[int, Finding]] = []
    for n, raw in lines:
        line = one_line(raw, FACT_CHARS)
        if is_finding(line):
            out.append((_weight(line), Finding(line, n, n)))
    return out


def _json_findings(records: Iterable[tuple[int, str]],
                   line_count: int) -> list[tuple[int, Finding]]:
    """One finding per record, read back from the line the JSON starts on to the output's
    last (``line_count``)."""
    out: list[tuple[int, Finding]] = []
    for first, record in records:
        line = one_line(record, FACT_CHARS)
        if len(line) >= MIN_CHARS and anchors(line) and _WORD.search(line):
            out.append((_weight(line), Finding(line, first, max(line_count, first))))
    return out


def _weight(line: str) -> int:
    """What ranks a finding when a result has too many: its anchors, two more for a
    ``key: value`` line."""
    return min(len(anchors(line)), 6) + (2 if _KEY_VALUE.match(line) else 0)


def _keep(found: list[tuple[int, Finding]]) -> list[Finding]:
    seen: set[str] = set()
    unique: list[tuple[int, int, Finding]] = []
    for order, (weight, finding) in enumerate(found):
        if finding.text not in seen:
            seen.add(finding.text)
            unique.append((weight, order, finding))
    if len(unique) > MAX_FINDINGS:
        unique = sorted(sorted(unique, key=lambda u: (-u[0], u[1]))[:MAX_FINDINGS],
                        key=lambda u: u[1])
    return [finding for _, _, finding in unique]
