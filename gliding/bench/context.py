"""``gliding bench context``: replay real agent trajectories through four context strategies.

For every record (one JSON object a line: ``steps`` of system / user / assistant / tool), the
prompt each strategy would send before every assistant step is built, then the assistant
step's own content stands in for the model's reply. Strategies:

- ``naive``: append everything;
- ``obs_mask``: the 10 newest tool outputs verbatim, older ones replaced by a placeholder;
- ``compact_recent``: the 32 newest tool outputs verbatim, older ones replaced by a short
  notice, no archive;
- ``gliding``: the real context engine with the shipped defaults, a real L0 archive and real
  L1 summaries.

Metrics per strategy (totals and per trajectory): ``total_prompt_tokens`` and
``peak_prompt_tokens`` (cl100k_base + 4 per message); ``cached_cost``: input tokens weighted
as Anthropic bills them (cache read 0.1×, cache write 1.25×, uncached 1×), from the prompt-cache
simulator (``cache_sim``) on the Messages API body of every call — gliding with the cache
marks its engine sets, the other strategies with one mark on their last message — for
``cache_model`` (claude-3-5-haiku: 2,048 tokens at least, 5-minute TTL, calls
``CALL_INTERVAL_S`` apart; a record's own cache), with ``cache_read_share`` beside it and
``openai_read_share`` (the same prompts under OpenAI's automatic prefix cache);
``fact_recall`` (identifiers of each action that first appeared in an earlier tool output and
in no system or user step, present verbatim in that step's prompt); ``recoverability`` (tool
outputs that read back byte-exact through their IRI; a strategy without an archive counts an
output as recoverable when it is still verbatim in the last prompt); ``assembly_ms_p50/p99``
(the strategy's work per call, archive writes excluded: those are reported as
``archive_ms_p50``); ``post_compaction_rereads`` (recorded calls repeating an earlier call whose
result the strategy's prompt no longer held whole, ``Rereads``).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gliding.bench.cache import (
    ANTHROPIC_MODEL,
    CALL_INTERVAL_S,
    anthropic_body,
    cache_meta,
    encoder,
    openai_body,
)
from gliding.bench.cache_sim import (
    AnthropicCache,
    AnthropicParams,
    Encode,
    OpenAICache,
    anthropic_min_tokens,
)
from gliding.bench.stats import percentile
from gliding.config.settings import ContextSettings
from gliding.context.engine import ContextEngine
from gliding.context.tokens import MESSAGE_OVERHEAD, TokenCounter
from gliding.core.iri import result_iri, turn_iri
from gliding.core.messages import Message
from gliding.errors import UsageError
from gliding.memory.archive.store import Archive

FACT = re.compile(r"[A-Za-z0-9_./-]*[/_.][A-Za-z0-9_./-]*[A-Za-z0-9]|\b\d{3,}\b")
STRATEGIES = ("naive", "obs_mask", "compact_recent", "gliding")
MASK_KEEP = 10
COMPACT_KEEP = 32


@dataclass(frozen=True)
class Step:
    role: str
    text: str  # what a prompt carries for this step
    action: str  # for assistant steps: tool_input, else content
    tool: str | None


def exact_counter(encoding: str) -> TokenCounter:
    """A counter with the real tokenizer; benchmarks refuse the 4-characters fallback."""
    counter = TokenCounter(encoding)
    if not counter.exact:
        raise UsageError(f"the {encoding} tokenizer is not available",
                         hint="install tiktoken (scripts/setup.sh does)")
    return counter


def load_records(path: Path) -> list[dict[str, Any]]:
    """The JSON-lines file; a malformed line is a UsageError naming its number."""
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read trajectories {path}: {exc}") from exc
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record.get("steps"), list):
                raise ValueError("no 'steps' list")
        except (ValueError, AttributeError) as exc:
            raise UsageError(f"{path}:{n}: not a trajectory record: {exc}") from exc
        records.append(record)
    if not records:
        raise UsageError(f"{path}: no trajectory records")
    return records


def steps_of(record: dict[str, Any]) -> list[Step]:
    out = []
    for raw in record["steps"]:
        content = _text(raw.get("content"))
        role = raw.get("role")
        if role == "assistant":
            tool_input = _text(raw.get("tool_input")) if raw.get("tool_input") else ""
            text = content if not tool_input or tool_input in content else (
                content + "\n" + tool_input)
            out.append(Step("assistant", text, tool_input or content, raw.get("tool_name")))
        elif role in ("system", "user", "tool"):
            out.append(Step(role, content, "", raw.get("tool_name")))
    return out


# ---- strategies ------------------------------------------------------------------------------
class Strategy:
    name = "base"

    def add(self, step: Step, index: int) -> None:
        raise NotImplementedError

    def prompt(self) -> list[Message]:
        raise NotImplementedError


class Naive(Strategy):
    name = "naive"

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def add(self, step: Step, index: int) -> None:
        self.messages.append(_message(step))

    def prompt(self) -> list[Message]:
        return list(self.messages)


class Masked(Strategy):
    """Keep the ``keep`` newest tool outputs; older ones become ``notice``."""

    def __init__(self, name: str, keep: int, notice: str) -> None:
        self.name = name
        self.keep = keep
        self.notice = notice
        self.messages: list[Message] = []
        self.tool_positions: list[int] = []

    def add(self, step: Step, index: int) -> None:
        if step.role == "tool":
            self.tool_positions.append(len(self.messages))
            if len(self.tool_positions) > self.keep:
                old = self.tool_positions[-self.keep - 1]
                self.messages[old] = Message("tool", self.notice, name=self.messages[old].name)
        self.messages.append(_message(step))

    def prompt(self) -> list[Message]:
        return list(self.messages)


class Gliding(Strategy):
    name = "gliding"

    def __init__(self, settings: ContextSettings, counter: TokenCounter, archive: Archive,
                 job: str) -> None:
        self.settings = settings
        self.counter = counter
        self.archive = archive
        self.job = job
        self.prefix: list[Message] = []
        self.engine: ContextEngine | None = None
        self.iris: list[tuple[str, str]] = []  # (iri, original output)
        self.archive_s: list[float] = []

    def add(self, step: Step, index: int) -> None:
        message = _message(step)
        if self.engine is None and step.role in ("system", "user") and (
                step.role == "system" or not any(m.role == "user" for m in self.prefix)):
            self.prefix.append(message)
            return
        if self.engine is None:
            self.engine = ContextEngine(self.settings, self.counter, self.prefix)
        if step.role == "tool":
            iri = str(result_iri(self.job, f"s{index}"))
            started = time.perf_counter()
            self.archive.put(iri, step.text, kind="result", meta={"tool": step.tool})
            self.archive_s.append(time.perf_counter() - started)
            self.iris.append((iri, step.text))
        else:
            iri = str(turn_iri(self.job, step.role, index))
        self.engine.add(message, iri=iri, tool=step.tool)

    def prompt(self) -> list[Message]:
        if self.engine is None:
            return list(self.prefix)
        return self.engine.prompt()


# ---- the replay ------------------------------------------------------------------------------
@dataclass
class Tally:
    calls: int = 0
    total: int = 0
    peak: int = 0
    cached_cost: float = 0.0
    input_tokens: int = 0  # the simulator's count (cl100k_base on each block's rendering)
    cache_read: int = 0
    openai_input: int = 0
    openai_read: int = 0
    facts: int = 0
    facts_found: int = 0
    outputs: int = 0
    recovered: int = 0
    assembly_ms: list[float] = field(default_factory=list)
    per_step: list[int] = field(default_factory=list)
    compactions: int = 0
    major_compactions: int = 0
    working_set_tokens: int = 0
    max_compactions_per_call: int = 0
    rereads: int = 0  # post-compaction re-reads (``Rereads``)

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "total_prompt_tokens": self.total,
                "peak_prompt_tokens": self.peak, "cached_cost": round(self.cached_cost, 1),
                "cache_read_share": _ratio(self.cache_read, self.input_tokens),
                "openai_read_share": _ratio(self.openai_read, self.openai_input),
                "fact_recall": _ratio(self.facts_found, self.facts), "facts": self.facts,
                "recoverability": _ratio(self.recovered, self.outputs),
                "compactions": self.compactions, "major_compactions": self.major_compactions,
                "working_set_tokens": self.working_set_tokens,
                "post_compaction_rereads": self.rereads}


@dataclass
class CacheModel:
    """The providers' prompt caches one replay is billed by (see the module)."""

    encode: Encode
    model: str = ANTHROPIC_MODEL
    interval_s: float = CALL_INTERVAL_S

    def bill(self, tally: Tally, strategy: Strategy, prompt: list[Message],
             caches: tuple[AnthropicCache, OpenAICache]) -> None:
        engine = getattr(strategy, "engine", None)
        marks = (cache_meta(engine, prompt, False)["cache_breakpoints"]
                 if isinstance(strategy, Gliding) and engine is not None else [len(prompt) - 1])
        t = tally.calls * self.interval_s
        got = caches[0].feed(anthropic_body(prompt, (), self.model, marks), t)
        tally.cached_cost += 0.1 * got.cache_read + 1.25 * got.cache_write + got.uncached
        tally.input_tokens += got.input_tokens
        tally.cache_read += got.cache_read
        seen = caches[1].feed(openai_body(prompt, (), "openai/gpt-4o-mini"), t)
        tally.openai_input += seen.input_tokens
        tally.openai_read += seen.cache_read

    def caches(self) -> tuple[AnthropicCache, OpenAICache]:
        params = AnthropicParams(min_tokens=anthropic_min_tokens(self.model))
        return AnthropicCache(self.encode, params), OpenAICache(self.encode)


