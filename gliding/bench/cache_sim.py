"""A provider prompt-cache simulator: what Anthropic's and OpenAI's prompt caches would read,
write and bill for each request of a run, computed from the exact request bodies. Pure: no I/O
and no clock (every call carries its own time); the tokenizer is handed in. ``annotate`` finds
sessions, first calls and compactions in bodies that do not name them; ``report`` sums the
outcomes per provider and label (all calls, steady state, first calls after a resume).

Blocks. A body is cut into blocks, in the order the provider reads a prompt:

- Anthropic (``/v1/messages``): each tool definition, each system text block (a string
  ``system`` is one block), each content block of each message (a string ``content`` is one);
- OpenAI (``/chat/completions``): each tool definition, then each message.

A block is identified, and its tokens counted, by its *rendering*: its text with what else
makes it distinct (role, type, ids, tool name and arguments), never its ``cache_control``.
The first block of a message carries ``[role]``; later blocks of the same message ``[+]``,
so merging two messages into one is a different prompt, as it is for the provider.

Anthropic (docs: "Prompt caching"). Breakpoints are the blocks carrying ``cache_control``
(a top-level ``cache_control`` puts one on the last block; a mark on the text inside a
``tool_result``, where litellm puts a tool message's, is one on the tool result); more than
``max_breakpoints`` (4) is an API error, counted and billed nothing. Caches are per model. A
cache entry is written for the prefix up to each breakpoint whose prefix has at least
``min_tokens`` (2,048 for Haiku, 1,024 for Sonnet and Opus); a shorter prefix is never
cached. For each breakpoint the prefix ending there is looked up, then the prefixes
ending at each earlier block, at most ``lookback`` (20) blocks back; the longest live entry
found is read (and its TTL refreshed), the rest up to the last breakpoint is written, and the
rest after it is uncached input. Entries live ``ttl_s`` (5 min; ``"ttl": "1h"`` on a
breakpoint: 1 h). The prefix is tools → system → messages, so a change in a tool invalidates
everything; ``tool_choice`` and ``thinking`` are part of the messages' prefix (changing them
keeps the tools and system entries, as the docs' table says).

OpenAI (docs: "Prompt caching", automatic). A prompt of at least ``min_tokens`` (1,024) tokens
is cached in prefixes of 1,024 tokens and then every ``increment`` (128) more; a request reads
the longest live cached prefix of its own tokens (tokens are those of the blocks' renderings,
concatenated), and leaves every prefix of itself cached for ``ttl_s`` (5 min here: OpenAI says
entries usually live 5–10 minutes of inactivity).

The numbers are only as exact as the tokenizer handed in (the benchmark names it: cl100k_base
for both providers, an approximation of both); a real provider may also miss where this model
hits (cache entries are per machine, evicted under load). Prices are parameters (``Prices``).
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gliding.bench.stats import ratio

ANTHROPIC = "anthropic"
OPENAI = "openai"
PROVIDERS = (ANTHROPIC, OPENAI)
Encode = Callable[[str], Sequence[int]]


@dataclass(frozen=True)
class Call:
    """One request as it was sent: its provider, body, session, time (seconds) and tags.

    Tags a capture knows: ``first`` (a session's first call), ``compaction`` (the context
    engine compacted just before this call), ``resume`` (the first call after a resume).
    ``label`` groups calls in reports (the trajectory's system, a job)."""

    provider: str
    body: Mapping[str, Any]
    session: str = ""
    t: float = 0.0
    tags: frozenset[str] = frozenset()
    label: str = ""


@dataclass(frozen=True)
class Outcome:
    """What one call costs in tokens under the simulated cache."""

    input_tokens: int
    cache_read: int = 0
    cache_write: int = 0
    uncached: int = 0
    breakpoints: int = 0
    below_min: bool = False  # too short to cache: a miss
    error: str | None = None  # the provider would have refused the request
    # tokens that repeat the session's previous call (the blocks both begin with): what a
    # cache with no minimum, marks or increments could have read (``Reuse``)
    reusable: int = 0

    @property
    def hit(self) -> bool:
        return self.cache_read > 0


@dataclass(frozen=True)
class Prices:
    """USD per million tokens. ``cache_write`` is a 5-minute write (Anthropic 1.25× input);
    OpenAI has no write premium (``cache_write`` = ``input``)."""

    model: str
    input: float
    cache_write: float
    cache_read: float
    output: float
    cache_write_1h: float | None = None

    def input_cost(self, outcome: Outcome) -> float:
        return (outcome.uncached * self.input + outcome.cache_write * self.cache_write
                + outcome.cache_read * self.cache_read) / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "usd_per_million": {
            "input": self.input, "cache_write": self.cache_write, "cache_read": self.cache_read,
            "output": self.output, **({"cache_write_1h": self.cache_write_1h}
                                      if self.cache_write_1h is not None else {})}}


