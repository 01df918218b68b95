"""The context engine: assembles every prompt of one agent session.

    [stable prefix: system (role, constitution, tool notes) + demonstrations + the task]
    [history block: L1 lines (one per compacted turn, with its IRI) and kept facts]  ← changes
    [live messages, newest last]                                       only at compactions
    [working set: predicted earlier lines, this prompt only, when prefetch is on]

Saving starts only when it pays: while every message of the session, as it happened (the
append-only prompt), fits in ``window.whole_below`` of ``window.max_tokens``, the prompt is that
prompt — no result routed, nothing compacted, nothing forgotten. From the message that passes
it on, the engine saves as follows. Tool results over ``threshold`` bytes enter the live list
already routed (summary + IRI, see ``router``); so do tool calls whose arguments pass
``argument_cap`` (a stub + IRI instead of them: the agent loop refuses such a call and
archives its arguments first). Between
compactions the prompt only grows by appending, so a provider's prompt cache keeps hitting.
When the prompt passes the high-water mark (or ``max_messages``), the
oldest live messages — never fewer than ``keep_recent`` kept, never a tool result separated
from the call before it — move into the L1 chain until the prompt is under the low-water mark;
each becomes one line (``gist``), the chain evicts by score to its budget, the identifiers
the agent used whose messages left come back as fact lines, and a result that leaves leaves a
list of the identifiers the prompt lacks (those not used yet) under its IRI (``facts``). A
``tool_search`` answer (the schemas of tools loaded on demand) goes into the block whole.

The focus — what the job is doing now — is the engine's own: the task (the prefix's last user
message), the latest user turn and the latest assistant turn (its text and calls), plus a plan
step when the caller has one. A routed result's preview leads with what it shares with the
focus (``router``); eviction and the working set weigh by it. Replays and live jobs build it
the same way, here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gliding.config.settings import ContextSettings
from gliding.context.facts import FactBook, SeenIds
from gliding.context.gist import action_line, gist
from gliding.context.prefetch.lines import LineIndex
from gliding.context.prefetch.predictor import Predictor, PrefetchParams, Warm
from gliding.context.router import route_call, route_result
from gliding.context.summaries import (
    ChainEntry,
    SummaryChain,
    Weights,
    base_of,
    relative,
    terms,
)
from gliding.context.tokens import TokenCounter
from gliding.core.identifiers import identifiers
from gliding.core.messages import Message
from gliding.core.text import clip

FOCUS_CHARS = 4000  # of the task and of each latest turn, what the focus reads
MESSAGE_FLOOR = 16  # tokens a cut message keeps at least (its framing and the cut notice)
ARGUMENT_FLOOR_BYTES = 16 << 10  # a tool call's arguments may always have this much
MAX_ARGUMENT_BYTES = 1 << 20  # ... and never more, however large the window
WORKING_SET = "(working set)"  # the tool label of a live prefetch block
READ_BACK_TOOLS = frozenset({"read_result", "grep_result"})  # already archived: never re-routed
# their answer is what the model needs whole (the schemas of the tools tool_search loaded)
WHOLE_TOOLS = READ_BACK_TOOLS | {"tool_search"}
# a compaction stalls when it leaves the prompt over the window's high-water mark (high_water x
# max_tokens) and the next comes within STALL_CALLS prompts; STALLS of them in a row:
# compaction cannot keep up (``stalled``)
STALL_CALLS = 2
STALLS = 2


@dataclass
class _Live:
    message: Message
    iri: str
    turn: int
    tool: str | None
    tokens: int
    source: str  # the content as it happened (before routing or cutting), for the L1 summary
    whole: bool = True  # the prompt holds the source in full (not routed, not cut)
    ids: frozenset[str] = frozenset()  # identifiers the prompt shows of this message
    summary: str | None = None  # the model's own one-line summary of this turn


def argument_cap(settings: ContextSettings) -> int:
    """Bytes of JSON one tool call's arguments may have: about half of what the prompt window
    (``window.max_tokens``, some 4 bytes a token) holds, from 16 KiB to 1 MiB. A larger
    argument could not stay in the prompt, and would be re-sent by every later one."""
    return min(MAX_ARGUMENT_BYTES, max(ARGUMENT_FLOOR_BYTES, 2 * settings.window.max_tokens))


@dataclass(frozen=True)
class CacheMarks:
    """Where a provider's prompt cache should break: after the last tool (``tools``) and after
    the messages at ``messages`` (indices, ascending)."""

    tools: bool = False
    messages: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.messages) + self.tools


@dataclass
class EngineStats:
    prompts: int = 0
    compactions: int = 0
    major_compactions: int = 0
    archived_results: int = 0
    prompt_tokens: int = 0  # Σ over prompts built
    baseline_tokens: int = 0  # Σ over prompts of the append-only prompt
    last_prompt_tokens: int = 0
    working_set_tokens: int = 0  # Σ over prompts of the working-set block
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
        # whole: every message so far as it happened (the append-only prompt) is within
        # whole_below x max_tokens, so the prompt is that prompt; saving starts past it
        self._whole_limit = w.whole_below * w.max_tokens
        self.whole = self._prefix_tokens <= self._whole_limit
        self._mentioned: set[str] = set()  # identifiers the agent or the task wrote
        for m in self.prefix:
            if m.role == "user":
                self._mentioned.update(identifiers(m.content))
        # the focus: the task (the prefix's last user message), the latest user turn and the
        # latest assistant turn, in replay and in live jobs alike (``focus``)
        self._task = next((m.content[:FOCUS_CHARS] for m in reversed(self.prefix)
                           if m.role == "user"), "")
        self._latest: dict[str, str] = {}  # role -> its latest turn's text (and calls)
        self._focus_terms: frozenset[str] | None = None  # of ``focus()``, until a turn changes it
        self._step = ""  # the plan step ``prompt`` was last given
        self.stats = EngineStats()
        self.stalls = 0  # stalled compactions in a row (STALL_CALLS)
        self._loaded: list[str] = []  # tool_search answers (loaded schemas) compacted: kept whole
        self._over_after = False  # the last compaction left the prompt over the window's mark
        self._since_compaction = 0  # prompts since the last compaction
        p = settings.prefetch
        self.lines = LineIndex()
        self.predictor = Predictor(self.lines, PrefetchParams(p.budget_tokens, p.max_sources,
                                                              p.lines_per_source))
        self._prefix_ids = frozenset().union(*(identifiers(m.content) for m in self.prefix))
        self._segment_ids: frozenset[str] = frozenset()
        self.warmed: list[Warm] = []  # the sources the last prompt's prediction warmed
        self._focus = ""  # the focus the predictor last saw, and its identifiers
        self._focus_ids: list[str] = []
        # the history block (L1 lines and facts) must leave room under max_tokens for the
        # prefix and the newest messages: facts get what the ceiling allows, at most their budget
        room = settings.window.max_tokens - self._prefix_tokens - self.chain.budget_tokens - 512
        self.facts = FactBook(max(0, min(settings.summaries.facts_budget_tokens, room)),
                              counter.count)

    # ---- input ---------------------------------------------------------------------
    def add(self, message: Message, *, iri: str, tool: str | None = None,
            summary: str | None = None) -> Message:
        """Record a message; a tool result over the threshold is replaced by summary + IRI.
        ``summary`` is the model's own line for this turn: its L1 line when it is compacted."""
        self._turn += 1
        message = self._bounded_calls(message, iri)
        self._baseline_live += self.counter.message(message)
        if self.whole and self._prefix_tokens + self._baseline_live > self._whole_limit:
            self.whole = False  # from this message on the engine saves
        source = message.content
        said: list[str] = []
        if message.role in ("assistant", "user"):
            said = identifiers(source)
            for call in message.tool_calls:
                said += identifiers(call.arguments_json())
            self._mentioned.update(said)
            self._latest[message.role] = " ".join(
                [source[-FOCUS_CHARS:], *(f"{c.name} {c.arguments_json()[:FOCUS_CHARS]}"
                                          for c in message.tool_calls)])
            self._focus_terms = None
        if message.role in ("assistant", "tool"):
            self.lines.add(iri, source, turn=self._turn,
                           kind="result" if message.role == "tool" else "turn")
        if message.role == "assistant":
            self.facts.observe_use(said, self._turn, self._prefix_ids)
            if self.settings.prefetch.enabled:
                self.predictor.observe_action([i for i in said if i not in self._prefix_ids])
        if (message.role == "tool" and not self.whole
                and (tool or message.name) not in WHOLE_TOOLS):
            routed = route_result(message.content, iri=iri, tool=tool or message.name,
                                  threshold=self.settings.tool_result_iri.threshold,
                                  preview_size=self.settings.tool_result_iri.preview_size,
                                  focus=self.focus_terms())
            if routed.archived:
                self.stats.archived_results += 1
                message = Message("tool", routed.text, (), message.tool_call_id, message.name)
        w = self.settings.window
        cap = max(200, w.max_tokens - self._prefix_tokens - self.chain.budget_tokens
                  - self.facts.budget_tokens - 256)
        tokens = self.counter.message(message)
        if tokens > cap:  # cut once, now, so that no prompt ever rewrites a message it sent
            message, tokens = self._cut(message, iri, cap)
        if said and message.content == source:  # the same text: its identifiers are known
            shown = frozenset(said)
        else:
            shown = frozenset(identifiers(message.content)).union(
                *(identifiers(c.arguments_json()) for c in message.tool_calls))
        self.live.append(_Live(message, iri, self._turn, tool or message.name, tokens, source,
                               message.content == source, shown,
                               " ".join(summary.split()) if summary else None))
        return message

    def focus(self) -> str:
        """What the job is doing now: the task, the plan step the caller gave ``prompt`` (when
        it has one beyond the task), the latest user turn and the latest assistant turn (its
        text and calls)."""
        return "\n".join(x for x in (self._task, self._step, self._latest.get("user", ""),
                                      self._latest.get("assistant", "")) if x)

    def focus_terms(self) -> frozenset[str]:
        """The words and identifiers of ``focus()``: what a routed result's preview keeps."""
        if self._focus_terms is None:
            text = self.focus()
            self._focus_terms = terms(text) | frozenset(identifiers(text))
        return self._focus_terms

    @property
    def argument_cap(self) -> int:
        """Bytes of JSON one tool call's arguments may have in this session's prompts."""
        return argument_cap(self.settings)

    def _bounded_calls(self, message: Message, iri: str) -> Message:
        """``message`` with every call whose arguments pass ``argument_cap`` stubbed (the
        full reply stays in L0 under ``iri``): a backstop, the loop stubs them first."""
        if not message.tool_calls:
            return message
        calls = tuple(route_call(c, iri=iri, cap=self.argument_cap)[0]
                      for c in message.tool_calls)
        if calls == message.tool_calls:
            return message
        return Message(message.role, message.content, calls, message.tool_call_id,
                       message.name)

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
    def prompt(self, step: str = "") -> list[Message]:
        """The messages to send now; compacts first when over the high-water mark. ``step``:
        the plan step, when the caller has one beyond the task (see ``focus``)."""
        if step != self._step:
            self._step, self._focus_terms = step, None
        focus = self.focus()
        s = self.settings.window
        fresh = not (self.live and self.live[-1].tool == WORKING_SET)  # something new came
        if fresh:
            self._drop_working_set()
        total = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in self.live)
        block_tokens = sum(x.tokens for x in self.live if x.tool == WORKING_SET)
        self._since_compaction += 1
        if self._due(total, block_tokens, len(self.live)):
            done = self.stats.compactions
            self._compact(focus)
            total = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in self.live)
            if self.stats.compactions > done:
                self._count_stall(total)
        if total > s.max_tokens:
            total = self._enforce_ceiling()
        block = self._working_set(focus) if fresh else None
        if block is not None and total + self.counter.message(block) > s.max_tokens:
            block = None  # the ceiling holds for the working set too (the cache still warms)
        if block is not None:
            # after the newest message, for this prompt only: the next prompt drops it before
            # its own, so it never stays in the cached part (the model's reply follows it, and
            # a reply is never a cache hit) nor costs a later prompt anything
            extra = self.counter.message(block)
            self.live.append(_Live(block, "", self._turn, WORKING_SET, extra, block.content,
                                   False, frozenset(identifiers(block.content))))
            total += extra
            self.stats.working_set_tokens += extra
        messages = [*self.prefix, *self._segments, *(x.message for x in self.live)]
        self.stats.prompts += 1
        self.stats.prompt_tokens += total
        self.stats.last_prompt_tokens = total
        self.stats.baseline_tokens += self._prefix_tokens + self._baseline_live
        return messages

    def due(self) -> bool:
        """Whether the next ``prompt`` compacts (asked before it, e.g. by hooks)."""
        fresh = not (self.live and self.live[-1].tool == WORKING_SET)
        live = [x for x in self.live if not (fresh and x.tool == WORKING_SET)]
        total = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in live)
        return self._due(total, sum(x.tokens for x in live if x.tool == WORKING_SET), len(live))

    def _due(self, total: int, block_tokens: int, messages: int) -> bool:
        """A prompt of ``total`` tokens (``block_tokens`` of them the working set, which is
        not growth and must not bring a compaction) and ``messages`` live messages compacts."""
        s = self.settings.window
        return not self.whole and (total - block_tokens > self._trigger
                                   or messages > s.max_messages or total > s.max_tokens)

    @property
    def stalled(self) -> bool:
        """Compaction cannot keep up: ``STALLS`` compactions in a row each left the prompt over
        the window's high-water mark (``high_water`` x ``max_tokens``: what no compaction could
        bring down is near the ceiling) and the next came within ``STALL_CALLS`` prompts. The
        agent loop stops the session (``compaction_stalled``). The mark is the window's, not
        the batch target's: a prefix, the history block and two long replies often pass
        ``high_water`` x ``target_tokens`` after a compaction, and a session that compacts
        every other call that way still works (it pays a cache rewrite each time)."""
        return self.stalls >= STALLS

    def _count_stall(self, total: int) -> None:
        """A compaction just left the prompt at ``total`` tokens: the one before it stalled
        when it left the prompt over the window's high-water mark and this one came that soon."""
        w = self.settings.window
        stalled = self._over_after and self._since_compaction <= STALL_CALLS
        self.stalls = self.stalls + 1 if stalled else 0
        self._over_after = total > w.high_water * w.max_tokens
        self._since_compaction = 0

    def holds_whole(self, iri: str) -> bool:
        """Whether the prompt's live messages hold the message added under ``iri`` as it
        happened: not routed, cut or compacted into the history block."""
        return any(x.iri == iri and x.message.content == x.source for x in self.live)

    def _drop_working_set(self) -> None:
        """The previous prompt's working-set block leaves the live messages."""
        if any(x.tool == WORKING_SET for x in self.live):
            self.live = [x for x in self.live if x.tool != WORKING_SET]

    def _live_ids(self) -> set[str]:
        """Identifiers the prefix and the live messages show."""
        out = set(self._prefix_ids)
        for item in self.live:
            out |= item.ids
        return out

    def _working_set(self, focus: str) -> Message | None:
        """The prefetch block: earlier lines the next step is predicted to need, after the
        live messages (so it never disturbs the cached part of the prompt)."""
        self.warmed = []
        if not self.settings.prefetch.enabled or not self.live or not len(self.lines):
            return None
        if focus != self._focus:
            self._focus, self._focus_ids = focus, identifiers(focus)
        query: dict[str, float] = dict.fromkeys(self._focus_ids, 0.5)
        weights = {"assistant": 2.0, "tool": 1.0, "user": 1.5}
        for item in [x for x in self.live if x.tool != WORKING_SET][-2:]:
            w = weights.get(item.message.role, 1.0)
            source = self.lines.sources.get(item.iri)
            for ident in source.ids if source is not None else identifiers(item.source):
                query[ident] = max(query.get(ident, 0.0), w)
        # a source fills a gap only with an identifier the prompt does not show
        visible = self._live_ids() | self._segment_ids
        exclude = {x.iri for x in self.live if x.whole}
        self.warmed = self.predictor.predict(query, visible=visible, exclude=exclude,
                                             count=self.counter.count)
        quoted = [w for w in self.warmed if w.lines]
        if not quoted:
            return None
        base = base_of(self.warmed[0].iri)
        out = ["[Working set: earlier lines that may bear on the next step "
               f"(<x> means {base}x; read_result(IRI) has the full text).]"]
        for warm in quoted:
            text = " | ".join(f"{line.number}: {line.text}" for line in warm.lines)
            out.append(f"<{relative(warm.iri, base)}> {text}")
        return Message("user", "\n".join(out))

    def cache_marks(self, messages: Sequence[Message], *, tools: bool = False) -> CacheMarks:
        """Where a provider's prompt cache should break (Anthropic: the prefix up to each mark
        is cached, and a call reads the longest cached prefix within 20 blocks before a mark),
        at most ``cache_breakpoints``, chosen in this order:

        1. the newest message (not the working-set block, which the next prompt drops): the
           next call, one turn longer, finds this one's prefix a few blocks back;
        2. the end of the history blocks, or, before the first compaction, of the stable
           prefix (system, demonstrations, assignment): what survives a compaction;
        3. the end of the system prompt (index 0), the same for a session's every assignment;
        4. the end of the tool list (``tools``: the request has tools), the same for every
           session of the role;
        5. the end of the stable prefix, when a history block took its place in 2.

        ``messages`` is the list ``prompt`` returned."""
        budget = self.settings.cache_breakpoints
        if not budget or not messages:
            return CacheMarks()
        newest = len(messages) - 1
        if self.live and self.live[-1].tool == WORKING_SET and newest > 0:
            newest -= 1
        middle = (len(self.prefix) + len(self._segments) - 1 if self._segments
                  else len(self.prefix) - 1)
        chosen: list[int] = []
        mark_tools = False
        for mark in (newest, middle, 0, -1, len(self.prefix) - 1):
            if len(chosen) + mark_tools >= budget:
                break
            if mark == -1:
                mark_tools = tools
            elif 0 <= mark <= newest and mark not in chosen:
                chosen.append(mark)
        return CacheMarks(mark_tools, tuple(sorted(chosen)))

    def breakpoints(self, messages: Sequence[Message]) -> list[int]:
        """The messages ``cache_marks`` marks (without a tool list)."""
        return list(self.cache_marks(messages).messages)

    def recall(self, query: str, limit: int = 8) -> list[ChainEntry]:
        """Compacted turns (kept or evicted) that share the most terms with ``query``, by their
        L1 line and the identifiers of their full text (the line index)."""
        from gliding.context.summaries import relevance

        wanted = terms(query)
        scored = []
        for e in self.stats.history:
            source = self.lines.sources.get(e.iri)
            text = e.summary if source is None else e.summary + " " + " ".join(source.ids)
            scored.append((relevance(wanted, terms(text)), e))
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
        budget = self.chain.budget_tokens
        target = s.low_water * s.target_tokens
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
        loaded = [x.message.content for x in moved
                  if x.message.role == "tool" and x.tool == "tool_search"
                  and x.message.content.startswith("loaded ")]
        self._loaded += loaded  # the schemas the session loaded stay callable: kept whole
        for item in moved:
            if item.tool == WORKING_SET:
                continue  # derived from earlier sources, which keep their own lines
            entry = self.chain.add(item.turn, _role_label(item), self._line(item), item.iri)
            added.append(entry)
            self.stats.history.append(entry)
        base = base_of(next((x.iri for x in moved if x.iri), ""))
        rel = functools.partial(relative, base=base)
        live_ids = self._live_ids()
        visible = live_ids | self._segment_ids
        for entry in added:
            visible.update(identifiers(entry.summary))
        new_facts = self.facts.add_lines(self.facts.missing(visible, self.lines), self.lines, rel)
        new_seen = self._see(moved, visible, rel)
        if (self.chain.tokens <= self.chain.budget_tokens
                and self.facts.tokens <= self.facts.budget_tokens):
            # minor compaction: the new lines go in a block of their own after the earlier
            # blocks, which stay byte-identical (and cached)
            parts = [self.chain.render(added, weak=False) if added else "",
                     self.facts.render(new_facts, rel), self.facts.render_seen(new_seen, rel),
                     _render_loaded(loaded)]
            self._segments.append(Message("user", "\n".join(p for p in parts if p)))
            self._segment_ids |= frozenset(identifiers(self._segments[-1].content))
        else:
            # major compaction: evict by score, then one block replaces all earlier ones; the
            # facts that only evicted lines showed come back as fact lines
            focus_text = focus + "\n" + "\n".join(x.message.content[-2000:]
                                                   for x in self.live[-2:])
            self.chain.evict(focus_text)
            visible = set(live_ids)
            for entry in self.chain.entries:
                visible.update(identifiers(entry.summary))
            self.facts.evict()
            self.facts.add_lines(self.facts.missing(visible, self.lines), self.lines, rel)
            self.facts.evict()
            parts = [self.chain.render(), self.facts.render(self.facts.lines, rel),
                     self.facts.render_seen(self.facts.seen, rel), _render_loaded(self._loaded)]
            self._segments = [Message("user", "\n".join(p for p in parts if p))]
            self._segment_ids = frozenset(identifiers(self._segments[0].content))
            self.stats.major_compactions += 1
        self._history_tokens = self.counter.messages(self._segments)
        self.stats.compactions += 1
        floor = self._prefix_tokens + self._history_tokens + sum(x.tokens for x in self.live)
        self._trigger = max(s.high_water * s.target_tokens, floor + self._batch)

    def _see(self, moved: Sequence[_Live], visible: set[str],
             rel: Callable[[str], str]) -> list[SeenIds]:
        """The identifier lists of the tool results leaving the prompt (``FactBook.see``)."""
        hidden = visible | self.facts.shown()
        for listed in self.facts.seen:
            hidden.update(listed.ids)
        out = []
        for item in moved:
            source = self.lines.sources.get(item.iri)
            if item.message.role != "tool" or source is None:
                continue
            ordered = [i for line in source.lines  # in the line's order, the longer first
                       for i in sorted(line.ids, key=lambda i: (line.text.find(i), -len(i), i))]
            entry = self.facts.see(item.iri, ordered, hidden, rel)
            if entry is not None:
                out.append(entry)
                hidden.update(entry.ids)
        return out

    def _line(self, item: _Live) -> str:
        width = self.settings.summaries.line_chars
        if item.summary:
            return clip(item.summary, width)
        m = item.message
        if m.role == "assistant":
            calls = [f"{c.name}({c.arguments_json()[:120]})" for c in m.tool_calls]
            return action_line(item.source, calls, width=self.settings.summaries.line_chars)
        return gist(item.source, salient=self._mentioned,
                    width=self.settings.summaries.line_chars)


def _render_loaded(answers: Sequence[str]) -> str:
    """The tool_search answers a compaction took out of the live messages, whole: the schemas of
    the tools the session loaded, which call_tool still calls."""
    if not answers:
        return ""
    return "\n".join(["[Tools you loaded with tool_search (call them with call_tool):]",
                      *answers])


def _role_label(item: _Live) -> str:
    if item.message.role == "tool":
        return f"tool {item.tool}" if item.tool else "tool"
    return item.message.role
