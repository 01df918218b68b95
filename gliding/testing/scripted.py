"""ScriptedLLM: a model whose replies are written in advance, per role or as one list.

    llm = ScriptedLLM({
        "DA": [call("write_file", path="hello.txt", content="Hello"), call("finish", summary="ok")],
    })

A reply is a Message or a function of the LLMRequest returning one (to react to what the agent
sent, e.g. to echo back a check's expected value). Token usage is counted deterministically
(4 characters a token) so budgets and ledgers can be tested.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio

from gliding.core.messages import Completion, Message, ToolCall, Usage
from gliding.errors import LLMError
from gliding.llm.port import LLMRequest

Reply = Message | Callable[[LLMRequest], Message]

_ids = itertools.count()


def call(name: str, /, **arguments: Any) -> Message:
    """An assistant message asking for one tool call (an argument may be called ``name``, as
    ``call_tool``'s is)."""
    return Message("assistant", "", (ToolCall(f"s{next(_ids)}", name, dict(arguments)),))


def text(content: str) -> Message:
    """An assistant message with plain text and no tool call."""
    return Message("assistant", content)


class ScriptedLLM:
    """Replies from a script; raises LLMError when a role's script runs out."""

    def __init__(
        self,
        script: Mapping[str, Sequence[Reply]] | Sequence[Reply],
        *,
        name: str = "scripted",
        cost_per_call: float | None = 0.0,  # None: a model without a price (cost unknown)
        delay_s: float = 0.0,
    ) -> None:
        if isinstance(script, Mapping):
            self._queues = {role: list(replies) for role, replies in script.items()}
        else:
            self._queues = {"*": list(script)}
        self._name = name
        self._cost = cost_per_call
        self._delay = delay_s  # each reply waits this long first, like a hosted model's latency
        self.requests: list[LLMRequest] = []

    @property
    def name(self) -> str:
        return self._name

    async def complete(self, request: LLMRequest) -> Completion:
        self.requests.append(request)
        if self._delay:
            await anyio.sleep(self._delay)
        role = str(request.meta.get("role", "*"))
        queue = self._queues.get(role, self._queues.get("*"))
        if not queue:
            raise LLMError(f"scripted model has no reply left for role {role}")
        reply = queue.pop(0)
        message = reply(request) if callable(reply) else reply
        prompt_chars = sum(len(m.content) for m in request.messages)
        prompt_chars += sum(len(t.description) + 20 for t in request.tools)
        out_chars = len(message.content) + sum(len(c.arguments_json()) for c in message.tool_calls)
        usage = Usage(
            prompt_tokens=max(1, prompt_chars // 4),
            completion_tokens=max(1, out_chars // 4),
            cost_usd=self._cost or 0.0,
            unpriced_calls=1 if self._cost is None else 0,
        )
        return Completion(message=message, usage=usage, latency_s=0.0, model=self._name)

    def remaining(self, role: str = "*") -> int:
        return len(self._queues.get(role, []))
