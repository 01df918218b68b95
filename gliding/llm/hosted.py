"""Hosted and OpenAI-compatible models through litellm, imported lazily with an offline setup.

Before the first import we set ``LITELLM_LOCAL_MODEL_COST_MAP=True`` (no cost-map download at
import) and point ``TIKTOKEN_CACHE_DIR`` at the tokenizer files bundled in litellm's wheel, so
token counting works without network. The import costs about 3 s, so it happens on first use.

One call is one try (litellm retries nothing); a failure is raised as a ``ProviderError`` whose
kind says whether it is worth retrying (``gliding.llm.faults.provider_error``), and
``gliding.llm.resilient`` does the retries and fallbacks. ``api_base``/``api_key`` (the
settings ``llm.api_base``/``llm.api_key_env``) are passed to litellm, where they win over its
environment variables.

With ``stream`` (the setting ``llm.stream``) and a request that listens (``on_delta``), the
call is streamed: ``stream: true`` with ``stream_options.include_usage``, each piece of text or
of a tool call's arguments told to ``on_delta`` as it arrives, the chunks assembled by litellm
(``stream_chunk_builder``) into the same response a whole call gives, its usage taken from the
final chunk. A stream cut mid-way, or silent for ``timeout_s`` between two chunks, fails the
call as a whole (a ``connection`` or ``timeout`` fault, retried as any other); nothing of it
is kept.

Every call asks for at most ``max_tokens`` (``llm.max_tokens``, 4096; per role
``llm.roles.<ROLE>.max_tokens``), never the model's own maximum. Its cost comes from the price
in the settings (``llm.prices``, computed by ``gliding.core.prices``), else from litellm's cost
map; a model in neither is an unpriced call (``Usage.unpriced_calls``), never a cost of $0.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from gliding.core.messages import Completion, Message, ToolCall, Usage
from gliding.core.prices import Price, call_cost, per_million
from gliding.errors import LLMError
from gliding.llm.faults import provider_error
from gliding.llm.port import Delta, LLMRequest

DEFAULT_MAX_TOKENS = 4096  # a reply's cap unless llm.max_tokens says otherwise


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


_LOADED: list[Any] = []  # litellm, once _litellm has imported and set it up
LITELLM_LAZY_IMPORTS = (
    "fastapi", "fastapi.routing",
    # what a streamed call's first chunks and its cost import (the tokenizer's encoding
    # file among them: a third of a second)
    "litellm.litellm_core_utils.default_encoding",
    "litellm.types.litellm_core_utils.streaming_chunk_builder_utils",
    "litellm.proxy.spend_tracking.savings",
    "litellm.llms.bedrock.chat.invoke_transformations.amazon_ai21_transformation",
)


def _litellm() -> Any:
    if _LOADED:
        return _LOADED[0]
    prepare_offline_environment()
    try:
        import litellm
    except ImportError as exc:
        raise LLMError("litellm is not installed", hint="run scripts/setup.sh") from exc
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    # what litellm imports on its first call, its first streamed call or its first error
    # (fastapi, for the exception types it maps provider errors to): here, on the thread,
    # not on the event loop later
    for lazy in LITELLM_LAZY_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(lazy)
    # and the pydantic models it builds on its first answer (its response, usage and cost
    # types: 0.1-0.4 s of CPU on a loaded machine): a mock answer builds them, sends nothing
    with contextlib.suppress(Exception):
        litellm.completion(model="openai/gpt-4o-mini", mock_response="ok",
                           messages=[{"role": "user", "content": "warm up"}])
    _LOADED[:] = [litellm]
    return litellm


class HostedLLM:
    """Any provider string litellm understands, e.g. ``openai/gpt-4o-mini``."""

    def __init__(self, model: str, *, timeout_s: float = 120.0,
                 max_tokens: int = DEFAULT_MAX_TOKENS,
                 role_max_tokens: Mapping[str, int] | None = None,
                 price: Price | None = None, api_base: str | None = None,
                 api_key: str | None = None, stream: bool = True) -> None:
        """``max_tokens`` caps every reply (``role_max_tokens`` per role, by the request's
        ``meta["role"]``; a request's own ``max_tokens`` wins). ``price``: the model's price
        from the settings, which wins over litellm's cost map. ``api_base``/``api_key``: the
        server and key (``llm.api_base``, ``llm.api_key_env``), passed to litellm, where an
        explicit one wins over its environment variables. ``stream``: stream the calls whose
        request has ``on_delta`` (``llm.stream``)."""
        self._model = model
        self._stream = stream
        self._timeout = timeout_s
        self._api_base = api_base
        self._api_key = api_key
        self._max_tokens = max_tokens
        self._role_max_tokens = dict(role_max_tokens or {})
        self._price = price

    @property
    def name(self) -> str:
        return self._model

    async def complete(self, request: LLMRequest) -> Completion:
        # the first import takes seconds: off the event loop, whose heartbeats and leases
        # would lapse meanwhile (a worker's assignment was revoked while litellm loaded)
        litellm = _LOADED[0] if _LOADED else await anyio.to_thread.run_sync(_litellm)
        kwargs: dict[str, Any] = {
            "model": self._model,
            "messages": with_cache_control([m.to_openai() for m in request.messages],
                                           request.meta.get("cache_breakpoints") or (),
                                           self._model, limit=ANTHROPIC_MAX_BREAKPOINTS - bool(
                                               request.tools and request.meta.get("cache_tools"))),
            "timeout": self._timeout,
            # one call, one try (litellm passes it on as the SDK's max_retries):
            # gliding/llm/resilient.py retries
            "num_retries": 0,
        }
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        if request.tools:
            kwargs["tools"] = tools_with_cache_control([t.to_openai() for t in request.tools],
                                                       bool(request.meta.get("cache_tools")),
                                                       self._model)
            if request.tool_choice in ("auto", "required"):
                kwargs["tool_choice"] = request.tool_choice
            else:
                kwargs["tool_choice"] = {
                    "type": "function",
                    "function": {"name": request.tool_choice},
                }
        role = str(request.meta.get("role", ""))
        kwargs["max_tokens"] = request.max_tokens or self._role_max_tokens.get(role,
                                                                              self._max_tokens)
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        on_delta = request.on_delta if self._stream else None
        if on_delta is not None:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        started = time.monotonic()
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:  # litellm maps providers to many exception classes
            raise provider_error(self._model, exc, time.time()) from exc
        if on_delta is not None:
            response = await self._gather(litellm, response, on_delta, kwargs["messages"])
        latency = time.monotonic() - started
        return Completion(
            message=_message(response),
            usage=_usage(litellm, response, self._price),
            latency_s=latency,
            model=self._model,
        )

    async def _gather(self, litellm: Any, stream: Any, on_delta: Callable[[Delta], Awaitable[None]],
                      messages: list[dict[str, Any]]) -> Any:
        """The streamed reply assembled into a whole response, each piece told to
        ``on_delta`` on the way.

        Raises:
            ProviderError: the stream broke off (``connection``), or no chunk came for
                ``timeout_s`` (``timeout``).
        """
        chunks: list[Any] = []
        tools: dict[int, str] = {}
        pieces = aiter(stream)
        try:
            while True:
                try:
                    with anyio.fail_after(self._timeout):
                        chunk = await anext(pieces)
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    raise provider_error(self._model, TimeoutError(
                        f"the stream timed out: no chunk for {self._timeout:g}s"),
                        time.time()) from exc
                except Exception as exc:  # as litellm.acompletion's own
                    raise provider_error(self._model, exc, time.time()) from exc
                chunks.append(chunk)
                for delta in stream_deltas(chunk, tools):
                    await on_delta(delta)
        finally:
            with contextlib.suppress(Exception):  # the connection freed now, not when collected
                await stream.aclose()
        return litellm.stream_chunk_builder(chunks, messages=messages)


def stream_deltas(chunk: Any, tools: dict[int, str]) -> list[Delta]:
    """The pieces of text and of tool-call arguments one streamed chunk carries; ``tools``
    (tool call index → name) remembers the names, which only a call's first chunk has."""
    out: list[Delta] = []
    for choice in getattr(chunk, "choices", None) or ():
        delta = getattr(choice, "delta", None)
        if delta is None:
            continue
        text = getattr(delta, "content", None)
        if text:
            out.append(Delta(str(text)))
        for call in getattr(delta, "tool_calls", None) or ():
            function = getattr(call, "function", None)
            index = int(getattr(call, "index", 0) or 0)
            name = getattr(function, "name", None)
            if name:
                tools[index] = str(name)
            arguments = getattr(function, "arguments", None)
            if arguments:
                out.append(Delta(str(arguments), tools.get(index, "")))
    return out


ANTHROPIC_MAX_BREAKPOINTS = 4


def is_anthropic(model: str) -> bool:
    name = model.lower()
    return name.startswith(("anthropic/", "claude", "bedrock/anthropic", "vertex_ai/claude"))


def with_cache_control(messages: list[dict[str, Any]], breakpoints: Any, model: str, *,
                       limit: int = ANTHROPIC_MAX_BREAKPOINTS) -> list[dict[str, Any]]:
    """Anthropic models: every message's text as one text block, and the messages at
    ``breakpoints`` (the newest ``limit`` of them, at most 4) marked ``cache_control:
    ephemeral``, the system prompt included (litellm sends it as a system block carrying the
    mark). A message is sent in the same shape whether marked or not, so the bytes of an
    earlier message do not change when the mark moves on. A message without text (a bare tool
    call, an empty tool result) is never marked: Anthropic refuses an empty text block, so its
    mark goes to the nearest earlier message with text (the prefix up to there is still
    written; the cache then misses only the few blocks after it). Every other provider gets
    the messages unchanged (an OpenAI prompt is cached by its prefix, with no marks)."""
    if not is_anthropic(model):
        return messages
    limit = min(limit, ANTHROPIC_MAX_BREAKPOINTS)
    marks = sorted({j for j in (_with_text(messages, int(i)) for i in breakpoints or ()
                                if 0 <= int(i) < len(messages)) if j is not None})
    marked = set(marks[-limit:]) if limit > 0 else set()
    out = []
    for i, message in enumerate(messages):
        text = message.get("content")
        if isinstance(text, str) and text:
            block: dict[str, Any] = {"type": "text", "text": text}
            if i in marked:
                block["cache_control"] = {"type": "ephemeral"}
            message = {**message, "content": [block]}
        out.append(message)
    return out


def _with_text(messages: list[dict[str, Any]], i: int) -> int | None:
    """The message at ``i`` or the nearest before it whose content is text; None if none."""
    for j in range(i, -1, -1):
        text = messages[j].get("content")
        if isinstance(text, str) and text:
            return j
    return None


def tools_with_cache_control(tools: list[dict[str, Any]], mark: bool,
                             model: str) -> list[dict[str, Any]]:
    """Anthropic models with ``mark``: the last tool carries ``cache_control: ephemeral``, so
    the tool list (the first part of Anthropic's cached prefix, the same for every session of
    a role) is cached on its own; litellm forwards the key on the tool. Others: unchanged."""
    if not mark or not tools or not is_anthropic(model):
        return tools
    return [*tools[:-1], {**tools[-1], "cache_control": {"type": "ephemeral"}}]


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


def _usage(litellm: Any, response: Any, price: Price | None) -> Usage:
    """Tokens and cost of ``response``: with ``price`` (from the settings) computed here, else
    by litellm from its cost map; a model litellm has no price for is an unpriced call
    (``unpriced_calls`` 1, cost unknown), never a cost of 0."""
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = int(getattr(details, "cached_tokens", 0) or 0) if details else 0
    cached = cached or int(getattr(usage, "cache_read_input_tokens", 0) or 0)
    written = int(getattr(usage, "cache_creation_input_tokens", 0) or 0)
    if price is not None:
        return Usage(prompt, completion, cached,
                     call_cost(price, prompt_tokens=prompt, completion_tokens=completion,
                               cache_read_tokens=cached, cache_write_tokens=written))
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for a model its cost map lacks
        cost = None
    if cost is None:
        return Usage(prompt, completion, cached, 0.0, unpriced_calls=1)
    return Usage(prompt, completion, cached, float(cost))


def litellm_price(model: str) -> Price | None:
    """The price litellm's local cost map has for ``model``; None when it has none (or litellm
    is not installed)."""
    try:
        litellm = _litellm()
    except LLMError:
        return None
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises a bare Exception for a model its map lacks
        return None
    inp = per_million(info.get("input_cost_per_token"))
    out = per_million(info.get("output_cost_per_token"))
    if inp is None or out is None:
        return None
    return Price(inp, out, per_million(info.get("cache_read_input_token_cost")),
                 per_million(info.get("cache_creation_input_token_cost")))
