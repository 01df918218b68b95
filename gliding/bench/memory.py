"""Memory recall benchmark on LoCoMo-format conversations (``scripts/bench_memory.py``).

For every selected conversation, its turns become memory items (one memory session per
LoCoMo session, dated by ``session_N_date_time``; a turn's ``blip_caption`` is appended as
``[image: ...]``). The dataset's ``observation``, ``session_summary`` and ``event_summary``
fields are never read. Then, for every question with a non-empty evidence list, each method
retrieves a context under each token budget (cl100k_base, counted with ``TokenCounter``) and
is scored by evidence recall: |gold dia_ids whose turn is in the context| / |gold dia_ids|,
malformed ids (not ``D<n>:<n>``) ignored, a question left with no valid id skipped.

Methods, all packed by the same greedy packer into the same line format:

- ``recency``: newest turns first;
- ``bm25``: BM25 ranking of the turns;
- ``vector``: cosine ranking with all-MiniLM-L6-v2 (absent when the model cannot load);
- ``gliding``: ``HybridRecall`` with its defaults (fusion, entities, time, speaker,
  importance, neighbouring turns).

Beside evidence recall, *session-level recall@10* (the measure MemPalace publishes for LoCoMo):
each method's ranking of the turns (the whole ranking, no budget; ``gliding``'s is the one its
``recall`` packs) is read down until 10 distinct sessions have appeared, and a question scores
|gold sessions among them| / |gold sessions| (a gold id ``D<n>:<m>`` is in session ``n``).

Output: ``questions``; ``category_questions`` → category → how many questions (n);
``methods`` → name → budget → ``recall`` and ``by_category``; ``session_recall_at_10`` →
name → ``recall`` and ``by_category``;
``retrieval_ms_p50`` / ``retrieval_ms_p99`` of the ``gliding`` method (one ``recall`` call per
question and budget, query embedding included); ``ingest_turns_per_s`` (BM25 + embeddings,
model load excluded and reported as ``model_load_s``).
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gliding.bench.conversation import ingest_conversation, sessions_of
from gliding.bench.stats import percentile
from gliding.context.tokens import TokenCounter
from gliding.errors import UsageError
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.recall.hybrid import RecallSettings
from gliding.memory.recall.knowledge import KnowledgeMemory
from gliding.memory.recall.vectors import Embedder, Precision, load_embedder

DIA_ID = re.compile(r"D(\d+):(\d+)")
METHODS = ("recency", "bm25", "vector", "gliding")


def load_conversations(path: Path) -> list[dict[str, Any]]:
    """The LoCoMo JSON list; anything else is a UsageError."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read LoCoMo file {path}: {exc}") from exc
    if not isinstance(data, list) or not all(
            isinstance(c, dict) and isinstance(c.get("conversation"), dict) for c in data):
        raise UsageError(f"{path}: expected a list of LoCoMo samples with 'conversation'")
    return data


def gold_ids(evidence: object) -> set[str]:
    """Well-formed evidence ids, normalised (``D1:03`` → ``D1:3``); malformed ones dropped."""
    if not isinstance(evidence, list):
        return set()
    out = set()
    for raw in evidence:
        match = DIA_ID.fullmatch(str(raw).strip())
        if match:
            out.add(f"D{int(match.group(1))}:{int(match.group(2))}")
    return out


SESSIONS_AT = 10  # session-level recall@k: k


def top_sessions(rows: list[int], items: Any, label_of: dict[str, str], k: int) -> set[str]:
    """The first ``k`` distinct sessions (``D<n>``) down a ranking of item rows."""
    out: list[str] = []
    for row in rows:
        label = normalised_id(label_of.get(items[row].id, items[row].id))
        session = label.split(":")[0]
        if session not in out:
            out.append(session)
            if len(out) == k:
                break
    return set(out)


def normalised_id(item_id: str) -> str:
    match = DIA_ID.fullmatch(item_id)
    return f"D{int(match.group(1))}:{int(match.group(2))}" if match else item_id


def parse_range(text: str) -> list[int]:
    """``0-2,5`` → [0, 1, 2, 5]."""
    out: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part:
                low, high = part.split("-", 1)
                out.extend(range(int(low), int(high) + 1))
            elif part.strip():
                out.append(int(part))
    except ValueError as exc:
        raise UsageError(f"not a list of numbers or ranges: {text!r}") from exc
    return out


