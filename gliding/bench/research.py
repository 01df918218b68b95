"""``gliding bench research``: does a later job get back a line an earlier job read?

Job 1 (ingest), through the production path: one embedded blackboard and knowledge memory in
a temporary data directory (``daemon.runtime.open_blackboard`` / ``open_knowledge``, the
embedder loaded lazily; coherence off). Each trajectory record of the input files is one job
(``research_questions.jobs_of``): its Job node named after its first user step; each tool
result archived as the agent loop archives it (kind ``result``, meta tool, arguments, ok,
role, turn) and handed to ``Ingestor.tool_result`` through a ``JobNodeStore`` that the
knowledge memory listens to. Whatever the ingestor writes reaches recall by itself.

Questions: ``research_questions`` (the rule, fixed, is in that module's docstring and in every
result).

Job 2 (ask): a new job whose graph holds nothing. Its context for a question is what a plan
role's prompt gets of earlier jobs, ``KnowledgeMemory.brief(question,
memory.recall.briefing_tokens // 2, exclude_graphs=[job 2's graph])`` (``Runtime.briefing``),
plus its first recall, ``KnowledgeMemory.recall(question, budget - the briefing's tokens - 1)``
(the 1: the newline that joins them); cl100k tokens. Recalls do not record use (``touch``
off), so no question changes the next one's ranking. Before the first question the memory is
made ready as the first recall would (``KnowledgeMemory.ready``: the embedder loads and every
ingested item is embedded), timed apart as ``first_recall_s``, so every question sees the
same memory.

Baselines, within the same budget and with the same greedy packer (``packing.pack``): every
unit of every result (not only eligible ones) as a line ``[<result IRI>] <unit>``, ranked by
``BM25Index`` over the units (``bm25``; positive scores only) or, when asked for, by cosine
with the embedder job 1 loaded (``vector``; it embeds every unit: about 5 minutes for the
three dev files on two busy cores, against about a minute for the rest). The best
``CANDIDATES`` lines of a ranking are offered to the packer (no 2,048-token context holds
more).

A question is found by a method when its context holds the answer line
(``research_questions.found``). Output: per system and overall (all questions; ``macro``:
the mean of the systems) n, the share found by gliding, bm25 (and vector) and gliding minus
bm25; ``gliding_briefing_alone``: the share the briefing alone holds; the rule, seed, budget,
briefing budget; ingest statistics (jobs, results, bytes, failures, seconds, results/s, KB/s,
board nodes by type, memory items); recall and brief latency p50/p99 (ms) after the first
recall; three sample questions per system with their answer units; every question with its
verdicts (``per_question``).
"""

from __future__ import annotations

import functools
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import structlog

from gliding.bench.context import exact_counter, load_records
from gliding.bench.research_questions import (
    ROLE,
    RULE,
    Job,
    Question,
    Result,
    found,
    jobs_of,
)
from gliding.bench.research_questions import questions as draw_questions
from gliding.bench.stats import percentile, ratio
from gliding.config.settings import Settings
from gliding.core.iri import job_iri
from gliding.daemon.runtime import open_blackboard, open_knowledge
from gliding.errors import GlidingError, UsageError
from gliding.memory.archive.store import Archive
from gliding.memory.board.blackboard import Blackboard, Ref
from gliding.memory.board.nodes import DirectWriter, JobNodeStore
from gliding.memory.board.vocabulary import NS
from gliding.memory.ingest.ingestor import Ingestor
from gliding.memory.recall.knowledge import KnowledgeMemory
from gliding.memory.recall.lexical import BM25Index
from gliding.memory.recall.packing import Count, Packed, pack

log = structlog.get_logger("gliding.bench")

ASK_JOB = "research-ask"  # job 2: nothing is ever written to its graph
CANDIDATES = 2000  # lines of a baseline's ranking offered to the packer
SAMPLES = 3  # sample questions shown per system

Progress = Callable[[str], None]


