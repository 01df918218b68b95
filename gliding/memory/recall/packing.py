"""Memory items and how they are packed into a prompt within a token budget.

A ``MemoryItem`` is one remembered utterance or record; ``format_line`` renders it as
``[D3:7] Melanie (8 May 2023): text``. ``pack`` keeps the best lines that fit a budget and puts
them back in conversation order; ``pack_grouped`` does the same with each session's date written
once, as a header over its lines. The budget is a hard bound: the joined text is counted with the
real counter. Everything here is pure; ``recall.py`` ranks, this module packs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date

Count = Callable[[str], int]


@dataclass(frozen=True)
class MemoryItem:
    """One remembered utterance; ``importance`` None means "estimate it from the text"."""

    id: str
    text: str
    session: int
    date: date | None = None
    speaker: str = ""
    position: int = 0
    importance: float | None = None
    label: str = ""  # what the packed line shows in brackets; "" shows the id
    source: str = ""  # where it was read (a fact's tool and argument): shown and indexed
    # like a speaker's name, but not a speaker


@dataclass(frozen=True)
class Packed:
    """A packed context: the text, the ids it holds (conversation order) and its token count."""

    text: str
    ids: tuple[str, ...]
    tokens: int


def format_date(day: date | None) -> str:
    return f"{day.day} {day.strftime('%B')} {day.year}" if day else ""


def format_line(item: MemoryItem, *, dated: bool = True) -> str:
    """``[D3:7] Melanie (8 May 2023): text`` — speaker and date only when known (``dated``
    False leaves the date to a group header, see ``pack_grouped``)."""
    head = f"[{item.label or item.id}]"
    if item.speaker or item.source:
        head += f" {item.speaker or item.source}"
    if item.date and dated:
        head += f" ({format_date(item.date)})"
    return f"{head}: {' '.join(item.text.split())}"


def group_header(item: MemoryItem) -> str:
    """The line that opens a run of one session's items in a packed context: its date."""
    return f"({format_date(item.date)})" if item.date else ""


def pack(candidates: Iterable[tuple[str, str]], budget: int, count: Count,
         *, order: Mapping[str, int] | None = None) -> Packed:
    """Greedily keep (id, line) candidates, best first, while the joined lines fit ``budget``.

    A line that does not fit is skipped and the next one tried. Per-line counts (+1 for the
    newline) guide the choice; the joined text is then counted for real and the last-chosen
    lines dropped until it fits, so ``count(result.text) <= budget`` always holds. With
    ``order`` (id → rank) the kept lines are emitted in that order, else in choice order.
    """
    chosen: list[tuple[str, str]] = []
    used = 0
    if budget > 0:
        for item_id, line in candidates:
            cost = count(line) + 1
            if used + cost > budget:
                continue
            chosen.append((item_id, line))
            used += cost
    if order is not None:
        chosen.sort(key=lambda pair: order.get(pair[0], len(order)))
    text = "\n".join(line for _, line in chosen)
    tokens = count(text) if chosen else 0
    while tokens > budget and chosen:
        chosen.pop()
        text = "\n".join(line for _, line in chosen)
        tokens = count(text) if chosen else 0
    return Packed(text=text, ids=tuple(item_id for item_id, _ in chosen), tokens=tokens)


def pack_grouped(candidates: Iterable[tuple[str, str, tuple[int, int], str]], budget: int,
                 count: Count) -> Packed:
    """Like ``pack``, for (id, line, (group, position), header) candidates best first: kept
    lines come out in (group, position) order — groups without a header first — each group's
    lines under its header (when it has one), so a date is written once per session instead
    of once per line. A header's tokens are charged when its group's first line is kept;
    ``count(result.text) <= budget`` always holds."""
    chosen: list[tuple[str, str, tuple[int, int], str]] = []
    opened: set[int] = set()
    used = 0
    if budget > 0:
        for candidate in candidates:
            _item_id, line, (group, _), header = candidate
            cost = count(line) + 1
            if header and group not in opened:
                cost += count(header) + 1
            if used + cost > budget:
                continue
            chosen.append(candidate)
            opened.add(group)
            used += cost

    def render(kept: list[tuple[str, str, tuple[int, int], str]]) -> str:
        lines: list[str] = []
        current: int | None = None
        for _item_id, line, (group, _), header in sorted(kept, key=_undated_first):
            if group != current and header:
                lines.append(header)
            current = group
            lines.append(line)
        return "\n".join(lines)

    text = render(chosen)
    tokens = count(text) if chosen else 0
    while tokens > budget and chosen:
        chosen.pop()
        text = render(chosen)
        tokens = count(text) if chosen else 0
    ordered = sorted(chosen, key=_undated_first)
    return Packed(text=text, ids=tuple(c[0] for c in ordered), tokens=tokens)


def _undated_first(candidate: tuple[str, str, tuple[int, int], str]) -> tuple[bool, int, int]:
    """Groups without a header come first, so no undated line sits under another's date."""
    _item_id, _line, (group, position), header = candidate
    return (bool(header), group, position)
