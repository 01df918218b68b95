"""``gliding bench prefetch``: the gaps the context engine leaves, and how well the prefetch
predictor fills them.

Every record is replayed through the real context engine (shipped defaults, a real L0 archive,
as ``gliding bench context`` does). At each model call (once the engine has started: the
first call of a record has nothing to miss):

- the *identifiers* checked are those of fact recall (``FACT_DEFINITION``): the ones the next
  action uses that a tool result showed first and no system or user step did;
- *missing* are those the assembled prompt's text lacks; a *gap* is a call with one;
- *needed* are the earlier sources (archived results and turns) whose full text holds a
  missing identifier; *read-backs* are the fewest of them that hold every missing identifier
  (newest first on a tie): the ``read_result`` calls a model would make there.

On gap calls the predictor's ranking (``Predictor.ranking``: the earlier sources that hold an
identifier the prompt does not show, best first; it never sees the step it predicts for) is
*top-k accurate* (k = 1, 3) when its first k include a needed source, against a *recency*
baseline: the k newest archived results the prompt does not hold whole. A share with nothing to
count (top-k where no call has a gap) is null.

Methods of warming, before each call: at most N sources (N = ``prefetch.max_sources``);
``none`` warms nothing, ``lru`` the N newest sources not whole in the prompt, ``gliding`` the
predictor's. ``hit_rate`` = Σ|needed ∩ warmed| / Σ|needed|, ``precision`` = Σ|needed ∩ warmed|
/ Σ|warmed|, ``read_back_calls`` = calls still missing an identifier after the method's block
(``lru`` shows, within the same block budget and lines a source, the first lines of its sources
that hold an identifier the prompt lacks). Needed counts against the prompt before any block.

The working set: the engine's block at ``budget`` tokens, against the same replay without it
(gap rate, ``hit_rate``: the missing identifiers it shows, the tokens it adds and what that
comes to per gap call it closes — a read-back costs one more call, about one prompt) and
against a recency block of the same budget (the 3 newest results' lines). ``prefix_kept``:
calls whose messages before the block are those of the replay without it, with no cache mark
on the block.

Three replays a record: prefetch off (``none``, ``lru``), on as configured (``gliding`` and the
gaps), on with the block at ``budget``.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from gliding.bench.context import Gliding, _facts, exact_counter, load_records, steps_of
from gliding.config.settings import ContextSettings, PrefetchSettings
from gliding.context.engine import WORKING_SET, ContextEngine
from gliding.core.messages import Message
from gliding.memory.archive.store import Archive

METHODS = ("none", "lru", "gliding")
WORKING_SET_BUDGET = 200  # tokens of the working-set block measured, unless told
RECENT_RESULTS = 3  # sources the recency block quotes
FACT_DEFINITION = (
    "an identifier is a path, a name with '/', '_' or '.' in it, or a number of 3+ digits "
    "(gliding.bench.context.FACT, 4+ characters) that the next action uses, shown first by a "
    "tool result and by no system or user step: fact recall's definition")


@dataclass
class Call:
    """One model call of a replay, before its step is added."""

    prompt: list[Message]  # as assembled, the working-set block (if any) last
    block: Message | None
    wanted: list[str]  # the identifiers checked
    texts: dict[str, str]  # IRI -> full text of every earlier source, oldest first
    results: list[str]  # IRIs of the earlier tool results, oldest first
    engine: ContextEngine

    @property
    def base(self) -> list[Message]:
        """The prompt without the working-set block."""
        return self.prompt[:-1] if self.block is not None else self.prompt


@dataclass
class Counts:
    """Integer counters (a subclass's fields) that add up field by field."""

    def add(self, other: Counts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class Gaps(Counts):
    """Gap and ranking counts of a set of calls."""

    records: int = 0
    calls: int = 0
    identifiers: int = 0
    missing: int = 0
    gap_calls: int = 0
    needed: int = 0
    read_backs: int = 0
    top1: int = 0
    top3: int = 0
    recency1: int = 0
    recency3: int = 0
    ws_calls: int = 0  # working-set replay: calls
    ws_gap_calls_without: int = 0
    ws_gap_calls: int = 0
    ws_missing_without: int = 0
    ws_filled: int = 0  # missing identifiers the block shows
    ws_recency_filled: int = 0  # ... that the recency block of the same budget shows
    ws_tokens: int = 0
    ws_blocks: int = 0
    ws_prompt_tokens: int = 0
    ws_prefix_kept: int = 0
    ws_recency_tokens: int = 0

    def report(self, budget: int) -> dict[str, Any]:
        g = self.gap_calls
        closed = self.ws_gap_calls_without - self.ws_gap_calls
        return {
            "records": self.records, "calls": self.calls,
            "identifiers_checked": self.identifiers, "identifiers_missing": self.missing,
            "gap_calls": g, "gap_rate": _share(g, self.calls),
            "read_backs": {"calls": g, "sources": self.read_backs,
                           "needed_sources": self.needed},
            "prefetch": {"top1": _share(self.top1, g), "top3": _share(self.top3, g)},
            "recency": {"top1": _share(self.recency1, g), "top3": _share(self.recency3, g)},
            "working_set": {
                "budget_tokens": budget, "calls": self.ws_calls,
                "gap_rate_without": _share(self.ws_gap_calls_without, self.ws_calls),
                "gap_rate": _share(self.ws_gap_calls, self.ws_calls),
                "hit_rate": _share(self.ws_filled, self.ws_missing_without),
                "recency_hit_rate": _share(self.ws_recency_filled, self.ws_missing_without),
                "tokens": self.ws_tokens, "recency_tokens": self.ws_recency_tokens,
                "blocks": self.ws_blocks,
                "token_share": _share(self.ws_tokens, self.ws_prompt_tokens),
                "prompt_tokens_per_call": _share(self.ws_prompt_tokens, self.ws_calls),
                "gap_calls_closed": closed,
                "tokens_per_closed_gap": round(self.ws_tokens / closed) if closed else None,
                "prefix_kept": _share(self.ws_prefix_kept, self.ws_calls)},
        }


@dataclass
class Warming(Counts):
    """One method's warming counts."""

    calls: int = 0
    needed: int = 0
    warmed: int = 0
    hits: int = 0
    read_back_calls: int = 0

    def report(self) -> dict[str, Any]:
        return {"hit_rate": _share(self.hits, self.needed) or 0.0,
                "precision": _share(self.hits, self.warmed) or 0.0,
                "needed": self.needed, "warmed": self.warmed, "hits": self.hits,
                "read_back_calls": self.read_back_calls}


def run_prefetch_bench(path: Path, *, settings: ContextSettings | None = None,
                       budget: int = WORKING_SET_BUDGET,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay every record of ``path`` (see the module); the JSON report. ``budget``: tokens of
    the working-set block measured."""
    settings = settings or ContextSettings()
    counter = exact_counter(settings.tokenizer)
    records = load_records(path)
    p = settings.prefetch
    passes = {
        "off": settings.model_copy(update={"prefetch": p.model_copy(update={"enabled": False})}),
        "on": settings.model_copy(update={"prefetch": p.model_copy(update={"enabled": True})}),
        "block": settings.model_copy(update={"prefetch": p.model_copy(
            update={"enabled": True, "budget_tokens": budget})}),
    }
    totals = {m: Warming() for m in METHODS}
    per_trajectory = []
    by_system: dict[str, Gaps] = {}
    with tempfile.TemporaryDirectory(prefix="gliding-bench-") as tmp:
        for i, record in enumerate(records):
            if progress:
                progress(f"[{i + 1}/{len(records)}] {record.get('task_id', i)}")
            job = f"bench-{i}"  # one name in every pass: the prompts quote the same IRIs
            with ExitStack() as stack:
                strategies = {
                    name: Gliding(engine_settings, counter,
                                  stack.enter_context(Archive.open(Path(tmp) / name, job)), job)
                    for name, engine_settings in passes.items()}
                warming, gaps = _record(record, strategies, p, counter.count)
            system = str(record.get("system") or "unknown")
            gaps.records = 1
            by_system.setdefault(system, Gaps()).add(gaps)
            row: dict[str, Any] = {"task_id": record.get("task_id"), "system": system}
            for m in METHODS:
                totals[m].add(warming[m])
                row[m] = warming[m].report()
            row["gaps"] = gaps.report(budget)
            per_trajectory.append(row)
    overall = Gaps()
    for gaps in by_system.values():
        overall.add(gaps)
    return {"trajectories": len(records), "input": str(path),
            "calls": totals["none"].calls,
            "n": p.max_sources, "budget_tokens": p.budget_tokens,
            "methods": {m: totals[m].report() for m in METHODS},
            "fact_definition": FACT_DEFINITION, "identifiers_checked": overall.identifiers,
            "gaps": overall.report(budget),
            "by_system": {s: by_system[s].report(budget) for s in sorted(by_system)},
            "per_trajectory": per_trajectory}


def _record(record: dict[str, Any], strategies: dict[str, Gliding], p: PrefetchSettings,
            count: Callable[[str], int]) -> tuple[dict[str, Warming], Gaps]:
    """The three replays of one record."""
    warming = {m: Warming() for m in METHODS}
    gaps = Gaps()
    plain: list[str] = []  # fingerprint of each call's prompt with prefetch off
    for call in _calls(record, strategies["off"]):
        plain.append(_fingerprint(call.prompt))
        _warm(call, "none", warming["none"], p, count)
        _warm(call, "lru", warming["lru"], p, count)
    for call in _calls(record, strategies["on"]):
        _warm(call, "gliding", warming["gliding"], p, count)
        _rank(call, gaps)
    budget = strategies["block"].settings.prefetch.budget_tokens
    for n, call in enumerate(_calls(record, strategies["block"])):
        _working_set(call, gaps, plain[n] if n < len(plain) else "", budget, p, count)
    return warming, gaps


def _calls(record: dict[str, Any], strategy: Gliding) -> Iterator[Call]:
    """Each model call of ``record`` replayed through ``strategy``, before its step is added."""
    seen_user: set[str] = set()
    first_tool: set[str] = set()
    texts: dict[str, str] = {}
    results: list[str] = []
    for index, step in enumerate(steps_of(record)):
        if step.role == "assistant":
            prompt = strategy.prompt()
            engine = strategy.engine
            if engine is not None:
                block = prompt[-1] if engine.live and engine.live[-1].tool == WORKING_SET \
                    else None
                wanted = [f for f in _facts(step.action)
                          if f in first_tool and f not in seen_user]
                yield Call(prompt, block, wanted, texts, results, engine)
        elif step.role in ("system", "user"):
            seen_user.update(_facts(step.text))
        elif step.role == "tool":
            first_tool.update(f for f in _facts(step.text) if f not in seen_user)
        strategy.add(step, index)
        engine = strategy.engine
        if engine is not None and step.role in ("assistant", "tool") and engine.live:
            iri = engine.live[-1].iri
            texts[iri] = step.text
            if step.role == "tool":
                results.append(iri)


def _text(messages: list[Message]) -> str:
    return "\n".join(m.content for m in messages)


def _needed(call: Call, shown: str) -> tuple[list[str], list[str]]:
    """The identifiers ``shown`` lacks, and the sources (oldest first) that hold one."""
    missing = [f for f in call.wanted if f not in shown]
    if not missing:
        return [], []
    return missing, [iri for iri, text in call.texts.items()
                     if any(f in text for f in missing)]


def _warm(call: Call, method: str, out: Warming, p: PrefetchSettings,
          count: Callable[[str], int]) -> None:
    base = _text(call.base)
    _missing, needed = _needed(call, base)
    whole = {x.iri for x in call.engine.live if x.whole}
    if method == "gliding":
        warmed = [w.iri for w in call.engine.warmed]
        shown = _text(call.prompt)
    elif method == "lru":
        warmed = [iri for iri in call.texts if iri not in whole][-p.max_sources:]
        shown = base + "\n" + _recent_block(call.engine, warmed, base, p.budget_tokens,
                                            p.lines_per_source, count)[0]
    else:
        warmed, shown = [], base
    out.calls += 1
    out.needed += len(needed)
    out.warmed += len(warmed)
    out.hits += len(set(needed) & set(warmed))
    if any(f not in shown for f in call.wanted):
        out.read_back_calls += 1


def _rank(call: Call, out: Gaps) -> None:
    """Gap, read-back and top-k counts of one call of the replay with prefetch on."""
    out.calls += 1
    out.identifiers += len(call.wanted)
    missing, needed = _needed(call, _text(call.prompt))
    if not missing:
        return
    out.missing += len(missing)
    out.gap_calls += 1
    out.needed += len(needed)
    out.read_backs += _read_backs(missing, needed, call.texts)
    wanted = set(needed)
    ranked = [iri for iri, _score in call.engine.predictor.ranking]
    whole = {x.iri for x in call.engine.live if x.whole}
    recent = [iri for iri in reversed(call.results) if iri not in whole]
    out.top1 += bool(wanted & set(ranked[:1]))
    out.top3 += bool(wanted & set(ranked[:3]))
    out.recency1 += bool(wanted & set(recent[:1]))
    out.recency3 += bool(wanted & set(recent[:3]))


def _read_backs(missing: list[str], needed: list[str], texts: dict[str, str]) -> int:
    """The fewest sources that hold every missing identifier (greedy, newest first on a tie)."""
    left = set(missing)
    holds = {iri: {f for f in missing if f in texts[iri]} for iri in needed}
    n = 0
    while left:
        best = max(reversed(needed), key=lambda iri: len(holds[iri] & left))
        if not holds[best] & left:
            break
        left -= holds[best]
        n += 1
    return n


def _working_set(call: Call, out: Gaps, plain: str, budget: int, p: PrefetchSettings,
                 count: Callable[[str], int]) -> None:
    """Counts of one call of the replay with the working-set block at ``budget``."""
    base = _text(call.base)
    missing, _needed_sources = _needed(call, base)
    shown = _text(call.prompt)
    out.ws_calls += 1
    out.ws_prompt_tokens += sum(count(m.content) + 4 for m in call.prompt)
    if call.block is not None:
        out.ws_blocks += 1
        out.ws_tokens += count(call.block.content) + 4
    marks = call.engine.breakpoints(call.prompt)
    on_block = call.block is not None and len(call.prompt) - 1 in marks
    if _fingerprint(call.base) == plain and not on_block:
        out.ws_prefix_kept += 1
    whole = {x.iri for x in call.engine.live if x.whole}
    recent = [iri for iri in call.results if iri not in whole][-RECENT_RESULTS:]
    block, tokens = _recent_block(call.engine, recent, base, budget, p.lines_per_source, count)
    out.ws_recency_tokens += tokens + 4 if block else 0
    if not missing:
        return
    out.ws_gap_calls_without += 1
    out.ws_missing_without += len(missing)
    out.ws_gap_calls += any(f not in shown for f in call.wanted)
    out.ws_filled += sum(1 for f in missing if f in shown)
    out.ws_recency_filled += sum(1 for f in missing if f in block)


def _recent_block(engine: ContextEngine, sources: list[str], shown: str, budget: int,
                  lines_per_source: int, count: Callable[[str], int]) -> tuple[str, int]:
    """What a block of ``sources`` would show, newest first: from each, its first lines that
    hold an identifier ``shown`` lacks, within ``budget`` tokens; the text and its tokens."""
    out = []
    used = 0
    for iri in reversed(sources):
        source = engine.lines.sources.get(iri)
        if source is None:
            continue
        taken = 0
        for line in source.lines:
            if taken >= lines_per_source:
                break
            if all(x in shown for x in line.ids):
                continue
            cost = count(line.text) + 4
            if used + cost > budget:
                continue
            out.append(line.text)
            used += cost
            taken += 1
    return "\n".join(out), used


def _fingerprint(messages: list[Message]) -> str:
    digest = hashlib.sha256()
    for m in messages:
        digest.update(f"{m.role}\0{m.name}\0{m.content}\0".encode())
    return digest.hexdigest()


def _share(a: int, b: int) -> float | None:
    """``a / b``; None where there is nothing to count (no gap call, say)."""
    return round(a / b, 4) if b else None


def _cell(value: float | None, width: int, form: str) -> str:
    return f"{'—':>{width}}" if value is None else f"{value:>{width}{form}}"


def table(result: dict[str, Any]) -> str:
    """The report as a person reads it: one row for the file and one per system."""
    ws = result["gaps"]["working_set"]
    lines = [
        f"{result['input']}: {result['trajectories']} records, {result['calls']} calls, "
        f"{result['identifiers_checked']:,} identifiers checked",
        f"identifier: {result['fact_definition']}",
        f"working set: {ws['budget_tokens']} tokens; warming: N = {result['n']}",
        "",
        f"{'system':<42} {'n':>3} {'calls':>5} {'gap':>6} {'read-backs':>10} "
        f"{'top1':>5} {'top3':>5} {'rec1':>5} {'rec3':>5} {'ws gap':>6} {'ws hit':>6} "
        f"{'rec hit':>7} {'ws tok/call':>11}",
    ]
    rows = [("all", result["gaps"]), *result["by_system"].items()]
    for name, g in rows:
        w = g["working_set"]
        per_call = w["tokens"] / w["calls"] if w["calls"] else 0.0
        lines.append(
            f"{name[:42]:<42} {g['records']:>3} {g['calls']:>5} "
            f"{_cell(g['gap_rate'], 6, '.1%')} "
            f"{g['read_backs']['calls']:>4}/{g['read_backs']['sources']:<5} "
            f"{_cell(g['prefetch']['top1'], 5, '.2f')} {_cell(g['prefetch']['top3'], 5, '.2f')} "
            f"{_cell(g['recency']['top1'], 5, '.2f')} {_cell(g['recency']['top3'], 5, '.2f')} "
            f"{_cell(w['gap_rate'], 6, '.1%')} {_cell(w['hit_rate'], 6, '.2f')} "
            f"{_cell(w['recency_hit_rate'], 7, '.2f')} {per_call:>11.1f}")
    lines.append("")
    lines.append(f"{'method':<8} {'hit rate':>8} {'precision':>9} {'needed':>7} {'warmed':>7} "
                 f"{'read-back calls':>15}")
    for name, m in result["methods"].items():
        lines.append(f"{name:<8} {m['hit_rate']:>8.3f} {m['precision']:>9.3f} "
                     f"{m['needed']:>7} {m['warmed']:>7} {m['read_back_calls']:>15}")
    return "\n".join(lines)
