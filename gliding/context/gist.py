"""Extractive L1 lines that keep what a later step needs, with its meaning.

A turn leaves the prompt as one line. For a tool result that line is made of the result's own
most informative lines — those that hold identifiers the agent has used since or that the task
names, definitions, errors — each clipped around what makes it worth keeping, in their original
order: ``exit 1: autodetector.py:824 rem_model_name = rem_model_state.name | KeyError: 'x'``.
An identifier therefore survives inside the line that says what it is. For an assistant turn
the line is its action (the tool call, or the last code block) and the start of its thought.

Pure functions: ``salient`` is a set of identifiers the caller considers in use.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from gliding.core.identifiers import identifiers
from gliding.core.text import MARKUP_TAG

_MARKUP = re.compile(r"^\s*(?:</?[A-Za-z_][\w-]*>\s*)+$|^\s*[-=_*#~`]{3,}\s*$")
_CODE_BLOCK = re.compile(r"```[A-Za-z0-9_+-]*\n(.*?)```", re.S)
_EXIT = re.compile(r"(?:<returncode>|exit(?:ed)? (?:code|status)[: ]*|return code[: ]*)(-?\d+)",
                   re.I)
_DEFINITION = re.compile(r"\b(?:def|class|function|fn|func|struct|enum|trait|interface|type|"
                         r"const|let|var)\s+[A-Za-z_]")
_ERROR = re.compile(r"Traceback|Error\b|Exception|FAIL|panic|fatal|assert|not found|"
                    r"No such file|denied|cannot|undefined|invalid", re.I)
_LEAD = re.compile(r"^\s*(?:THOUGHT|Thought|DISCUSSION|Discussion)\s*:\s*")
SEP = " | "


def gist(text: str, *, salient: Collection[str] = (), width: int = 240,
         line_chars: int = 110) -> str:
    """One line of at most about ``width`` characters made of ``text``'s most useful lines."""
    code = _EXIT.search(text[:400])
    head = f"exit {code.group(1)}: " if code else ""
    line_chars = min(line_chars, max(20, width - len(head)))
    lines = []
    for raw in text.splitlines():
        raw = raw.strip()
        if not raw or _MARKUP.match(raw):
            continue
        bare = MARKUP_TAG.sub("", raw).strip()
        if bare and not (code and bare == code.group(1) and bare != raw):  # <returncode>0</…>
            lines.append(bare)
    if not lines:
        return head + "(no output)"
    scored = []
    for i, line in enumerate(lines[:2000]):
        found = identifiers(line)
        score = sum(3.0 if x in salient else 1.0 for x in found)
        if _DEFINITION.search(line):
            score += 2.0
        if _ERROR.search(line):
            score += 2.5
        if i == 0:
            score += 1.0
        if score > 0:
            scored.append((score / (1.0 + len(line) / 200), i, _clip_around(line, found, salient,
                                                                           line_chars)))
    if not scored:
        scored = [(1.0, 0, _clip(lines[0], line_chars))]
    chosen: list[tuple[int, str]] = []
    used = len(head)
    for _score, i, line in sorted(scored, key=lambda x: (-x[0], x[1])):
        cost = len(line) + len(SEP)
        if used + cost > width and chosen:
            continue
        if not chosen and used + len(line) > width:
            line = _clip(line, max(1, width - used))
        chosen.append((i, line))
        used += cost
        if used >= width:
            break
    return head + SEP.join(line for _i, line in sorted(chosen))


def action_line(content: str, calls: list[str], *, width: int = 200) -> str:
    """An assistant turn: what it did (its calls, else its last code block), then the start of
    what it thought."""
    action = "; ".join(calls)
    thought = content
    if not action:
        blocks = _CODE_BLOCK.findall(content)
        if blocks:
            action = "$ " + " ⏎ ".join(x.strip() for x in blocks[-1].strip().splitlines()[:4])
            thought = _CODE_BLOCK.sub(" ", content)
    words = " ".join(_LEAD.sub("", thought).split())
    sentence = re.split(r"(?<=[.!?])\s", words, maxsplit=1)[0] if words else ""
    if not action:
        return _clip(words, width) if words else "(empty)"
    action = _clip(action, width - 60 if width >= 120 else width)
    room = width - len(action) - 3
    return f"{action} — {_clip(sentence, room)}" if sentence and room > 20 else action


def _clip_around(line: str, found: list[str], salient: Collection[str], limit: int) -> str:
    """``line`` cut to ``limit`` characters, centred on its first salient identifier."""
    if len(line) <= limit:
        return line
    key = next((x for x in found if x in salient), found[0] if found else "")
    at = line.find(key) if key else 0
    start = max(0, min(at - limit // 4, len(line) - limit))
    out = line[start:start + limit]
    return ("…" if start else "") + out + ("…" if start + limit < len(line) else "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"
