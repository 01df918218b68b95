"""Chat values every layer speaks: messages, tool calls, tool schemas, usage and completions."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gliding.core.prices import CostTotal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; ``arguments`` is already decoded JSON."""

    id: str
    name: str
    arguments: dict[str, Any]

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class Message:
    """One chat message; ``tool_call_id`` links a tool result to the call it answers."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat wire shape, which litellm and llama.cpp both take."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_json()},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool: name, description and a JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters or {"type": "object", "properties": {}},
            },
        }


@dataclass(frozen=True)
class Usage:
    """Token and cost accounting of one model call, or the sum of several.

    ``cost_usd`` sums the calls whose cost is known; ``unpriced_calls`` counts those whose cost
    nobody knows (a hosted model without a price), which add nothing to ``cost_usd``. So the
    true cost is ``cost_usd`` when ``unpriced_calls`` is 0, and at least that otherwise.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    @property
    def cost(self) -> CostTotal:
        return CostTotal(self.cost_usd, self.unpriced_calls)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost_usd + other.cost_usd,
            self.unpriced_calls + other.unpriced_calls,
        )


@dataclass(frozen=True)
class Completion:
    """A model's answer: the assistant message, its usage, latency and the model that gave it."""

    message: Message
    usage: Usage
    latency_s: float
    model: str
    summary: str | None = None
    raw: str = ""
