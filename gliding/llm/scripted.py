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
(exit 2) naming its line; the format is read by ``gliding/llm/replies.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import anyio

from gliding.core.messages import Completion, Message, Usage
from gliding.errors import LLMError
from gliding.llm.port import LLMRequest
from gliding.llm.replies import (  # the file format; re-exported for callers of this module
    RepliesFileError,
    load_latency,
    load_replies,
    replies_from_data,
)

__all__ = ["FileScriptedLLM", "RepliesFileError", "load_latency", "load_replies",
           "replies_from_data"]


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
