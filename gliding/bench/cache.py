"""``gliding bench cache``: the prompt-cache simulator (``cache_sim``) on the request bodies a
run sent, and the requests Gliding sends on replayed trajectories.

- ``load_calls`` / ``dump_calls``: captured bodies, one JSON object a line: ``provider``
  (``anthropic`` / ``openai``), ``body`` (the JSON sent), ``session``, ``t`` (seconds),
  ``tags`` (``first``, ``compaction``, ``resume``), ``label``. A fake provider's recording
  (``gliding/testing/fake_provider.py``: ``path``, ``body`` as text, ``at``) reads as well.
- ``replay_requests``: before each model call of a trajectory record, the ``LLMRequest`` a
  Gliding role would send: the context engine's prompt (shipped defaults, as ``gliding bench
  context`` replays it), the record's tools (its tool names, simple schemas: a dict input's
  keys, else one ``input`` string), ``tool_choice`` required, and the cache marks the engine
  sets; the naive append-only request of the same moment beside it (one mark, on its last
  message). ``scripts/bench_cache.py`` sends both through the hosted backend (litellm) to a
  loopback server and keeps the exact bodies.
- ``anthropic_body`` / ``openai_body``: the body of a request without litellm, for
  ``gliding bench context``: the hosted backend's marks, then litellm's translation to the
  Messages API as far as caching can tell (block order, boundaries and text); a test checks it
  against litellm's own bodies.
- ``run_cache_bench``: the simulator's report on calls, with the tokenizer, the models and
  the prices named. The simulator is deterministic: one run is the median of any number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gliding.bench.cache_sim import (
    ANTHROPIC,
    CLAUDE_35_HAIKU,
    GPT_4O_MINI,
    OPENAI,
    AnthropicParams,
    Call,
    Encode,
    OpenAIParams,
    Prices,
    annotate,
    anthropic_min_tokens,
    report,
    simulate,
)
from gliding.config.settings import ContextSettings
from gliding.context.engine import ContextEngine
from gliding.context.tokens import TokenCounter
from gliding.core.iri import result_iri, turn_iri
from gliding.core.messages import Message, ToolCall, ToolSpec
from gliding.errors import UsageError
from gliding.llm.hosted import is_anthropic, prepare_offline_environment, with_cache_control
from gliding.llm.port import LLMRequest

TOKENIZER = "cl100k_base"
ANTHROPIC_MODEL = "anthropic/claude-3-5-haiku-latest"
OPENAI_MODEL = "openai/gpt-4o-mini"
CALL_INTERVAL_S = 10.0  # replays: seconds between a trajectory's model calls
RECORD_GAP_S = 86_400.0  # replays: records a day apart, so no record reads another's cache
TARGETS = {"steady": 0.90, "all": 0.75, "after_resume": 0.90}


def encoder(name: str = TOKENIZER) -> Encode:
    """tiktoken's ``name`` encoding (offline, from litellm's bundled files).

    Raises:
        UsageError: tiktoken or its file is not available."""
    prepare_offline_environment()
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # not installed, or the file is missing
        raise UsageError(f"the {name} tokenizer is not available: {exc}",
                         hint="install tiktoken (scripts/setup.sh does)") from exc
    return lambda text: encoding.encode(text, disallowed_special=())


def provider_of(model: str) -> str:
    return ANTHROPIC if is_anthropic(model) else OPENAI


# ---- captured calls -------------------------------------------------------------------------
def load_calls(path: Path) -> list[Call]:
    """Captured calls from a JSON-lines file (this module's format or a fake provider's
    recording, whose faulted requests are left out); a malformed line is a UsageError naming
    its number."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read request bodies {path}: {exc}") from exc
    calls = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            call = _call(json.loads(line))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UsageError(f"{path}:{n}: not a captured request: {exc}") from exc
        if call is not None:
            calls.append(call)
    if not calls:
        raise UsageError(f"{path}: no captured requests")
    return calls


def _call(data: dict[str, Any]) -> Call | None:
    """One captured call; None for a request the fake provider answered with a fault (the
    provider never processed it)."""
    if data.get("fault"):
        return None
    body = data["body"]
    if isinstance(body, str):
        body = json.loads(body)
    if not isinstance(body, dict):
        raise ValueError("'body' is not a JSON object")
    provider = data.get("provider")
    if provider is None:  # a fake provider's recording
        provider = ANTHROPIC if str(data["path"]).rstrip("/").endswith("/messages") else OPENAI
    if provider not in (ANTHROPIC, OPENAI):
        raise ValueError(f"unknown provider {provider!r}")
    return Call(provider, body, str(data.get("session") or ""),
                float(data.get("t", data.get("at", 0.0))), frozenset(data.get("tags") or ()),
                str(data.get("label") or ""))


