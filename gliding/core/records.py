"""Tool output as lines: one line per JSON record, the rule the context engine's previews, the
blackboard's facts, recall and the benchmarks share.

``parse_json_output`` tells whether an output is JSON (or JSON under one heading line of its
own); ``json_records`` renders it as one line per object with scalar fields, ``key=value``
joined by ", ", nested objects' scalars as dotted keys, identifier-like keys (``order_id``,
``orderId``) first, so an id or a number stays on the line of the record it belongs to.
``result_lines`` numbers the lines of any result as ``read_result`` reads them back: JSON's
records, else the physical lines. Pure functions; a hostile key (newlines, huge) cannot make
extra lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from gliding.core.text import clip


def parse_json_output(output: str) -> tuple[str, Any] | None:
    """``("", data)`` when the output is JSON; ``(first line, data)`` when the rest of it is (a
    tool that heads what it read with a line of its own); None otherwise."""
    stripped = output.lstrip()
    head = ""
    if stripped[:1] not in ("[", "{"):
        first, _, rest = stripped.partition("\n")
        if len(first) > 300 or rest.lstrip()[:1] not in ("[", "{"):
            return None
        head, stripped = first, rest
    try:
        return head, json.loads(stripped)
    except (ValueError, RecursionError):
        return None


MAX_RECORDS = 2000  # records a JSON summary considers
# keys that hold identifiers: snake_case (``order_id``) or camelCase (``orderId``) endings
_ID_KEY = re.compile(r"(?i:(^|_)(id|ids|key|number|code|name|email|path|url|status))$"
                     r"|[a-z0-9](Id|Ids|ID|Key|Number|Code|Name|Email|Path|Url|URL|Status)$")


def json_records(data: Any, path: str, depth: int) -> Iterator[str]:
    """One line per object that has scalar fields: ``path: key=value, …`` with nested objects'
    scalars as dotted keys; lists of scalars inline; deeper objects and lists as their own
    records. At most ``MAX_RECORDS``."""
    count = 0
    stack: list[tuple[Any, str, int]] = [(data, path, depth)]
    while stack and count < MAX_RECORDS:
        value, where, level = stack.pop()
        if isinstance(value, list):
            if value and all(not isinstance(x, (dict, list)) for x in value):
                yield f"{where or '.'}: {_inline(value)}"
                count += 1
                continue
            stack.extend((x, f"{where}[{i}]", level + 1)
                         for i, x in reversed(list(enumerate(value))))
            continue
        if not isinstance(value, dict):
            yield f"{where or '.'}: {_scalar(value)}"
            count += 1
            continue
        fields: list[tuple[str, Any]] = []
        later: list[tuple[Any, str, int]] = []
        for raw, item in value.items():
            key = " ".join(str(raw).split())  # a key's newlines must not make preview lines
            if isinstance(item, dict) and item and level < 6 and all(
                    not isinstance(x, (dict, list)) for x in item.values()):
                fields += [(f"{key}.{' '.join(str(k).split())}", v) for k, v in item.items()]
            elif isinstance(item, (dict, list)) and item and not (
                    isinstance(item, list) and all(not isinstance(x, (dict, list))
                                                   for x in item)):
                later.append((item, f"{where}.{key}" if where else str(key), level + 1))
            else:
                fields.append((str(key), item))
        if fields:
            fields.sort(key=lambda kv: not _ID_KEY.search(kv[0].rsplit(".", 1)[-1]))
            text = ", ".join(f"{k}={_inline(v) if isinstance(v, list) else _scalar(v)}"
                             for k, v in fields)
            yield f"{where}: {text}" if where else text
            count += 1
        stack.extend(reversed(later))


def result_lines(output: str, parsed: tuple[str, Any] | None,
                 prefix: re.Pattern[str] | None = None,
                 cut: int | None = None) -> Iterator[tuple[int, str]]:
    """The lines of a tool result as (number, text), numbered as ``read_result`` reads them back
    (``line_start``, an IRI's ``#L12``): with ``parsed`` (``parse_json_output(output)``, or None
    to read the output as text) one line per JSON record, every one numbered by the line the
    JSON starts on (2 under a heading line, else 1); else the physical lines of ``output``
    (``str.splitlines``) from 1, each with ``prefix`` (a display line number such as ``  12\\t``)
    taken off. Each line is cut to ``cut`` characters first, so no pattern reads a long one;
    blank lines stay, and whitespace is left for the caller to strip or collapse."""
    if parsed is not None:
        start = 2 if parsed[0] else 1
        for record in json_records(parsed[1], "", 0):
            yield start, record[:cut]
        return
    for number, line in enumerate(output.splitlines(), 1):
        line = line[:cut]
        yield number, prefix.sub("", line, count=1) if prefix is not None else line


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return clip(" ".join(value.split()), 80)
    return json.dumps(value)


def _inline(values: list[Any]) -> str:
    return "[" + ", ".join(_scalar(x) for x in values[:20]) + (", …" if len(values) > 20
                                                              else "") + "]"
