"""The one interface for every model call, and how a model string picks a backend.

``complete`` takes an :class:`LLMRequest` and returns a :class:`Completion` whose usage the caller
writes into the job's ledger. Backends: ``local`` / ``local:<path.gguf>`` (llama.cpp, in process),
``scripted`` (tests), anything else goes to litellm (``openai/gpt-4o-mini``, ``anthropic/...``,
``ollama/...``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
    # the tools the model may call this turn, for a backend that constrains its reply (the
    # local model's grammar); None: ``tools``. A hosted request carries only ``tools``, whose
    # bytes stay the same for a whole session (agents/offer.py)
    callable_tools: Sequence[ToolSpec] | None = None
    time_left_s: float | None = None  # what the job's wall time budget leaves; None: no budget
    # told of each retry and fallback (llm/resilient.py); the agent loop makes them job events
    notify: Callable[[ProviderNotice], Awaitable[None]] | None = field(
        default=None, compare=False, repr=False)
    # told of each piece of the reply as it streams in (a hosted model with llm.stream on;
    # other backends answer whole and tell nothing); the agent loop makes them job events.
    # What a call told before it failed is void: the caller hears of the retry (``notify``)
    # or gets the error, and the Completion holds what the call that answered said
    on_delta: Callable[[Delta], Awaitable[None]] | None = field(
        default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Delta:
    """A piece of a reply as it streams in: text of its content (``tool`` None), or of the
    JSON arguments of a tool call to ``tool``."""

    text: str
    tool: str | None = None


@dataclass(frozen=True)
class ProviderNotice:
    """A model call about to be tried again (``retry``) or handed to the next model
    (``fallback``), as ``gliding.llm.resilient`` tells the caller."""

    kind: Literal["retry", "fallback"]
    model: str  # the model whose call failed
    fault: str  # what happened, e.g. "429 rate limited"
    retry: int = 0  # retry: the retry about to be made (1 = the second call)
    retries: int = 0  # retry: retries at most (llm.retry.max_attempts - 1)
    delay_s: float = 0.0  # retry: the wait before it
    next_model: str = ""  # fallback: the model tried next


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


def free_backend(model: str) -> str | None:
    """``local`` or ``scripted`` when ``model`` runs on a backend whose calls cost nothing by
    nature (a known $0, not an unknown cost); None for a hosted model."""
    kind = backend_kind(model)
    return None if kind == "litellm" else kind