def run_memory_bench(path: str | Path, conversations: list[int], budgets: list[int], *,
                     settings: RecallSettings | None = None,
                     embedder: Embedder | None | bool = True,
                     count: Callable[[str], int] | None = None,
                     precision: Precision = "auto") -> dict[str, Any]:
    """Run every method on the selected conversations; see the module docstring for output.

    ``embedder``: True loads the MiniLM embedder (None if unavailable), False disables
    vectors, or pass an ``Embedder``. Raises UsageError for an unreadable file or an index
    outside the file.
    """
    samples = load_conversations(Path(path))
    for index in conversations:
        if not 0 <= index < len(samples):
            raise UsageError(f"conversation {index} is not in {path} ({len(samples)} samples)")
    counter = count or TokenCounter().count
    load_started = time.perf_counter()
    if embedder is True:
        model: Embedder | None = load_embedder(precision=precision)
    elif embedder is False:
        model = None
    else:
        model = embedder
    model_load_s = time.perf_counter() - load_started
    methods = [m for m in METHODS if m != "vector" or model is not None]

    hits: dict[str, dict[int, list[float]]] = {m: defaultdict(list) for m in methods}
    sessions: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in methods}
    by_cat: dict[str, dict[int, dict[str, list[float]]]] = {
        m: defaultdict(lambda: defaultdict(list)) for m in methods}
    latencies: list[float] = []
    ingest_turns, ingest_s = 0, 0.0
    questions = 0
    workdir = Path(tempfile.mkdtemp(prefix="gliding-bench-memory-"))
    per_conversation: list[dict[str, Any]] = []
    try:
        for index in conversations:
            sample = samples[index]
            job = f"locomo-{index}"
            started = time.perf_counter()
            with Archive.open(workdir, job) as archive, \
                    OxigraphBlackboard.open(workdir / f"blackboard-{index}") as store:
                knowledge = KnowledgeMemory(store, counter, embedder=model,
                                            settings=settings or RecallSettings(),
                                            graph=f"gliding://job/{job}")
                ingest = ingest_conversation(store, archive, job,
                                             sessions_of(sample["conversation"]),
                                             knowledge.observe)
                knowledge.flush()
                ingest_s += time.perf_counter() - started
                turns = len(ingest.turn_iris)
                ingest_turns += turns
                label_of = {iri: turn for turn, iri in ingest.turn_iris.items()}
                before = {m: {b: len(hits[m][b]) for b in budgets} for m in methods}
                scored = _score_conversation(sample, knowledge, label_of, budgets, methods,
                                             hits, by_cat, latencies, sessions)
                questions += scored
                per_conversation.append({
                    "conversation": index, "questions": scored, "turns": turns,
                    "triples": store.count(),
                    "recall": {m: {str(b): round(statistics.fmean(hits[m][b][before[m][b]:]), 4)
                                   for b in budgets} for m in methods} if scored else {}})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def mean(values: list[float]) -> float:
        return round(statistics.fmean(values), 4) if values else 0.0

    first = methods[0]
    return {
        "questions": questions,
        "category_questions": {cat: len(v) for cat, v in
                               sorted(by_cat[first][budgets[0]].items())},
        "conversations": conversations,
        "turns": ingest_turns,
        "methods": {
            method: {
                str(budget): {
                    "recall": mean(hits[method][budget]),
                    "by_category": {cat: mean(v) for cat, v in
                                    sorted(by_cat[method][budget].items())},
                } for budget in budgets
            } for method in methods
        },
        "session_recall_at_10": {
            method: {"recall": mean([x for v in sessions[method].values() for x in v]),
                     "by_category": {cat: mean(v) for cat, v in sorted(sessions[method].items())}}
            for method in methods},
        "per_conversation": per_conversation,
        "vector_available": model is not None,
        "retrieval_ms_p50": round(percentile(latencies, 50), 2),
        "retrieval_ms_p99": round(percentile(latencies, 99), 2),
        "ingest_turns_per_s": round(ingest_turns / ingest_s, 1) if ingest_s else 0.0,
        "model_load_s": round(model_load_s, 2),
        "precision": getattr(model, "precision", None),
    }


def _score_conversation(sample: dict[str, Any], knowledge: KnowledgeMemory,
                        label_of: dict[str, str], budgets: list[int], methods: list[str],
                        hits: dict[str, dict[int, list[float]]],
                        by_cat: dict[str, dict[int, dict[str, list[float]]]],
                        latencies: list[float], sessions: dict[str, dict[str, list[float]]]
                        ) -> int:
    """Score every method on one ingested conversation's questions; returns how many."""
    memory = knowledge.index
    recency = memory.recency()
    questions = 0
    for qa in sample.get("qa", []):
        gold = gold_ids(qa.get("evidence"))
        question = str(qa.get("question", ""))
        if not gold or not question:
            continue
        questions += 1
        category = str(qa.get("category", "?"))
        rankings: dict[str, list[int]] = {"recency": recency,
                                          "bm25": memory.rank(memory.lexical_scores(question))}
        vector = memory.vector_scores(question)
        if vector is not None:
            rankings["vector"] = [int(i) for i in np.argsort(-vector, kind="stable")]
        rankings["gliding"] = memory.rank(memory.scores(question))  # what its recall packs
        gold_sessions = {g.split(":")[0] for g in gold}
        for method in methods:
            top = top_sessions(rankings[method], memory.items, label_of, SESSIONS_AT)
            sessions[method][category].append(len(gold_sessions & top) / len(gold_sessions))
        for budget in budgets:
            for method in methods:
                if method == "gliding":
                    started = time.perf_counter()
                    packed = knowledge.recall(question, budget)
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    packed = memory.pack_rows(rankings[method], budget)
                found = {normalised_id(label_of.get(i, i)) for i in packed.ids}
                score = len(gold & found) / len(gold)
                hits[method][budget].append(score)
                by_cat[method][budget][category].append(score)
    return questions