def dump_calls(path: Path, calls: Sequence[Call]) -> None:
    try:
        with path.open("w", encoding="utf-8") as out:
            for c in calls:
                out.write(json.dumps({"provider": c.provider, "session": c.session, "t": c.t,
                                      "tags": sorted(c.tags), "label": c.label,
                                      "body": c.body}, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write request bodies {path}: {exc}") from exc


def run_cache_bench(calls: Sequence[Call], *, tokenizer: str = TOKENIZER,
                    encode: Encode | None = None, min_tokens: int | None = None,
                    ttl_s: float = 300.0, openai_ttl_s: float = 300.0,
                    prices: Mapping[str, Prices] | None = None,
                    detect_compactions: bool = True) -> dict[str, Any]:
    """The simulator's report on ``calls``: sessions and first calls inferred where the capture
    did not name them, compactions detected (a session's prompt that does not extend its
    previous one) besides those the capture tagged."""
    encode = encode or encoder(tokenizer)
    calls = annotate(calls, detect_compactions=detect_compactions)
    models = sorted({str(c.body.get("model", "")) for c in calls if c.provider == ANTHROPIC})
    floor = min_tokens or (min(anthropic_min_tokens(m) for m in models) if models else 1024)
    outcomes = simulate(calls, encode,
                        anthropic=AnthropicParams(min_tokens=floor, ttl_s=ttl_s),
                        openai=OpenAIParams(ttl_s=openai_ttl_s))
    prices = prices or {ANTHROPIC: CLAUDE_35_HAIKU, OPENAI: GPT_4O_MINI}
    out: dict[str, Any] = {
        "calls": len(calls), "tokenizer": tokenizer,
        "deterministic": True,  # the same bodies give the same figures: no runs to take a median of
        "params": {"anthropic": {"models": models, "min_tokens": floor, "ttl_s": ttl_s,
                                 "lookback_blocks": 20, "max_breakpoints": 4},
                   "openai": {"min_tokens": 1024, "increment": 128, "ttl_s": openai_ttl_s}},
        "targets": TARGETS,
        "providers": report(calls, outcomes, prices),
    }
    return out


# ---- bodies without litellm ------------------------------------------------------------------
def openai_body(messages: Sequence[Message], tools: Sequence[ToolSpec], model: str,
                tool_choice: str = "required") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model.split("/", 1)[-1],
                            "messages": [m.to_openai() for m in messages]}
    if tools:
        body["tools"] = [t.to_openai() for t in tools]
        body["tool_choice"] = tool_choice
    return body


def anthropic_body(messages: Sequence[Message], tools: Sequence[ToolSpec], model: str,
                   breakpoints: Sequence[int], *, cache_tools: bool = False,
                   tool_choice: str = "required") -> dict[str, Any]:
    """The Messages API body the hosted backend sends through litellm, for caching purposes:
    system blocks, consecutive user and tool messages merged into one user message (tool
    results as ``tool_result`` blocks), assistant tool calls as ``tool_use`` blocks. The marks
    are the hosted backend's (``with_cache_control``): on messages with text only, the newest 4
    (3 with ``cache_tools``).
    """
    plain = [m.to_openai() for m in messages]
    room = 4 - bool(cache_tools and tools)
    marked = with_cache_control(plain, breakpoints, model, limit=room)
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for msg in marked:
        role = msg["role"]
        if role == "system":
            system += _parts(msg.get("content"))
            continue
        blocks: list[dict[str, Any]]
        if role == "tool":
            parts = _parts(msg.get("content"))
            marked_part = any("cache_control" in p for p in parts)
            block: dict[str, Any] = {"type": "tool_result",
                                     "tool_use_id": msg.get("tool_call_id"),
                                     "content": [dict(p) for p in parts] if marked_part
                                     else "".join(p["text"] for p in parts)}
            blocks, role = [block], "user"
        else:
            blocks = _parts(msg.get("content"))
            for call in msg.get("tool_calls") or ():
                blocks.append({"type": "tool_use", "id": call["id"],
                               "name": call["function"]["name"],
                               "input": json.loads(call["function"]["arguments"] or "{}")})
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": model.split("/", 1)[-1], "messages": out}
    if system:
        body["system"] = system
    if tools:
        specs = [{"name": t.name, "input_schema": t.to_openai()["function"]["parameters"],
                  "type": "custom", "description": t.description} for t in tools]
        if cache_tools:
            specs[-1]["cache_control"] = {"type": "ephemeral"}
        body["tools"] = specs
        body["tool_choice"] = {"type": "any"} if tool_choice == "required" else (
            {"type": "auto"} if tool_choice == "auto" else {"type": "tool", "name": tool_choice})
    return body


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [dict(p) for p in content or () if p.get("type") != "text" or p.get("text")]


# ---- replayed trajectories -------------------------------------------------------------------
@dataclass(frozen=True)
class Replayed:
    """One model call of a replayed record: Gliding's request, the naive request of the same
    moment, and what the engine did before it (``first``, ``compaction``)."""

    request: LLMRequest
    naive: LLMRequest
    tags: frozenset[str]
    index: int  # the call's number in the record, from 0


def tools_of(record: Mapping[str, Any]) -> tuple[ToolSpec, ...]:
    """The record's tools, in order of first use, with the argument names it used."""
    props: dict[str, dict[str, Any]] = {}
    for step in record["steps"]:
        if step.get("role") != "assistant" or not step.get("tool_name"):
            continue
        names = str(step["tool_name"]).split(",")
        inputs = step.get("tool_input")
        inputs = inputs if isinstance(inputs, list) and len(names) > 1 else [inputs]
        for name, value in zip(names, inputs + [None] * len(names), strict=False):
            keys = props.setdefault(_tool_name(name), {})
            for key in (value if isinstance(value, dict) else {"input": value}):
                keys.setdefault(str(key), {"type": "string"} if key == "input" else {})
    return tuple(ToolSpec(name, f"The {name} tool of the replayed agent.",
                          {"type": "object", "properties": keys})
                 for name, keys in props.items())


def replay_requests(record: Mapping[str, Any], settings: ContextSettings, counter: TokenCounter,
                    job: str = "bench") -> Iterator[Replayed]:
    """The requests of every model call of ``record`` (see the module)."""
    tools = tools_of(record)
    prefix: list[Message] = []
    naive: list[Message] = []
    engine: ContextEngine | None = None
    pending: list[str] = []
    calls = 0
    for index, raw in enumerate(record["steps"]):
        role = raw.get("role")
        content = _text(raw.get("content"))
        if engine is None and role in ("system", "user") and (
                role == "system" or not any(m.role == "user" for m in prefix)):
            prefix.append(Message(role, content))
            naive.append(prefix[-1])
            continue
        if engine is None:
            engine = ContextEngine(settings, counter, prefix)
        if role == "assistant" and not raw.get("scripted"):
            before = engine.stats.compactions
            prompt = engine.prompt()
            tags = {"first"} if calls == 0 else set()
            if engine.stats.compactions > before:
                tags.add("compaction")
            meta = cache_meta(engine, prompt, bool(tools))
            yield Replayed(
                LLMRequest(tuple(prompt), tools, "required", meta=meta),
                LLMRequest(tuple(naive), tools, "required",
                           meta={"cache_breakpoints": [len(naive) - 1]}),
                frozenset(tags), calls)
            calls += 1
        message, pending = _message(raw, role, content, index, pending)
        if message is None:
            continue
        naive.append(message)
        if role == "tool":
            iri = str(result_iri(job, f"s{index}"))
        else:
            iri = str(turn_iri(job, str(role), index))
        engine.add(message, iri=iri, tool=message.name if role == "tool" else None)


def cache_meta(engine: ContextEngine, prompt: Sequence[Message], tools: bool) -> dict[str, Any]:
    """The marks the agent loop puts in a request's meta (``cache_marks`` where the engine has
    it, else the older ``breakpoints``)."""
    marks = getattr(engine, "cache_marks", None)
    if marks is not None:
        chosen = marks(prompt, tools=tools)
        return {"cache_breakpoints": list(chosen.messages), "cache_tools": chosen.tools}
    return {"cache_breakpoints": engine.breakpoints(prompt)}


def _message(raw: Mapping[str, Any], role: Any, content: str, index: int,
             pending: list[str]) -> tuple[Message | None, list[str]]:
    if role == "assistant":
        names = [_tool_name(n) for n in str(raw.get("tool_name") or "").split(",") if n]
        inputs = raw.get("tool_input")
        inputs = inputs if isinstance(inputs, list) and len(names) > 1 else [inputs]
        calls = tuple(ToolCall(f"call_{index}_{k}", name,
                               value if isinstance(value, dict) else
                               ({"input": _text(value)} if value is not None else {}))
                      for k, (name, value) in enumerate(zip(names, inputs + [None] * len(names),
                                                            strict=False)))
        return Message("assistant", content, calls), [c.id for c in calls]
    if role == "tool":
        call_id = pending[0] if pending else f"call_{index}_orphan"
        name = _tool_name(str(raw.get("tool_name") or "tool").split(",")[0])
        return Message("tool", content, (), call_id, name), pending[1:]
    if role in ("user", "system"):
        return Message("user", content), []
    return None, pending


def _tool_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name.strip())[:64] or "tool"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
