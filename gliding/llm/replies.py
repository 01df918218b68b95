"""The replies-file format of scripted models: per role, one reply (a tool call or ``text``)
per turn, and an optional ``latency_s`` (docs/config.md, "Scripted replies").

``load_replies`` reads and checks a file, ``replies_from_data`` the same data already parsed
(a dict written in a test), ``load_latency`` the file's ``latency_s``. Used by the scripted
model (``gliding/llm/scripted.py``) and the fake provider (``gliding/testing``), which may not
import a model backend. A malformed file is a RepliesFileError (exit 2) naming its line.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from gliding.config.roles import role_list, role_names
from gliding.config.yamlsource import LineMap, load_yaml_with_lines, read_yaml_text
from gliding.core.messages import Message, ToolCall
from gliding.errors import UsageError

_HINT = "see docs/config.md, section 'Scripted replies'"


class RepliesFileError(UsageError):
    """A replies file that cannot be used."""


def load_latency(path: Path) -> float:
    """The file's ``latency_s`` (0 when absent); the file must have passed ``load_replies``.

    Raises:
        RepliesFileError: it is not a number >= 0.
    """
    data, lines = load_yaml_with_lines(read_yaml_text(path, what="replies file",
                                                      error=RepliesFileError), str(path),
                                       error=RepliesFileError)
    value = data.get("latency_s", 0) if isinstance(data, dict) else 0
    if (isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            or not math.isfinite(value)):
        raise RepliesFileError(f"{path}:{lines.get(('latency_s',), 1)}: latency_s must be a "
                               "number of seconds >= 0", hint=_HINT)
    return float(value)


def load_replies(path: Path) -> dict[str, list[Message]]:
    """Read and check a replies file.

    Raises:
        RepliesFileError: missing, not YAML, or a role or reply of the wrong shape; the
            message names the file and the line.
    """
    source = str(path)
    text = read_yaml_text(path, what="replies file", error=RepliesFileError)
    data, lines = load_yaml_with_lines(text, source, error=RepliesFileError)
    return replies_from_data(data, source, lines)


def replies_from_data(data: Any, source: str = "replies",
                      lines: LineMap | None = None) -> dict[str, list[Message]]:
    """The replies of a replies file already read (``data``: the YAML's value), e.g. a dict
    written in a test; ``lines`` maps key paths to line numbers for the messages.

    Raises:
        RepliesFileError: a role or reply of the wrong shape.
    """
    lines = lines or {}
    roles = role_names()
    if not isinstance(data, dict) or not any(key in roles for key in data):
        # nothing of it is quoted: a daemon or MCP client may name any file the server can
        # read (scripted:/etc/shadow), and its first line must not come back in the error
        raise RepliesFileError(f"{source}:{lines.get((), 1)}: not a replies file: a replies "
                               f"file maps roles ({role_list()}) to lists of replies",
                               hint=_HINT)
    ids = itertools.count(1)
    out: dict[str, list[Message]] = {}
    for role, replies in data.items():
        if role == "latency_s":
            continue
        at = f"{source}:{lines.get((role,), 1)}"
        if role not in roles:
            raise RepliesFileError(f"{at}: unknown role {role!r} (roles: {role_list()})",
                                   hint=_HINT)
        if not isinstance(replies, list):
            raise RepliesFileError(f"{at}: {role}: expected a list of replies", hint=_HINT)
        out[role] = []
        for i, reply in enumerate(replies):
            where = f"{source}:{lines.get((role, i), lines.get((role,), 1))}"
            out[role].append(_reply(reply, f"{where}: {role} reply {i + 1}", next(ids)))
    return out


def _reply(value: Any, where: str, n: int) -> Message:
    if not isinstance(value, dict) or len(value) != 1:
        raise RepliesFileError(f"{where}: a reply is one mapping, {{tool: {{arguments}}}} or "
                               "{text: ...}", hint=_HINT)
    (name, arguments), = value.items()
    if name == "text":
        return Message("assistant", str(arguments))
    if arguments is None:
        arguments = {}
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        raise RepliesFileError(f"{where}: the arguments of {name!r} must be a mapping",
                               hint=_HINT)
    problem = _not_json(arguments)
    if problem:
        raise RepliesFileError(f"{where}: the arguments of {name!r} {problem}", hint=_HINT)
    return Message("assistant", "", (ToolCall(f"r{n}", name, dict(arguments)),))


def _not_json(value: Any) -> str:
    """What keeps ``value`` from being JSON a model could send ("" when nothing does)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"have a key that is not text: {key!r}"
            if problem := _not_json(item):
                return problem
        return ""
    if isinstance(value, list):
        return next((p for p in map(_not_json, value) if p), "")
    if isinstance(value, float) and not math.isfinite(value):
        return f"hold {value!r}, which JSON cannot carry"
    if value is None or isinstance(value, str | int | float | bool):
        return ""
    return (f"hold a {type(value).__name__} ({value!r}); quote it to make it text"
            [:200])