def run_research_bench(paths: Sequence[Path], *, questions: int = 300, seed: int = 7,
                       budget: int = 2048, vectors: bool = True,
                       vector_baseline: bool = False, settings: Settings | None = None,
                       progress: Progress | None = None) -> dict[str, Any]:
    """Ingest the records of ``paths``, ask the questions, score gliding against the
    baselines; see the module docstring for the output. ``vectors`` False: no embedding
    model (lexical and graph recall). ``vector_baseline``: rank the lines by cosine too (with
    vectors on; it embeds every unit, minutes on the dev files).

    Raises:
        UsageError: a file cannot be read or holds no trajectory records, or no line of it
            can be asked about.
        GlidingError: the blackboard cannot be opened in a temporary directory, or the token
            counter's encoding is missing.
    """
    say = progress or (lambda line: None)
    started = time.perf_counter()
    records = [r for path in paths for r in load_records(Path(path))]
    jobs = jobs_of(records)
    results = [r for job in jobs for r in job.results]
    asked = draw_questions(results, questions, seed)
    if not asked:
        raise UsageError(f"no line of {', '.join(map(str, paths))} can be asked about",
                         hint="the questions need tool results with lines that hold an id or "
                              "a number and words found in at least 3 results")
    counter = exact_counter("cl100k_base")
    base = settings or Settings()
    workdir = Path(tempfile.mkdtemp(prefix="gliding-bench-research-"))
    try:
        setup = _bench_settings(base, workdir, vectors)
        board = open_blackboard(setup)
        if board is None:
            raise GlidingError(f"cannot open a blackboard in {workdir}")
        knowledge = open_knowledge(board, setup, counter.count)
        try:
            ingest = anyio.run(_ingest, jobs, board, knowledge, workdir, say)
            ingest["nodes_by_type"] = _node_types(board)
            ingest["memory_items"] = len(knowledge)
            say(f"ingested {ingest['results']} results in {ingest['seconds']} s; "
                f"asking {len(asked)} questions")
            ready = time.perf_counter()
            knowledge.ready()
            first_recall_s = time.perf_counter() - ready
            loaded = knowledge.index.embedder is not None
            precision = getattr(knowledge.index.embedder, "precision", None)
            lines = LineIndex(results, counter.count)
            encode = _encoder(knowledge) if vector_baseline else None
            if encode is not None:
                say(f"embedding {len(lines.lines)} lines for the vector baseline")
            embed_s = lines.embed(encode) if encode is not None else None
            rows, latency = _ask(asked, knowledge, lines, counter.count, budget,
                                 base.memory.recall.briefing_tokens // 2, say)
        finally:
            knowledge.close()
            board.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    methods = ["gliding", "bm25", *(["vector"] if encode is not None else [])]
    return {
        "inputs": [str(p) for p in paths],
        "rule": RULE,
        "seed": seed,
        "budget": budget,
        "briefing_budget": base.memory.recall.briefing_tokens // 2,
        "vectors": loaded,
        "precision": precision,
        "questions": len(rows),
        "systems": _by_system(rows, methods, asked),
        "overall": _scores(rows, methods),
        "macro": _macro(rows, methods),
        "gliding_briefing_alone": ratio(sum(r["briefing"] for r in rows), len(rows)),
        "context_tokens_max": max(r["tokens"] for r in rows),
        "ingest": ingest,
        "first_recall_s": round(first_recall_s, 2),
        "vector_embed_s": round(embed_s, 2) if embed_s is not None else None,
        **latency,
        "wall_s": round(time.perf_counter() - started, 1),
        "per_question": rows,
    }


def summary_line(result: dict[str, Any]) -> str:
    """One line: questions, systems, each method's share, ingest and recall speed."""
    overall = result["overall"]
    shares = ", ".join(f"{m} {overall[m]:.3f}" for m in ("gliding", "bm25", "vector")
                       if m in overall)
    ingest = result["ingest"]
    return (f"research: {result['questions']} questions over {len(result['systems'])} systems; "
            f"{shares} (gliding - bm25 {overall['gliding_minus_bm25']:+.3f}); ingest "
            f"{ingest['results_per_s']} results/s, {ingest['kb_per_s']} KB/s; recall p50 "
            f"{result['recall_ms_p50']} ms; {result['wall_s']} s")


class LineIndex:
    """The baselines' lines: every unit of every result as ``[<result IRI>] <unit>``, with
    BM25 over the units and, once ``embed`` ran, their unit vectors."""

    def __init__(self, results: Sequence[Result], count: Count) -> None:
        units = [(r.iri, u) for r in results for u in r.units]
        self.lines = [f"[{iri}] {unit}" for iri, unit in units]
        self.texts = [unit for _, unit in units]
        self.count = count
        self.bm25 = BM25Index()
        self.bm25.add([str(n) for n in range(len(units))], self.texts)
        self.vectors: np.ndarray | None = None
        self.encode: Callable[[Sequence[str]], np.ndarray] | None = None

    def embed(self, encode: Callable[[Sequence[str]], np.ndarray]) -> float:
        """Embed every unit; returns the seconds it took."""
        started = time.perf_counter()
        self.encode, self.vectors = encode, encode(self.texts)
        return time.perf_counter() - started

    def bm25_context(self, query: str, budget: int) -> Packed:
        scores = self.bm25.scores(query)
        return self._pack(np.flatnonzero(scores > 0), scores, budget)

    def vector_context(self, query: str, budget: int) -> Packed | None:
        if self.vectors is None or self.encode is None:
            return None
        scores = self.vectors @ self.encode([query])[0]
        return self._pack(np.arange(len(scores)), scores, budget)

    def _pack(self, rows: np.ndarray, scores: np.ndarray, budget: int) -> Packed:
        """The best ``CANDIDATES`` of ``rows`` by score (ties: the earlier line), packed."""
        if len(rows) > CANDIDATES:
            rows = rows[np.argpartition(-scores[rows], CANDIDATES)[:CANDIDATES]]
        rows = rows[np.lexsort((rows, -scores[rows]))]
        return pack(((str(n), self.lines[n]) for n in rows), budget, self.count)


def _bench_settings(base: Settings, data_dir: Path, vectors: bool) -> Settings:
    """``base`` with the temporary data directory, an embedded blackboard and vector index,
    vectors on or off, coherence off."""
    memory = base.memory
    return base.model_copy(update={"data_dir": data_dir, "memory": memory.model_copy(update={
        "blackboard": memory.blackboard.model_copy(update={"url": None}),
        "vectors": memory.vectors.model_copy(update={"enabled": vectors, "url": None}),
        "coherence": memory.coherence.model_copy(update={"enabled": False})})})


async def _ingest(jobs: Sequence[Job], board: Blackboard, knowledge: KnowledgeMemory,
                  data_dir: Path, say: Progress) -> dict[str, Any]:
    """Job 1: every record's results archived and ingested, job by job."""
    failed = size = count = 0
    started = time.perf_counter()
    for n, job in enumerate(jobs, 1):
        archive = await anyio.to_thread.run_sync(Archive.open, data_dir, job.id)
        try:
            store = JobNodeStore(board, archive, job.id)
            store.listen(knowledge.observe)
            ingestor = Ingestor(board, archive, job.id, DirectWriter(store))
            await ingestor.job_node(job.goal)
            for result in job.results:
                try:
                    await anyio.to_thread.run_sync(functools.partial(
                        archive.put, result.iri, result.output, kind="result",
                        meta={"tool": result.name, "arguments": result.arguments,
                              "ok": result.ok, "role": ROLE, "turn": result.turn}))
                    await ingestor.tool_result(result, result.turn_iri)
                except GlidingError as exc:  # the loop would stop there; the bench counts it
                    failed += 1
                    log.warning("bench.research.ingest.failed", iri=result.iri,
                                error=exc.message)
                else:
                    count += 1
                    size += len(result.output.encode("utf-8", "replace"))
        finally:
            await anyio.to_thread.run_sync(archive.close)
        if n % 10 == 0 or n == len(jobs):
            say(f"[{n}/{len(jobs)}] jobs ingested")
    knowledge.flush()
    seconds = time.perf_counter() - started
    return {"jobs": len(jobs), "results": count, "failed": failed, "bytes": size,
            "seconds": round(seconds, 2),
            "results_per_s": round(count / seconds, 1) if seconds else 0.0,
            "kb_per_s": round(size / 1024 / seconds, 1) if seconds else 0.0}


def _node_types(board: Blackboard) -> dict[str, int]:
    rows = board.query(f"PREFIX gl: <{NS}>\nSELECT ?t (COUNT(DISTINCT ?s) AS ?n) WHERE "
                       "{ GRAPH ?g { ?s a ?t } } GROUP BY ?t", timeout_s=60.0)
    return dict(sorted((t.iri.rsplit("#", 1)[-1], int(str(row["n"]))) for row in rows
                       if isinstance(t := row.get("t"), Ref)))


def _encoder(knowledge: KnowledgeMemory) -> Callable[[Sequence[str]], np.ndarray] | None:
    """The loaded embedder's uncached encoder (what a query goes through), or None."""
    embedder = knowledge.index.embedder
    if embedder is None:
        return None
    encode: Callable[[Sequence[str]], np.ndarray] = getattr(embedder, "encode_query",
                                                            embedder.encode)
    return encode


def _ask(asked: Sequence[Question], knowledge: KnowledgeMemory, lines: LineIndex,
         count: Count, budget: int, briefing_budget: int,
         say: Progress) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Job 2: every question's contexts and verdicts, and gliding's latencies."""
    exclude = [str(job_iri(ASK_JOB))]
    rows: list[dict[str, Any]] = []
    briefs: list[float] = []
    recalls: list[float] = []
    for n, q in enumerate(asked, 1):
        started = time.perf_counter()
        brief = knowledge.brief(q.text, briefing_budget, exclude_graphs=exclude)
        middle = time.perf_counter()
        left = budget - brief.tokens - (1 if brief.text else 0)
        recall = knowledge.recall(q.text, max(left, 0))
        briefs.append((middle - started) * 1000)
        recalls.append((time.perf_counter() - middle) * 1000)
        context = "\n".join(t for t in (brief.text, recall.text) if t)
        row: dict[str, Any] = {
            "system": q.system, "question": q.text, "answer": q.answer, "unit": q.unit,
            "result": q.result, "gliding": found(q, context),
            "briefing": found(q, brief.text), "tokens": count(context),
            "bm25": found(q, lines.bm25_context(q.text, budget).text)}
        vector = lines.vector_context(q.text, budget)
        if vector is not None:
            row["vector"] = found(q, vector.text)
        rows.append(row)
        if n % 50 == 0:
            say(f"[{n}/{len(asked)}] questions asked")
    return rows, {"recall_ms_p50": round(percentile(recalls, 50), 2),
                  "recall_ms_p99": round(percentile(recalls, 99), 2),
                  "brief_ms_p50": round(percentile(briefs, 50), 2),
                  "brief_ms_p99": round(percentile(briefs, 99), 2)}


def _scores(rows: Sequence[dict[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(rows)}
    for method in methods:
        out[method] = ratio(sum(r[method] for r in rows), len(rows))
    out["gliding_minus_bm25"] = round(out["gliding"] - out["bm25"], 4)
    return out


def _macro(rows: Sequence[dict[str, Any]], methods: Sequence[str]) -> dict[str, float]:
    systems = _grouped(rows)
    means = {m: round(statistics.fmean(_scores(s, methods)[m] for s in systems.values()), 4)
             for m in methods}
    return {**means, "gliding_minus_bm25": round(means["gliding"] - means["bm25"], 4)}


def _by_system(rows: Sequence[dict[str, Any]], methods: Sequence[str],
               asked: Sequence[Question]) -> dict[str, Any]:
    out = {}
    for system, mine in sorted(_grouped(rows).items()):
        samples = [{"question": q.text, "answer": q.answer, "unit": q.unit}
                   for q in asked if q.system == system][:SAMPLES]
        out[system] = {**_scores(mine, methods), "samples": samples}
    return out


def _grouped(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    systems: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        systems[row["system"]].append(row)
    return systems
