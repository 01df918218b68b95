"""A model whose replies are a file: ``--model scripted:replies.yaml``.

Replays a job deterministically without an LLM, e.g. to test a task file and its checks. The
file maps each role to its replies, one per turn, in order; a reply is one tool call (the tool
name and its arguments) or ``text`` (a plain answer)::

    # replies.yaml
    PA:
      - finish: {steps: ["write the greeting"]}
    DA:
      - write_file: {path: hello.txt, content: "Hello, World!"}
      - finish: {summary: wrote hello.txt}
    CA:
      - run_checks: {}
      - finish: {notes: all pass}
    AA:
      - finish: {decision: done, report: hello.txt holds the greeting}

Turn *n* of a role (counted over the whole job, corrections and cycles included) gets that
role's *n*-th reply, so a resumed job gets the same replies again. An optional top-level
``latency_s: 0.5`` makes every reply wait that long first, like a hosted model. A role with
no reply left fails with a model error naming the file and the turn. Usage is counted
deterministically (4 characters a token), at no cost. A malformed file is a UsageError
(exit 2) naming its line.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

from gliding.config.yamlsource import load_yaml_with_lines, read_yaml_text
from gliding.core.messages import Completion, Message, ToolCall, Usage
from gliding.errors import LLMError, UsageError
from gliding.llm.port import LLMRequest

ROLES = ("PA", "DA", "CA", "AA")
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
    if not isinstance(data, dict) or not data:
        raise RepliesFileError(f"{source}:{lines.get((), 1)}: a replies file maps roles "
                               f"({', '.join(ROLES)}) to lists of replies", hint=_HINT)
    ids = itertools.count(1)
    out: dict[str, list[Message]] = {}
    for role, replies in data.items():
        if role == "latency_s":
            continue
        at = f"{source}:{lines.get((role,), 1)}"
        if role not in ROLES:
            raise RepliesFileError(f"{at}: unknown role {role!r} (roles: {', '.join(ROLES)})",
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


class FileScriptedLLM:
    """Replies from a replies file, by role and turn number."""

    def __init__(self, path: Path, replies: Mapping[str, list[Message]] | None = None) -> None:
        self.path = Path(path).resolve()
        self.replies = dict(replies) if replies is not None else load_replies(self.path)
        self.latency_s = load_latency(self.path) if replies is None else 0.0

    @property
    def name(self) -> str:
        return f"scripted:{self.path}"

    async def complete(self, request: LLMRequest) -> Completion:
        role = str(request.meta.get("role", ""))
        turn = int(request.meta.get("turn", 0))
        mine = self.replies.get(role, [])
        if not 1 <= turn <= len(mine):
            raise LLMError(f"{self.path}: no reply for {role} turn {turn} "
                           f"(the file has {len(mine)} for {role})",
                           hint="add replies for that role, one per turn")
        message = mine[turn - 1]
        if self.latency_s:
            await anyio.sleep(self.latency_s)
        prompt_chars = sum(len(m.content) for m in request.messages)
        prompt_chars += sum(len(t.description) + 20 for t in request.tools)
        out_chars = len(message.content) + sum(len(c.arguments_json()) for c in message.tool_calls)
        usage = Usage(prompt_tokens=max(1, prompt_chars // 4),
                      completion_tokens=max(1, out_chars // 4))
        return Completion(message=message, usage=usage, latency_s=0.0, model=self.name)