# Anthropic's and OpenAI's list prices (2025); pass others for other models.
CLAUDE_35_HAIKU = Prices("claude-3-5-haiku", 0.80, 1.00, 0.08, 4.00, 1.60)
CLAUDE_SONNET_45 = Prices("claude-sonnet-4-5", 3.00, 3.75, 0.30, 15.00, 6.00)
GPT_4O_MINI = Prices("gpt-4o-mini", 0.15, 0.15, 0.075, 0.60)


def anthropic_min_tokens(model: str) -> int:
    """The documented minimum cacheable prompt: 2,048 tokens for Haiku, 1,024 otherwise."""
    return 2048 if "haiku" in model.lower() else 1024


@dataclass(frozen=True)
class AnthropicParams:
    min_tokens: int = 2048
    ttl_s: float = 300.0
    ttl_1h_s: float = 3600.0
    lookback: int = 20
    max_breakpoints: int = 4


@dataclass(frozen=True)
class OpenAIParams:
    min_tokens: int = 1024
    increment: int = 128
    ttl_s: float = 300.0


@dataclass(frozen=True)
class Block:
    text: str  # the rendering: identity and tokens
    ttl: str | None = None  # "5m" / "1h" when the block is a breakpoint
    section: str = "messages"


# ---- bodies into blocks -------------------------------------------------------------------
def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _without_cache(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _ttl(block: Any) -> str | None:
    """The TTL of a breakpoint on ``block`` (None: not one). A mark inside a tool result's
    content (where litellm puts a tool message's) is a mark on the tool result."""
    if not isinstance(block, Mapping):
        return None
    if not isinstance(block.get("cache_control"), Mapping):
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            nested = {_ttl(part) for part in block["content"]} - {None}
            return "1h" if "1h" in nested else ("5m" if nested else None)
        return None
    return "1h" if block["cache_control"].get("ttl") == "1h" else "5m"


def _content_text(content: Any) -> str:
    """A tool result's or an OpenAI message's content as text (parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") if isinstance(p, Mapping) and p.get("type") == "text"
                         else _canon(_without_cache(p) if isinstance(p, Mapping) else p)
                         for p in content)
    return "" if content is None else _canon(content)


def _anthropic_block(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return _canon(block)
    kind = block.get("type")
    rest = {k: v for k, v in _without_cache(block).items() if k not in ("type", "text")}
    if kind == "text":
        return block.get("text", "") + (" " + _canon(rest) if rest else "")
    if kind == "tool_use":
        return f"tool_use {block.get('id')} {block.get('name')} {_canon(block.get('input'))}"
    if kind == "tool_result":
        error = " error" if block.get("is_error") else ""
        return (f"tool_result {block.get('tool_use_id')}{error}\n"
                f"{_content_text(block.get('content'))}")
    return _canon(_without_cache(block))


def anthropic_blocks(body: Mapping[str, Any]) -> tuple[list[Block], str]:
    """The blocks of an Anthropic Messages body, and the key of what precedes the messages
    without being a block (tool_choice, thinking)."""
    blocks = [Block("[tool] " + _canon(_without_cache(t)), _ttl(t), "tools")
              for t in body.get("tools") or ()]
    system = body.get("system")
    if isinstance(system, str) and system:
        blocks.append(Block("[system]\n" + system, None, "system"))
    elif isinstance(system, list):
        blocks += [Block("[system]\n" + _anthropic_block(b), _ttl(b), "system") for b in system]
    for message in body.get("messages") or ():
        role = message.get("role", "?")
        content = message.get("content")
        parts = [content] if isinstance(content, str) else list(content or ())
        for i, part in enumerate(parts):
            head = f"[{role}]\n" if i == 0 else "[+]\n"
            blocks.append(Block(head + _anthropic_block(part), _ttl(part)))
    if isinstance(body.get("cache_control"), Mapping) and blocks:  # automatic caching
        last = blocks[-1]
        blocks[-1] = Block(last.text, _ttl(body) or "5m", last.section)
    root = _canon({"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking")})
    return blocks, root


def openai_blocks(body: Mapping[str, Any]) -> list[Block]:
    """The blocks of an OpenAI chat-completions body: tools first, then the messages."""
    blocks = [Block("[tool] " + _canon(t), None, "tools") for t in body.get("tools") or ()]
    for message in body.get("messages") or ():
        head = "[" + " ".join(str(message[k]) for k in ("role", "name", "tool_call_id")
                              if message.get(k)) + "]\n"
        text = _content_text(message.get("content"))
        if message.get("tool_calls"):
            text += "\n" + _canon(message["tool_calls"])
        blocks.append(Block(head + text))
    return blocks


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class _Tokens:
    """Token ids by text, remembered (bounded)."""

    def __init__(self, encode: Encode, size: int = 65536) -> None:
        self.encode = encode
        self.size = size
        self.memo: dict[str, Sequence[int]] = {}

    def __call__(self, text: str) -> Sequence[int]:
        ids = self.memo.get(text)
        if ids is None:
            ids = self.encode(text)
            if len(self.memo) >= self.size:
                self.memo.clear()
            self.memo[text] = ids
        return ids


# ---- the caches -----------------------------------------------------------------------------
class AnthropicCache:
    """Anthropic's prompt cache for one model (caches are per model and organisation)."""

    def __init__(self, encode: Encode, params: AnthropicParams | None = None) -> None:
        self.params = params or AnthropicParams()
        self.tokens = _Tokens(encode)
        self.entries: dict[bytes, float] = {}  # prefix key -> expiry time

    def feed(self, body: Mapping[str, Any], t: float) -> Outcome:
        p = self.params
        blocks, root = anthropic_blocks(body)
        sizes = [len(self.tokens(b.text)) for b in blocks]
        total = sum(sizes)
        marks = [i for i, b in enumerate(blocks) if b.ttl is not None]
        if len(marks) > p.max_breakpoints:
            return Outcome(total, uncached=total, breakpoints=len(marks),
                           error=f"{len(marks)} cache_control blocks (at most "
                                 f"{p.max_breakpoints})")
        keys, cum = [], []
        key, running = _digest(str(body.get("model", "")).encode()), 0
        root_key = _digest(root.encode())
        for i, (block, size) in enumerate(zip(blocks, sizes, strict=True)):
            if block.section == "messages" and (i == 0 or blocks[i - 1].section != "messages"):
                key = _digest(key + root_key)
            key = _digest(key + block.text.encode("utf-8", "surrogatepass"))
            running += size
            keys.append(key)
            cum.append(running)
        if not marks or cum[marks[-1]] < p.min_tokens:
            return Outcome(total, uncached=total, breakpoints=len(marks), below_min=True)
        read_at = -1
        for mark in marks:
            for j in range(mark, max(-1, mark - p.lookback - 1), -1):
                expiry = self.entries.get(keys[j])
                if expiry is not None and expiry >= t:
                    read_at = max(read_at, j)
                    break
        read = cum[read_at] if read_at >= 0 else 0
        if read_at >= 0:
            self.entries[keys[read_at]] = max(self.entries[keys[read_at]], t + p.ttl_s)
        for mark in marks:
            if cum[mark] >= p.min_tokens:
                life = p.ttl_1h_s if blocks[mark].ttl == "1h" else p.ttl_s
                self.entries[keys[mark]] = max(self.entries.get(keys[mark], 0.0), t + life)
        written = max(0, cum[marks[-1]] - read)
        return Outcome(total, read, written, total - read - written, len(marks))


class OpenAICache:
    """OpenAI's automatic prefix cache for one model."""

    def __init__(self, encode: Encode, params: OpenAIParams | None = None) -> None:
        self.params = params or OpenAIParams()
        self.tokens = _Tokens(encode)
        self.entries: dict[bytes, float] = {}  # key of a token prefix -> expiry time

    def feed(self, body: Mapping[str, Any], t: float) -> Outcome:
        p = self.params
        ids: list[int] = []
        for block in openai_blocks(body):
            ids.extend(self.tokens(block.text))
        total = len(ids)
        if total < p.min_tokens:
            return Outcome(total, uncached=total, below_min=True)
        key = _digest(str(body.get("model", "")).encode())
        read, start, end = 0, 0, p.min_tokens
        while end <= total:
            key = _digest(key + array("I", ids[start:end]).tobytes())
            expiry = self.entries.get(key)
            if read == start and expiry is not None and expiry >= t:
                read = end  # the cached prefix grows one increment
            self.entries[key] = t + p.ttl_s  # the whole prompt stays cached, in increments
            start, end = end, end + p.increment
        return Outcome(total, read, 0, total - read)


class Reuse:
    """How many tokens of each call repeat its session's previous call: the tokens of the
    blocks both begin with; what a cache with no minimum, marks or increments would read from
    the session's own history."""

    def __init__(self, encode: Encode) -> None:
        self.tokens = _Tokens(encode)
        self.previous: dict[tuple[str, str], list[str]] = {}

    def feed(self, call: Call) -> int:
        blocks = (anthropic_blocks(call.body)[0] if call.provider == ANTHROPIC
                  else openai_blocks(call.body))
        texts = [b.text for b in blocks]
        before = self.previous.get((call.provider, call.session))
        self.previous[(call.provider, call.session)] = texts
        shared = 0
        for a, b in zip(texts, before or (), strict=False):
            if a != b:
                break
            shared += len(self.tokens(a))
        return shared


def simulate(calls: Sequence[Call], encode: Encode, *,
             anthropic: AnthropicParams | None = None,
             openai: OpenAIParams | None = None) -> list[Outcome]:
    """Every call through its provider's cache (one cache per provider and model), in time
    order; outcomes in the order of ``calls``, with ``reusable`` filled in (sessions as the
    calls name them)."""
    reuse = Reuse(encode)
    caches: dict[tuple[str, str], AnthropicCache | OpenAICache] = {}
    out: list[Outcome | None] = [None] * len(calls)
    for i in sorted(range(len(calls)), key=lambda k: calls[k].t):
        call = calls[i]
        model = str(call.body.get("model", ""))
        cache = caches.get((call.provider, model))
        if cache is None:
            if call.provider == ANTHROPIC:
                cache = AnthropicCache(encode, anthropic)
            elif call.provider == OPENAI:
                cache = OpenAICache(encode, openai)
            else:
                raise ValueError(f"unknown provider {call.provider!r}")
            caches[(call.provider, model)] = cache
        out[i] = replace(cache.feed(call.body, call.t), reusable=reuse.feed(call))
    return [o for o in out if o is not None]


# ---- sessions, compactions and the report --------------------------------------------------
def message_keys(call: Call) -> tuple[str, tuple[str, ...]]:
    """(the system's rendering, each message block's rendering) of a body."""
    if call.provider == ANTHROPIC:
        blocks, _root = anthropic_blocks(call.body)
    else:
        blocks = openai_blocks(call.body)
    system = "\n".join(b.text for b in blocks if b.section == "system")
    rest = tuple(b.text for b in blocks if b.section == "messages")
    if call.provider == OPENAI and rest and rest[0].startswith(("[system", "[developer")):
        system, rest = rest[0], rest[1:]
    return system, rest


def annotate(calls: Sequence[Call], *, detect_compactions: bool = True) -> list[Call]:
    """``calls`` with sessions and tags filled in where the capture did not know them.

    A call with no session belongs to the latest earlier session (same provider and system)
    whose first call's messages are a strict prefix of its own, else it starts one (tagged
    ``first``): a session's first prompt is its stable prefix, every later prompt extends it.
    With ``detect_compactions``, a call whose session's previous call is not a prefix of it
    is tagged ``compaction`` (the engine rewrote its history)."""
    anchors: list[tuple[str, str, tuple[str, ...], str]] = []  # provider, system, first, id
    last: dict[tuple[str, str], tuple[str, ...]] = {}  # (provider, session) -> messages
    out: list[Call] = []
    for call in sorted(calls, key=lambda c: c.t):
        system, msgs = message_keys(call)
        tags = set(call.tags)
        session = call.session
        if not session:
            for provider, sys_, first, sid in reversed(anchors):
                if (provider == call.provider and sys_ == system and len(first) < len(msgs)
                        and msgs[:len(first)] == first):
                    session = sid
                    break
            else:
                session = f"{call.provider}-{len(anchors) + 1}"
                anchors.append((call.provider, system, msgs, session))
        key = (call.provider, session)
        if key not in last:
            tags.add("first")
        elif (detect_compactions and "first" not in tags
              and msgs[:len(last[key])] != last[key]):
            tags.add("compaction")
        last[key] = msgs
        out.append(Call(call.provider, call.body, session, call.t, frozenset(tags), call.label))
    return out


@dataclass
class _Sum:
    calls: int = 0
    errors: int = 0
    below_min: int = 0
    below_min_tokens: int = 0
    hits: int = 0
    input: int = 0
    read: int = 0
    write: int = 0
    uncached: int = 0
    reusable: int = 0
    cost: float = 0.0
    full_cost: float = 0.0  # the same input with no cache at all

    def add(self, outcome: Outcome, prices: Prices) -> None:
        self.calls += 1
        if outcome.error:
            self.errors += 1
            return
        self.below_min += outcome.below_min
        self.below_min_tokens += outcome.input_tokens if outcome.below_min else 0
        self.hits += outcome.hit
        self.input += outcome.input_tokens
        self.read += outcome.cache_read
        self.write += outcome.cache_write
        self.uncached += outcome.uncached
        self.reusable += outcome.reusable
        self.cost += prices.input_cost(outcome)
        self.full_cost += outcome.input_tokens * prices.input / 1e6

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "errors": self.errors, "below_min_calls": self.below_min,
                "below_min_tokens": self.below_min_tokens,
                "hit_rate": ratio(self.hits, self.calls - self.errors),
                "input_tokens": self.input, "cache_read_tokens": self.read,
                "cache_write_tokens": self.write, "uncached_tokens": self.uncached,
                "read_share": ratio(self.read, self.input),
                "ceiling_read_share": ratio(self.reusable, self.input),
                "input_cost_usd": round(self.cost, 6),
                "input_cost_usd_without_cache": round(self.full_cost, 6)}