def replay(record: dict[str, Any], make: Callable[[], Strategy], counter: TokenCounter,
           dump: Path | None = None, cache: CacheModel | None = None) -> tuple[Tally, Strategy]:
    steps = steps_of(record)
    strategy = make()
    tally = Tally()
    caches = cache.caches() if cache is not None else None
    seen_user: set[str] = set()
    first_tool: set[str] = set()
    pending = 0.0
    rereads = Rereads()
    prompt: list[Message] = []
    for index, step in enumerate(steps):
        if step.role == "assistant":
            before = _compactions(strategy)
            started = time.perf_counter()
            prompt = strategy.prompt()
            tally.assembly_ms.append((pending + time.perf_counter() - started) * 1000)
            tally.max_compactions_per_call = max(tally.max_compactions_per_call,
                                                 _compactions(strategy) - before)
            pending = 0.0
            tokens = [counter.count(m.content) + MESSAGE_OVERHEAD for m in prompt]
            size = sum(tokens)
            if dump is not None:
                _dump(dump, tally.calls + 1, prompt, tokens, step.action)
            if cache is not None and caches is not None:
                cache.bill(tally, strategy, prompt, caches)
            tally.calls += 1
            tally.total += size
            tally.peak = max(tally.peak, size)
            tally.per_step.append(size)
            wanted = [f for f in _facts(step.action) if f in first_tool and f not in seen_user]
            if wanted:
                text = "\n".join(m.content for m in prompt)
                tally.facts += len(wanted)
                tally.facts_found += sum(1 for f in wanted if f in text)
        elif step.role in ("system", "user"):
            seen_user.update(_facts(step.text))
        elif step.role == "tool":
            first_tool.update(f for f in _facts(step.text) if f not in seen_user)
        rereads.see(step, prompt, tally)
        started = time.perf_counter()
        strategy.add(step, index)
        elapsed = time.perf_counter() - started
        if isinstance(strategy, Gliding) and step.role == "tool":
            elapsed -= strategy.archive_s[-1]
        pending += elapsed
    if isinstance(strategy, Gliding) and strategy.engine is not None:
        stats = strategy.engine.stats
        tally.compactions = stats.compactions
        tally.major_compactions = stats.major_compactions
        tally.working_set_tokens = stats.working_set_tokens
    return tally, strategy


