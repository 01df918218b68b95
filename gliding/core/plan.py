"""Plan steps with dependencies, made well formed: what PA's ``finish(steps=...)`` gave, as a
list of steps with unique ids whose dependencies name existing steps and never form a cycle.

A step as given is either a plain string or an object ``{"id": "s1", "text": "...",
"dependsOn": ["s0"]}`` (``depends_on`` is read too, and a single id for a list of one). The
rules, applied in this order, are deterministic (the same input always gives the same plan):

1. **Texts.** Whitespace runs become one space, at most ``MAX_TEXT`` characters. An item
   without text is dropped (an object without one with a note); past ``MAX_STEPS`` items the
   rest are dropped with a note.
2. **Plain strings are sequential**: a string depends on the item kept just before it (what
   one DA working through the plan does anyway). An object depends only on what it names.
3. **Duplicates merge** into the first: an item whose id was given before, or whose text is
   that of an earlier item (case counts: ``a.txt`` and ``A.txt`` are two files). The first
   keeps its text and id and gets the dependencies the repeat names (a repeated string adds
   none, and the string after it follows the step before the repeat); a dependency on the
   repeat means the first.
4. **Ids.** A given id is cleaned to letters, digits, ``_`` and ``-`` (other runs become
   ``_``, at most 32 characters); a step without one gets the smallest number, from its place
   in the plan (1, 2, ...), that no other step uses, so a plan of plain strings has the ids
   ``1``, ``2``, ``3``.
5. **Dependencies** name a step by its id or, when no id matches, by its place in the list as
   given (``1`` for the first item). An unknown one, or one on the step itself, is dropped
   with a note.
6. **Cycles are broken** by taking the dependencies in plan order (each step's in the order
   given) and dropping, with a note, every one that would close a cycle with those taken
   before it: the earlier a dependency is listed, the more it counts.

Normalising a normalised plan changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

MAX_STEPS = 32
MAX_TEXT = 500
MAX_ID = 32
STEP_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]+")

Step = tuple[str, str, tuple[str, ...]]  # (id, text, ids of the steps it depends on)


def clean_id(value: object) -> str | None:
    """``value`` as a step id (letters, digits, ``_``, ``-``), or None when nothing is left."""
    if value is None or isinstance(value, bool):
        return None
    text = _NOT_ID.sub("_", str(value)).strip("_")[:MAX_ID].strip("_")
    return text or None


def normalize_steps(raw: object) -> tuple[list[Step], list[str]]:
    """The well-formed plan of ``raw`` (a list of strings or step objects, or one of them)
    and a note for everything that had to change (dropped, merged, cut)."""
    items: Sequence[object] = raw if isinstance(raw, list | tuple) else (
        [] if raw is None else [raw])
    notes: list[str] = []
    if len(items) > MAX_STEPS:
        notes.append(f"{len(items) - MAX_STEPS} step(s) past the first {MAX_STEPS} dropped")
        items = items[:MAX_STEPS]
    texts: list[str] = []
    given: list[str | None] = []
    deps: list[list[tuple[str, object]]] = []  # ("index", k) or ("name", value)
    by_id: dict[str, int] = {}
    by_text: dict[str, int] = {}
    at: dict[int, int] = {}  # place as given (1-based) -> index of the step it became
    last: int | None = None
    for place, item in enumerate(items, 1):
        text, gid, named = _read(item)
        if not text:
            if isinstance(item, Mapping):
                notes.append(f"step {place} has no text: dropped")
            continue
        wanted: list[tuple[str, object]] = (
            [("name", d) for d in named] if named is not None
            else ([("index", last)] if last is not None else []))
        k = by_id.get(gid) if gid is not None else None
        if k is None:
            k = by_text.get(text)
        if k is None:
            k = len(texts)
            texts.append(text)
            given.append(gid)
            deps.append([])
            by_text[text] = k
        else:
            notes.append(f"step {place} repeats step {given[k] or k + 1}: merged")
            at[place] = k
            if gid is not None:
                by_id.setdefault(gid, k)
            if named is not None:  # a repeated string brings no order of its own
                deps[k].extend(wanted)
            continue
        if gid is not None:
            by_id.setdefault(gid, k)
        deps[k].extend(wanted)
        at[place] = k
        last = k
    ids = _ids(given)
    out: list[Step] = []
    kept: dict[int, list[int]] = {}
    for k, wanted in enumerate(deps):
        kept[k] = []
        for kind, value in wanted:
            j = value if kind == "index" else _find(value, by_id, at)
            if not isinstance(j, int):
                notes.append(f"step {ids[k]}: unknown dependency {str(value)[:40]!r} dropped")
            elif j == k or j in kept[k]:
                continue
            elif _reaches(kept, j, k):
                notes.append(f"step {ids[k]}: dependency on {ids[j]} dropped "
                             "(it would close a cycle)")
            else:
                kept[k].append(j)
        out.append((ids[k], texts[k], tuple(ids[j] for j in kept[k])))
    return out, notes


def _read(item: object) -> tuple[str, str | None, list[object] | None]:
    """(text, cleaned id, the dependencies it names, or None for a plain string)."""
    if isinstance(item, Mapping):
        raw = item.get("dependsOn", item.get("depends_on"))
        named = [] if raw is None else list(raw) if isinstance(raw, list | tuple) else [raw]
        text = item.get("text")
        return _text(text) if text is not None else "", clean_id(item.get("id")), named
    return ("" if item is None else _text(item)), None, None


def _text(value: object) -> str:
    return " ".join(str(value).split())[:MAX_TEXT].strip()


def _ids(given: list[str | None]) -> list[str]:
    used = {g for g in given if g is not None}
    out: list[str] = []
    for k, gid in enumerate(given):
        if gid is None:
            n = k + 1
            while str(n) in used:
                n += 1
            gid = str(n)
            used.add(gid)
        out.append(gid)
    return out


def _find(value: object, by_id: dict[str, int], at: dict[int, int]) -> int | None:
    """The step a dependency names: by id first, else by its place in the list as given."""
    gid = clean_id(value)
    if gid is not None and gid in by_id:
        return by_id[gid]
    if isinstance(value, int) and not isinstance(value, bool):
        return at.get(value)
    if isinstance(value, str) and value.strip().isdigit():
        return at.get(int(value.strip()))
    return None


def _reaches(kept: dict[int, list[int]], start: int, goal: int) -> bool:
    """Whether ``goal`` is reachable from ``start`` over the dependencies kept so far."""
    seen, todo = set(), [start]
    while todo:
        k = todo.pop()
        if k == goal:
            return True
        if k not in seen:
            seen.add(k)
            todo.extend(kept.get(k, ()))
    return False
