"""The agent loop's guards, pure: when a session's calls are a loop, what the model is told
before the loop stops it, and the lines that say why a guard stopped it.

- ``loop_detected``: the session's latest ``limit`` tool calls are the same call, the same tool
  with the same arguments as canonical JSON (``call_key``). Only calls count: a text reply
  between two of them does not break the row. The last call allowed (one short of ``limit``) is
  answered with ``LAST_REPEAT``.
- ``compaction_stalled``: the context engine says when (``ContextEngine.stalled``);
  ``stall_error`` words it.

The loop (``loop.py``) applies them to what replay rebuilds, so a resumed session decides the
same as the killed one did.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gliding.config.settings import WindowSettings
from gliding.core.text import one_line

REPEATED = "\nYou already made this exact call. If your part is done, call finish."
LAST_REPEAT = "The same call once more in a row stops the job."

Call = tuple[str, Mapping[str, Any]]  # a tool's name and its arguments


def call_key(name: str, arguments: Mapping[str, Any]) -> str:
    """What makes two tool calls the same call: the tool and its arguments as canonical JSON."""
    return json.dumps([name, arguments], ensure_ascii=False, sort_keys=True, default=str)


def in_a_row(calls: Sequence[Call], key: str) -> int:
    """How many of the latest ``calls``, newest first, were the call ``key``."""
    count = 0
    for name, arguments in reversed(calls):
        if call_key(name, arguments) != key:
            break
        count += 1
    return count


def warning(row: int, limit: int) -> str:
    """What follows the result of a call that is ``row`` in a row of the same call: the warning
    when one more would stop the job (never for a first call, whatever the limit)."""
    return LAST_REPEAT if 1 < row == limit - 1 else ""


def loop_error(name: str, arguments: Mapping[str, Any], row: int) -> str:
    """Why the session stopped ``loop_detected``, in one line."""
    shown = one_line(json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True), 100)
    return f"loop detected: {name}({shown}) {row} times in a row; the last was not run"


def stall_error(stalls: int, window: WindowSettings, within: int) -> str:
    """Why the session stopped ``compaction_stalled``, in one line."""
    return (f"compaction stalled: {stalls} compactions in a row left the prompt over the "
            f"window's high-water mark ({window.high_water:g} x {window.max_tokens} tokens) "
            f"and the next came within {within} calls")