@dataclass
class Rereads:
    """Post-compaction re-reads of one replay: recorded calls that repeat an earlier call (same
    tool, same arguments as canonical JSON) whose result the prompt built for the call no longer
    held whole in any message (compacted, masked, routed or cut). The latest earlier result of
    the call counts."""

    results: dict[str, str] = field(default_factory=dict)  # call -> its latest result
    call: str = ""  # the call the next tool step answers

    def see(self, step: Step, prompt: list[Message], tally: Tally) -> None:
        """Take ``step``; an assistant step's ``prompt`` is the one built for it."""
        if step.role == "assistant":
            self.call = _call_key(step) if step.tool else ""
            earlier = self.results.get(self.call) if self.call else None
            if earlier is not None and not any(earlier in m.content for m in prompt):
                tally.rereads += 1
        elif step.role == "tool" and self.call:
            self.results[self.call] = step.text
            self.call = ""


def _call_key(step: Step) -> str:
    try:
        arguments = json.dumps(json.loads(step.action), sort_keys=True, ensure_ascii=False)
    except ValueError:
        arguments = step.action
    return f"{step.tool}\n{arguments}"


def _compactions(strategy: Strategy) -> int:
    engine = getattr(strategy, "engine", None)
    return engine.stats.compactions if engine is not None else 0


