"""Hosted and OpenAI-compatible models through litellm, imported lazily with an offline setup.

Before the first import we set ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no cost-map download at
import) and point ``TIKTOKEN_CACHE_DIR`` at the tokenizer files bundled in litellm's wheel, so
token counting works without network. The import costs about 3 s, so it happens on first use.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

from gliding.core.messages import Completion, Message, ToolCall, Usage
from gliding.errors import LLMError
from gliding.llm.port import LLMRequest


def prepare_offline_environment() -> None:
    """Environment litellm must see before it is imported; idempotent."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        spec = importlib.util.find_spec("litellm")
        if spec and spec.submodule_search_locations:
            base = Path(next(iter(spec.submodule_search_locations)))
            tokenizers = base / "litellm_core_utils" / "tokenizers"
            if tokenizers.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(tokenizers)


def _litellm() -> Any:
    prepare_offline_environment()
    try:
        import litellm
    except ImportError as exc:
        raise LLMError("litellm is not installed", hint="run scripts/setup.sh") from exc
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


class HostedLLM:
    """Any provider string litellm understands, e.g. ``openai/gpt-4o-mini``."""

    def __init__(self, model: str, *, timeout_s: float = 120.0) -> None:
        self._model = model
        self._timeout = timeout_s

    @property
    def name(self) -> str:
        return self._model

    async def complete(self, request: LLMRequest) -> Completion:
        litellm = _litellm()
        kwargs: dict[str, Any] = {
            "model": self._model,
            "messages": with_cache_control([m.to_openai() for m in request.messages],
                                           request.meta.get("cache_breakpoints") or (),
                                           self._model),
            "timeout": self._timeout,
            "num_retries": 0,  # timeout_s bounds the whole call; the job's budgets decide retries
        }
        if request.tools:
            kwargs["tools"] = [t.to_openai() for t in request.tools]
            if request.tool_choice in ("auto", "required"):
                kwargs["tool_choice"] = request.tool_choice
            else:
                kwargs["tool_choice"] = {
                    "type": "function",
                    "function": {"name": request.tool_choice},
                }
        if request.max_tokens:
            kwargs["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        started = time.monotonic()
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # litellm maps providers to many exception classes
            raise LLMError(
                f"{self._model}: {type(exc).__name__}: {exc}",
                hint="check the model string and the provider's API key variable",
            ) from exc
        latency = time.monotonic() - started
        return Completion(
            message=_message(response),
            usage=_usage(litellm, response),
            latency_s=latency,
            model=self._model,
        )


ANTHROPIC_MAX_BREAKPOINTS = 4


def is_anthropic(model: str) -> bool:
    name = model.lower()
    return name.startswith(("anthropic/", "claude", "bedrock/anthropic", "vertex_ai/claude"))


def with_cache_control(messages: list[dict[str, Any]], breakpoints: Any,
                      model: str) -> list[dict[str, Any]]:
    """Anthropic models: mark the messages at ``breakpoints`` (at most 4) with
    ``cache_control: ephemeral``; every other provider gets the messages unchanged."""
    if not is_anthropic(model) or not breakpoints:
        return messages
    marks = sorted({int(i) for i in breakpoints if 0 <= int(i) < len(messages)})
    out = list(messages)
    for i in marks[-ANTHROPIC_MAX_BREAKPOINTS:]:
        msg = dict(out[i])
        text = msg.get("content") or ""
        msg["content"] = [{"type": "text", "text": text,
                           "cache_control": {"type": "ephemeral"}}]
        out[i] = msg
    return out


def _message(response: Any) -> Message:
    msg = response.choices[0].message
    calls = []
    for i, call in enumerate(getattr(msg, "tool_calls", None) or ()):
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError:
            arguments = {"_unparsed": call.function.arguments}
        if not isinstance(arguments, dict):
            arguments = {"_value": arguments}
        calls.append(
            ToolCall(id=call.id or f"call-{i}", name=call.function.name, arguments=arguments)
        )
    return Message("assistant", msg.content or "", tuple(calls))


def _usage(litellm: Any, response: Any) -> Usage:
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details else 0
    cached = cached or int(getattr(usage, "cache_read_input_tokens", 0) or 0)
    try:
        cost = float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:  # unknown model in the local cost map: cost stays unknown (0)
        cost = 0.0
    return Usage(prompt, completion, cached, cost)
