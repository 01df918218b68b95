"""The context engine: assembles every prompt of one agent session.

    [stable prefix: system (role, constitution, tool notes) + demonstrations + the task]
    [history block: the L1 chain, one line per compacted turn with its IRI]   ← changes only
    [live messages, newest last]                                               at compactions

Tool results over ``threshold`` bytes enter the live list already routed (summary + IRI, see
``router``). Between compactions the prompt only grows by appending, so a provider's prompt
cache keeps hitting. When the prompt passes the high-water mark (or ``max_messages``), the
oldest live messages — never fewer than ``keep_recent`` kept, never a tool result separated
from the call before it — move into the L1 chain until the prompt is under the low-water mark;
the chain evicts by score to its budget and is rendered as the history block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gliding.config.settings import ContextSettings
from gliding.context.router import identifiers, route_result
from gliding.context.tokens import TokenCounter
from gliding.core.messages import Message
from gliding.memory.summaries import ChainEntry, SummaryChain, Weights

MESSAGE_FLOOR = 16  # tokens a cut message keeps at least (its framing and the cut notice)
READ_BACK_TOOLS = frozenset({"read_result", "grep_result"})  # already archived: never re-routed


@dataclass
class _Live:
    message: Message
    iri: str
    turn: int
    tool: str | None
    tokens: int
    source: str  # the content as it happened (before routing or cutting), for the L1 summary


@dataclass
class EngineStats:
    prompts: int = 0
    compactions: int = 0
    major_compactions: int = 0
    archived_results: int = 0
    prompt_tokens: int = 0  # Σ over prompts built
    baseline_tokens: int = 0  # Σ over prompts of the append-only prompt
    last_prompt_tokens: int = 0
    history: list[ChainEntry] = field(default_factory=list)  # every compacted turn, for recall


class ContextEngine:
    """One agent session's prompt: add messages as they happen, ask for the prompt before a call."""

    def __init__(self, settings: ContextSettings, counter: TokenCounter,
                 prefix: Sequence[Message]) -> None:
        self.settings = settings
        self.counter = counter
        self.prefix = list(prefix)
        self._prefix_tokens = counter.messages(self.prefix)
        self.chain = SummaryChain(
            settings.summaries.budget_tokens,
            Weights(settings.summaries.beta, settings.summaries.w_recency,
                    settings.summaries.w_cost),
            counter.count,
        )
        self.live: list[_Live] = []
        self._segments: list[Message] = []  # history blocks, oldest first
        self._history_tokens = 0
        self._turn = 0
        # compaction starts above the high-water mark, and never before the prompt has grown by
        # one batch, (high_water - low_water) x max_tokens, since the last compaction: a large
        # stable prefix must not turn every call into a compaction (and a cache miss)
        w = settings.window
        self._batch = (w.high_water - w.low_water) * w.target_tokens
        self._trigger = max(w.high_water * w.target_tokens, self._prefix_tokens + self._batch)
        self._baseline_live = 0  # tokens of every message ever added, unrouted
        self.stats = EngineStats()

    # ---- input ---------------------------------------------------------------------
    def add(self, message: Message, *, iri: str, tool: str | None = None) -> Message:
        """Record a message; a tool result over the threshold is replaced by summary + IRI."""
        self._turn += 1
        self._baseline_live += self.counter.message(message)
        source = message.content
        if message.role == "tool" and (tool or message.name) not in READ_BACK_TOOLS:
            routed = route_result(message.content, iri=iri, tool=tool or message.name,
                                  threshold=self.settings.tool_result_iri.threshold,
                                  preview_size=self.settings.tool_result_iri.preview_size)
            if routed.archived:
                self.stats.archived_results += 1
                message = Message("tool", routed.text, (), message.tool_call_id, message.name)
        w = self.settings.window
        cap = max(200, w.max_tokens - self._prefix_tokens - self.chain.budget_tokens - 256)
        tokens = self.counter.message(message)
        if tokens > cap:  # cut once, now, so that no prompt ever rewrites a message it sent
            message, tokens = self._cut(message, iri, cap)
        self.live.append(_Live(message, iri, self._turn, tool or message.name, tokens, source))
        return message

    def _cut(self, message: Message, iri: str, cap: int) -> tuple[Message, int]:
        """The message with the middle of its content cut until it costs at most ``cap``
        tokens (its full text stays in L0 under ``iri``). Always terminates: the kept part
        halves at least every round."""
        text = message.content
        keep = len(text)
        tokens = self.counter.message(message)
        while tokens > cap and keep > 0:
            keep = min(keep // 2, int(keep * cap / tokens))
            head, tail = text[: keep * 2 // 3], text[len(text) - keep // 3:] if keep >= 3 else ""
            cut = (f"{head}\n[… {len(text) - len(head) - len(tail)} characters cut to fit the "
                   f"prompt; read_result({iri}) has them …]\n{tail}")
            message = Message(message.role, cut, message.tool_calls, message.tool_call_id,
                              message.name)
            tokens = self.counter.message(message)
        return message, tokens

    # ---- output --------------------------------------------------------------------
    def prompt(self, focus: str = "") -> list[Message]:
        """The messages to send now; compacts first when over the high-water mark."""
        s = self.settings.window
        total = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in self.live)
        if total > self._trigger or len(self.live) > s.max_messages or total > s.max_tokens:
            self._compact(focus)
            total = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in self.live)
        if total > s.max_tokens:
            total = self._enforce_ceiling()
        messages = [*self.prefix, *self._segments, *(x.message for x in self.live)]
        self.stats.prompts += 1
        self.stats.prompt_tokens += total
        self.stats.last_prompt_tokens = total
        self.stats.baseline_tokens += self._prefix_tokens + self._baseline_live
        return messages

    def breakpoints(self, messages: Sequence[Message]) -> list[int]:
        """Where a provider's prompt cache should break, at most ``cache_breakpoints``: the end
        of the stable prefix, the end of the history blocks, the newest message."""
        marks = [len(self.prefix) - 1]
        if self._segments:
            marks.append(len(self.prefix) + len(self._segments) - 1)
        marks.append(len(messages) - 1)
        return sorted(set(m for m in marks if m >= 0))[-self.settings.cache_breakpoints:] \
            if self.settings.cache_breakpoints else []

    def recall(self, query: str, limit: int = 8) -> list[ChainEntry]:
        """Compacted turns (kept or evicted) that share the most terms with ``query``."""
        from gliding.memory.summaries import relevance, terms

        wanted = terms(query)
        scored = [(relevance(terms(e.summary), wanted), e) for e in self.stats.history]
        scored = [(r, e) for r, e in scored if r > 0]
        scored.sort(key=lambda x: (-x[0], -x[1].turn))
        return [e for _r, e in scored[:limit]]

    # ---- compaction ----------------------------------------------------------------
    def _enforce_ceiling(self) -> int:
        """Still over ``max_tokens`` after compaction (the newest kept messages alone are too
        big): cut the largest live message further. A last resort that rewrites a sent
        message; ``add`` caps every message so that it is rarely needed."""
        s = self.settings.window
        fixed = self._prefix_tokens + self._history_tokens
        while (total := fixed + sum(x.tokens for x in self.live)) > s.max_tokens:
            big = max(self.live, key=lambda x: x.tokens, default=None)
            if big is None or big.tokens <= MESSAGE_FLOOR:
                break
            goal = max(MESSAGE_FLOOR, big.tokens - (total - s.max_tokens))
            before = big.tokens
            big.message, big.tokens = self._cut(big.message, big.iri, goal)
            if big.tokens >= before:
                break
        return fixed + sum(x.tokens for x in self.live)

    def _compact(self, focus: str) -> None:
        s = self.settings.window
        target = s.low_water * s.target_tokens
        budget = self.settings.summaries.budget_tokens
        live_tokens = sum(x.tokens for x in self.live)
        cut = 0
        limit = max(0, len(self.live) - s.keep_recent)
        while cut < limit:
            history_estimate = min(budget, self._history_tokens + 40 * cut)
            if (self._prefix_tokens + history_estimate + live_tokens <= target
                    and len(self.live) - cut <= s.max_messages
                    and self.live[cut].message.role != "tool"):
                break
            live_tokens -= self.live[cut].tokens
            cut += 1
        while 0 < cut < len(self.live) and self.live[cut].message.role == "tool":
            cut -= 1  # never leave a tool result without the call before it
            live_tokens += self.live[cut].tokens
        if cut <= 0:
            return
        moved, self.live = self.live[:cut], self.live[cut:]
        added = []
        for item in moved:
            original = Message(item.message.role, item.source, item.message.tool_calls)
            entry = self.chain.add(item.turn, _role_label(item), summarise(original), item.iri)
            added.append(entry)
            self.stats.history.append(entry)
        if self.chain.tokens <= self.chain.budget_tokens:
            # minor compaction: the new lines go in a block of their own after the earlier
            # blocks, which stay byte-identical (and cached)
            self._segments.append(Message("user", self.chain.render(added, weak=False)))
        else:
            # major compaction: evict by score, then one block replaces all earlier ones
            focus_text = focus + "\n" + "\n".join(x.message.content[-2000:]
                                                   for x in self.live[-2:])
            self.chain.evict(focus_text)
            self._segments = [Message("user", self.chain.render())]
            self.stats.major_compactions += 1
        self._history_tokens = self.counter.messages(self._segments)
        self.stats.compactions += 1
        floor = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in self.live)
        self._trigger = max(s.high_water * s.target_tokens, floor + self._batch)


def summarise(message: Message, width: int = 140, first_width: int = 70) -> str:
    """The extractive L1 summary of one message: the start of its first line, then the
    identifiers it mentions that the start does not show, within ``width`` characters."""
    text = message.content
    for call in message.tool_calls:
        text = f"{call.name}({call.arguments_json()[:80]}) " + text
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    first = lines[0] if lines else "(empty)"
    if len(first) > first_width:
        first = first[: first_width - 1] + "…"
    line = first
    for ident in identifiers(text):
        if ident in line:
            continue
        if len(line) + len(ident) + 1 > width:
            break
        line += " " + ident
    return line


def _role_label(item: _Live) -> str:
    if item.message.role == "tool":
        return f"tool {item.tool}" if item.tool else "tool"
    return item.message.role