@dataclass
class _Group:
    all: _Sum = field(default_factory=_Sum)
    steady: _Sum = field(default_factory=_Sum)
    resume: _Sum = field(default_factory=_Sum)
    first: int = 0
    compaction: int = 0

    def add(self, call: Call, outcome: Outcome, prices: Prices) -> None:
        self.all.add(outcome, prices)
        self.first += "first" in call.tags
        self.compaction += "compaction" in call.tags and "first" not in call.tags
        if not call.tags & {"first", "compaction"}:
            self.steady.add(outcome, prices)
        if "resume" in call.tags:
            self.resume.add(outcome, prices)

    def as_dict(self) -> dict[str, Any]:
        out = {"all": self.all.as_dict(), "steady": self.steady.as_dict(),
               "excluded_from_steady": {
                   "first_calls": self.first, "after_compaction": self.compaction,
                   "share_of_calls": ratio(self.all.calls - self.steady.calls, self.all.calls)}}
        if self.resume.calls:
            out["after_resume"] = self.resume.as_dict()
        return out


def report(calls: Sequence[Call], outcomes: Sequence[Outcome],
           prices: Mapping[str, Prices]) -> dict[str, Any]:
    """Per provider (and per label within it): cache-read share of input tokens over all calls,
    over steady-state calls (a session's first call and the call right after a compaction
    excluded), and over first calls after a resume; errors, calls under the minimum length
    (misses), hit rate and input cost; ``ceiling_read_share``: the share that repeats the
    session's previous call (``Reuse``), the most a cache can read from the session's own
    history (a cross-session hit, such as a role's tools cached by an earlier job, can add
    to it)."""
    groups: dict[str, _Group] = {}
    labels: dict[str, dict[str, _Group]] = {}
    for call, outcome in zip(calls, outcomes, strict=True):
        price = prices[call.provider]
        groups.setdefault(call.provider, _Group()).add(call, outcome, price)
        if call.label:
            labels.setdefault(call.provider, {}).setdefault(call.label, _Group()).add(
                call, outcome, price)
    out: dict[str, Any] = {}
    for provider, group in groups.items():
        entry = group.as_dict()
        entry["prices"] = prices[provider].as_dict()
        if provider in labels:
            entry["by_label"] = {k: g.as_dict() for k, g in sorted(labels[provider].items())}
        out[provider] = entry
    return out
