"""The one interface for every model call, and how a model string picks a backend.

``complete`` takes an :class:`LLMRequest` and returns a :class:`Completion` whose usage the caller
writes into the job's ledger. Backends: ``local`` / ``local:<path.gguf>`` (llama.cpp, in process),
``scripted`` (tests), anything else goes to litellm (``openai/gpt-4o-mini``, ``anthropic/...``,
``ollama/...``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gliding.core.messages import Completion, Message, ToolSpec


@dataclass(frozen=True)
class LLMRequest:
    """Everything one call needs. ``tool_choice`` is "auto", "required" or a tool name."""

    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    tool_choice: str = "auto"
    max_tokens: int | None = None
    temperature: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # role, turn: for scripted models and logs


class LLM(Protocol):
    """A chat model.

    Raises:
        LLMError: the backend failed (network, timeout, missing model file, unparseable reply).
    """

    @property
    def name(self) -> str: ...

    async def complete(self, request: LLMRequest) -> Completion: ...


def backend_kind(model: str) -> str:
    """Which backend a model string selects: "local", "scripted" or "litellm"."""
    if model == "local" or model.startswith("local:"):
        return "local"
    if model == "scripted" or model.startswith("scripted:"):
        return "scripted"
    return "litellm"