def run_bench(path: Path, *, settings: ContextSettings | None = None,
              progress: Callable[[str], None] | None = None,
              dump_prompts: Path | None = None,
              cache_model: str = ANTHROPIC_MODEL) -> dict[str, Any]:
    """Replay every record of ``path`` through the four strategies; the JSON report. With
    ``dump_prompts``, every prompt the gliding strategy built is written there as text.
    ``cache_model``: the Anthropic model whose prompt cache bills ``cached_cost``."""
    settings = settings or ContextSettings()
    counter = exact_counter(settings.tokenizer)
    cache = CacheModel(encoder(settings.tokenizer), cache_model)
    records = load_records(path)
    out: dict[str, Any] = {"trajectories": len(records), "input": str(path),
                           "settings": settings.model_dump(), "strategies": {},
                           "cached_cost": {
                               "simulator": "gliding/bench/cache_sim.py",
                               "model": cache_model, "tokenizer": settings.tokenizer,
                               "min_tokens": anthropic_min_tokens(cache_model),
                               "ttl_s": 300, "call_interval_s": cache.interval_s,
                               "weights": {"cache_read": 0.1, "cache_write": 1.25,
                                           "uncached": 1.0},
                               "marks": "gliding: its engine's; others: the last message",
                               "openai_read_share": "openai/gpt-4o-mini, no marks"}}
    per: dict[str, list[Tally]] = {name: [] for name in STRATEGIES}
    archive_ms: list[float] = []
    plot: dict[str, list[int]] = {}
    plot_index = max(range(len(records)), key=lambda i: len(records[i]["steps"]))
    with tempfile.TemporaryDirectory(prefix="gliding-bench-") as tmp:
        for i, record in enumerate(records):
            label = str(record.get("task_id", i))
            if progress:
                progress(f"[{i + 1}/{len(records)}] {label}")
            job = f"bench-{i}"
            with Archive.open(Path(tmp), job) as archive:
                makers: dict[str, Callable[[], Strategy]] = {
                    "naive": Naive,
                    "obs_mask": lambda: Masked("obs_mask", MASK_KEEP,
                                               "[Old tool output omitted.]"),
                    "compact_recent": lambda: Masked("compact_recent", COMPACT_KEEP,
                                                     "[Tool output removed by compaction.]"),
                    "gliding": functools.partial(Gliding, settings, counter, archive, job),
                }
                for name, make in makers.items():
                    folder = (dump_prompts / f"{i:03d}-{_safe(label)}"
                              if dump_prompts is not None and name == "gliding" else None)
                    tally, strategy = replay(record, make, counter, dump=folder, cache=cache)
                    _recoverability(tally, strategy, record)
                    per[name].append(tally)
                    if isinstance(strategy, Gliding):
                        archive_ms += [s * 1000 for s in strategy.archive_s]
                    if i == plot_index:
                        plot[name] = tally.per_step
    systems = [str(r.get("system") or "unknown") for r in records]
    for name, tallies in per.items():
        entry = _aggregate(tallies, per["naive"])
        entry["per_trajectory"] = [
            {"task_id": records[i].get("task_id"), "system": systems[i], **t.as_dict()}
            for i, t in enumerate(tallies)]
        entry["by_source"] = {
            system: _aggregate([t for t, s in zip(tallies, systems, strict=True) if s == system],
                               [t for t, s in zip(per["naive"], systems, strict=True)
                                if s == system])
            for system in sorted(set(systems))}
        out["strategies"][name] = entry
    out["strategies"]["gliding"]["archive_ms_p50"] = round(percentile(archive_ms, 50), 3)
    out["plot"] = {"task_id": records[plot_index].get("task_id"), "prompt_tokens": plot}
    return out


