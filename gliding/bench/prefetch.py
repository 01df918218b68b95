"""``gliding bench prefetch``: how well the prefetch predictor warms what the next step needs.

Every record is replayed through the real context engine (shipped defaults, a real L0 archive,
as ``gliding bench context`` does). Before each model call:

- *candidates* are the earlier archived results and compacted turns (L1 entries) whose full
  text the prompt does not hold (a result that is routed to its summary counts; one still in
  the prompt whole does not: warming it would add nothing);
- *needed* are the candidates whose full text holds an identifier the next action uses, with
  identifiers as in fact recall (first seen in a tool output, not in a system or user step);
- *warmed* are the candidates a method picks, at most N of them (N = the engine's
  ``prefetch.max_sources``): ``none`` picks nothing, ``lru`` the N most recent candidates,
  ``gliding`` the sources of the predictor's working set. The predictor never sees the step
  it predicts for.

Reported per method: ``hit_rate`` = Σ|needed ∩ warmed| / Σ|needed| and ``precision`` =
Σ|needed ∩ warmed| / Σ|warmed|, both summed over calls, and ``read_back_calls``: calls whose
action uses an identifier that the prompt still lacks — a model would have had to call
``read_result`` there. Each method is its own replay: ``none`` and ``lru`` run the engine with
prefetch off, ``lru`` then shows, within the same token budget and lines per source, the first
lines of its sources that hold an identifier the prompt lacks; ``gliding`` runs it on.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gliding.bench.context import Gliding, _facts, exact_counter, load_records, steps_of
from gliding.config.settings import ContextSettings, PrefetchSettings
from gliding.memory.archive.store import Archive

METHODS = ("none", "lru", "gliding")


def run_prefetch_bench(path: Path, *, settings: ContextSettings | None = None,
                       progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay every record of ``path`` once per method; the JSON report."""
    settings = settings or ContextSettings()
    counter = exact_counter(settings.tokenizer)
    records = load_records(path)
    p = settings.prefetch
    on = settings.model_copy(update={"prefetch": p.model_copy(update={"enabled": True})})
    off = settings.model_copy(update={"prefetch": p.model_copy(update={"enabled": False})})
    totals = {m: _zero() for m in METHODS}
    calls = 0
    per_trajectory = []
    with tempfile.TemporaryDirectory(prefix="gliding-bench-") as tmp:
        for i, record in enumerate(records):
            if progress:
                progress(f"[{i + 1}/{len(records)}] {record.get('task_id', i)}")
            row: dict[str, Any] = {"task_id": record.get("task_id"),
                                   "system": record.get("system")}
            for m in METHODS:
                job = f"bench-{i}-{m}"
                with Archive.open(Path(tmp), job) as archive:
                    engine_settings = on if m == "gliding" else off
                    one = _replay(record, Gliding(engine_settings, counter, archive, job), m,
                                  p, counter.count)
                if m == "none":
                    calls += one["calls"]
                for k in totals[m]:
                    totals[m][k] += one[k]
                row[m] = _rates(one)
            per_trajectory.append(row)
    return {"trajectories": len(records), "input": str(path), "calls": calls,
            "n": p.max_sources, "budget_tokens": p.budget_tokens,
            "methods": {m: _rates(totals[m]) for m in METHODS},
            "per_trajectory": per_trajectory}


def _zero() -> dict[str, int]:
    return {"calls": 0, "needed": 0, "warmed": 0, "hits": 0, "read_back_calls": 0}


def _replay(record: dict[str, Any], strategy: Gliding, method: str, p: PrefetchSettings,
            count: Callable[[str], int]) -> dict[str, int]:
    steps = steps_of(record)
    out = _zero()
    seen_user: set[str] = set()
    first_tool: set[str] = set()
    texts: dict[str, str] = {}  # iri -> full text of every earlier source
    order: list[str] = []
    for index, step in enumerate(steps):
        engine = strategy.engine
        if step.role == "assistant" and engine is not None:
            prompt = strategy.prompt()
            out["calls"] += 1
            wanted = [f for f in _facts(step.action) if f in first_tool and f not in seen_user]
            whole = {x.iri for x in engine.live if x.whole}
            candidates = [iri for iri in order if iri not in whole]
            needed = {iri for iri in candidates if any(f in texts[iri] for f in wanted)}
            shown = "\n".join(m.content for m in prompt)
            if method == "gliding":
                warmed = [w.iri for w in engine.warmed]
            elif method == "lru":
                warmed = candidates[-p.max_sources:]
                shown += "\n" + _lru_block(engine, warmed, shown, p, count)
            else:
                warmed = []
            out["needed"] += len(needed)
            out["warmed"] += len(warmed)
            out["hits"] += len(needed & set(warmed))
            if any(f not in shown for f in wanted):
                out["read_back_calls"] += 1
        elif step.role == "assistant":
            strategy.prompt()
        elif step.role in ("system", "user"):
            seen_user.update(_facts(step.text))
        elif step.role == "tool":
            first_tool.update(f for f in _facts(step.text) if f not in seen_user)
        strategy.add(step, index)
        engine = strategy.engine
        if engine is not None and step.role in ("assistant", "tool") and engine.live:
            iri = engine.live[-1].iri
            texts[iri] = step.text
            order.append(iri)
    return out


def _lru_block(engine: Any, warmed: list[str], shown: str, p: PrefetchSettings,
               count: Callable[[str], int]) -> str:
    """What an LRU working set of the same size would show: from each of the most recent
    sources, newest first, its first lines that hold an identifier the prompt lacks."""
    out = []
    used = 0
    for iri in reversed(warmed):
        source = engine.lines.sources.get(iri)
        if source is None:
            continue
        taken = 0
        for line in source.lines:
            if taken >= p.lines_per_source:
                break
            if all(x in shown for x in line.ids):
                continue
            cost = count(line.text) + 4
            if used + cost > p.budget_tokens:
                continue
            out.append(line.text)
            used += cost
            taken += 1
    return "\n".join(out)


def _rates(t: dict[str, int]) -> dict[str, Any]:
    return {"hit_rate": round(t["hits"] / t["needed"], 4) if t["needed"] else 0.0,
            "precision": round(t["hits"] / t["warmed"], 4) if t["warmed"] else 0.0,
            "needed": t["needed"], "warmed": t["warmed"], "hits": t["hits"],
            "read_back_calls": t["read_back_calls"]}