def _aggregate(tallies: list[Tally], naive: list[Tally]) -> dict[str, Any]:
    """The figures of a set of replays, and their savings against the same records' naive."""
    all_ms = [ms for t in tallies for ms in t.assembly_ms]
    calls = sum(t.calls for t in tallies)
    total = sum(t.total for t in tallies)
    cost = sum(t.cached_cost for t in tallies)
    return {
        "trajectories": len(tallies),
        "calls": calls,
        "total_prompt_tokens": total,
        "peak_prompt_tokens": max(t.peak for t in tallies),
        "cached_cost": round(cost, 1),
        "cache_read_share": _ratio(sum(t.cache_read for t in tallies),
                                   sum(t.input_tokens for t in tallies)),
        "openai_read_share": _ratio(sum(t.openai_read for t in tallies),
                                    sum(t.openai_input for t in tallies)),
        "fact_recall": _ratio(sum(t.facts_found for t in tallies), sum(t.facts for t in tallies)),
        "facts": sum(t.facts for t in tallies),
        "recoverability": _ratio(sum(t.recovered for t in tallies),
                                 sum(t.outputs for t in tallies)),
        "assembly_ms_p50": round(percentile(all_ms, 50), 3),
        "assembly_ms_p99": round(percentile(all_ms, 99), 3),
        "compactions": sum(t.compactions for t in tallies),
        "major_compactions": sum(t.major_compactions for t in tallies),
        "compactions_per_call": round(sum(t.compactions for t in tallies) / calls, 4)
        if calls else 0.0,
        "max_compactions_per_call": max(t.max_compactions_per_call for t in tallies),
        "working_set_tokens": sum(t.working_set_tokens for t in tallies),
        "post_compaction_rereads": sum(t.rereads for t in tallies),
        "vs_naive": {
            "total_prompt_tokens": _saving(total, sum(t.total for t in naive)),
            "cached_cost": _saving(cost, sum(t.cached_cost for t in naive)),
        },
    }


PLOTS_MISSING = "matplotlib is needed for the plot: install gliding[plots]"


def check_plots() -> None:
    """Refuse a plot before the benchmark runs, not after, when matplotlib is not installed.

    Raises:
        UsageError: naming the ``plots`` extra.
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(PLOTS_MISSING, hint="pip install 'gliding[plots]'")


def plot_png(result: dict[str, Any], path: Path) -> None:
    """Prompt tokens per step of one trajectory for every strategy.

    Raises:
        UsageError: matplotlib is not installed (the ``plots`` extra).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError(PLOTS_MISSING, hint="pip install 'gliding[plots]'") from exc
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, series in result["plot"]["prompt_tokens"].items():
        ax.plot(range(1, len(series) + 1), series, label=name, linewidth=1.6)
    ax.set_xlabel("assistant step")
    ax.set_ylabel("prompt tokens (cl100k_base)")
    ax.set_title(f"Prompt size per step: {result['plot']['task_id']}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- helpers ---------------------------------------------------------------------------------
def _recoverability(tally: Tally, strategy: Strategy, record: dict[str, Any]) -> None:
    outputs = [s.text for s in steps_of(record) if s.role == "tool"]
    tally.outputs = len(outputs)
    if isinstance(strategy, Gliding):
        tally.recovered = sum(1 for iri, text in strategy.iris
                              if strategy.archive.get(iri).content == text.encode("utf-8"))
        return
    last = {m.content for m in strategy.prompt()}
    tally.recovered = sum(1 for text in outputs if text in last)


def _dump(folder: Path, call: int, prompt: list[Message], tokens: list[int],
          action: str) -> None:
    """One prompt as a person reads it: each message with its role and tokens, then the
    action the trajectory took next."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        parts = [f"=== {m.role}{' ' + m.name if m.name else ''} ({t} tokens)\n{m.content}"
                 for m, t in zip(prompt, tokens, strict=True)]
        parts.append(f"=== next action (not in the prompt)\n{action}")
        (folder / f"call-{call:03d}.txt").write_text("\n\n".join(parts) + "\n",
                                                     encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write prompts under {folder}: {exc}") from exc


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:60] or "record"


def _message(step: Step) -> Message:
    if step.role == "tool":
        return Message("tool", step.text, name=step.tool)
    return Message(step.role, step.text)  # type: ignore[arg-type]


def _facts(text: str) -> list[str]:
    return list(dict.fromkeys(m for m in FACT.findall(text) if len(m) >= 4))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _ratio(a: int, b: int) -> float:
    return round(a / b, 4) if b else 1.0


def _saving(value: float, base: float) -> float:
    return round(1 - value / base, 4) if base else 0.0

