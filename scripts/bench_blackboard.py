#!/usr/bin/env python3
"""Blackboard latency at scale: single-node writes and 1-hop projections on an embedded store.

    python scripts/bench_blackboard.py [--triples 1000000] [--samples 200] [--dir DIR]

Generates deterministic synthetic job data with the blackboard vocabulary (jobs, plans, steps,
turns, tool results, artifacts, files, symbols, errors, facts, people; one named graph per job),
validates every node and bulk-loads the quads into an on-disk pyoxigraph store (``load_s``
covers generating, validating and loading). Then it measures, after a few warm-up calls,
``Blackboard.put`` replacing one existing Step node, and ``Blackboard.construct`` of a 1-hop
frame (the focus node's own triples and the triples that point at it, LIMIT 200) around a
random focus node in its job's graph, and the real L3 path: ``Projector.briefing`` of a random
role's frame (CONSTRUCT over the job graph, rendered into a 300-token briefing, view cache
bypassed) for a random job. Prints JSON (and writes it to ``--out``):

    {"triples", "load_s", "write_ms_p50", "write_ms_p99", "projection_ms_p50",
     "projection_ms_p99", "projection_triples_mean", "l3_briefing_ms_p50",
     "l3_briefing_ms_p99", "l3_briefing_tokens_mean"}

Targets: write p50 <= 2 ms and projection p50 <= 15 ms at 1M triples.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyoxigraph import Quad

from gliding.context.tokens import TokenCounter
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import sparql_iri
from gliding.memory.board.projection import FRAMES, Projector
from gliding.memory.board.vocabulary import node_to_quads

PROJECTION_LIMIT = 200
BRIEFING_TOKENS = 300  # memory.recall.briefing_tokens' default
ROLES = tuple(FRAMES)
WARMUP = 10
WORDS = ("read", "write", "parse", "test", "config", "server", "cache", "index", "report",
         "retry", "token", "budget", "plan", "check", "graph", "query", "commit", "patch")


def job_nodes(rng: random.Random, job: int) -> Iterator[dict[str, Any]]:
    """One synthetic job: about a thousand triples of plans, steps, turns, results, facts."""
    j = f"gliding://job/bench-{job}"

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    yield {"@id": j, "@type": "Job", "name": text(4), "status": "running",
           "createdAt": f"2025-01-{1 + job % 28:02d}T10:00:00+00:00"}
    people = [f"{j}/person/{k}" for k in range(4)]
    for k, person in enumerate(people):
        yield {"@id": person, "@type": "Person", "name": f"person {job}-{k}"}
    files = [f"{j}/file/{k}" for k in range(12)]
    for k, file in enumerate(files):
        yield {"@id": file, "@type": "File", "path": f"src/mod{k}.py", "partOf": j}
        yield {"@id": f"{file}/symbol/f{k}", "@type": "Symbol", "name": f"f{k}",
               "path": f"src/mod{k}.py", "line": rng.randrange(1, 900), "partOf": file}
    for cycle in range(3):
        plan = f"{j}/plan/p{cycle}"
        yield {"@id": plan, "@type": "Plan", "partOf": j, "summary": text(8)}
        steps = [f"{plan}/step/{k}" for k in range(10)]
        for k, step in enumerate(steps):
            yield {"@id": step, "@type": "Step", "partOf": plan, "text": text(10),
                   "status": rng.choice(("todo", "doing", "done")),
                   "dependsOn": steps[max(0, k - 2):k], "importance": round(rng.random(), 3)}
            turn, result = f"{j}/turn/DA/{cycle}-{k}", f"{j}/result/c{cycle}-{k}"
            yield {"@id": turn, "@type": "Turn", "role": "DA", "partOf": step,
                   "derivedFrom": [turn], "produced": [result], "summary": text(12)}
            yield {"@id": f"{result}/node", "@type": "ToolResult", "name": "shell",
                   "partOf": step, "derivedFrom": [result], "summary": text(12),
                   "mentions": rng.sample(files, 2)}
            artifact = f"{j}/artifact/out{cycle}-{k}.txt"
            yield {"@id": artifact, "@type": "Artifact", "path": f"out{cycle}-{k}.txt",
                   "partOf": step, "derivedFrom": [result]}
            yield {"@id": f"{j}/check/{cycle}-{k}", "@type": "CheckReport",
                   "status": rng.choice(("pass", "pass", "fail")), "about": [artifact],
                   "text": text(8)}
            if k % 4 == 0:
                yield {"@id": f"{j}/error/{cycle}-{k}", "@type": "Error", "text": text(9),
                       "resolved": rng.random() < 0.5, "about": [rng.choice(files)]}
            yield {"@id": f"{j}/fact/{cycle}-{k}", "@type": "Fact", "text": text(14),
                   "mentions": rng.sample(people, 2), "importance": rng.randrange(1, 10),
                   "sessionDate": f"{1 + k % 28} May, 2023"}
        yield {"@id": f"{j}/decision/{cycle}", "@type": "Decision", "partOf": plan,
               "status": "another_cycle" if cycle < 2 else "done", "summary": text(10)}


def synthetic(triples: int, seed: int, focus: list[tuple[str, str]],
              steps: list[tuple[str, dict[str, Any]]]) -> Iterator[Quad]:
    """Quads until at least ``triples``; collects focus nodes and Step nodes on the way."""
    rng = random.Random(seed)
    written = 0
    job = 0
    while written < triples:
        graph = f"gliding://job/bench-{job}"
        for node in job_nodes(rng, job):
            quads = node_to_quads(node, graph=graph)
            written += len(quads)
            focus.append((node["@id"], graph))
            if node["@type"] == "Step":
                steps.append((graph, node))
            yield from quads
        job += 1


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def timed(call: Callable[[], object], samples: int) -> list[float]:
    for _ in range(WARMUP):
        call()
    out = []
    for _ in range(samples):
        start = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - start) / 1e6)
    return out


def run(directory: Path, triples: int, samples: int, seed: int) -> dict[str, Any]:
    focus: list[tuple[str, str]] = []
    steps: list[tuple[str, dict[str, Any]]] = []
    with OxigraphBlackboard.open(directory, max_limit=PROJECTION_LIMIT) as board:
        start = time.perf_counter()
        board.store.bulk_extend(synthetic(triples, seed, focus, steps))
        board.store.flush()
        load_s = time.perf_counter() - start
        total = board.count()
        rng = random.Random(seed + 1)
        revision = iter(range(10**9))

        def write() -> None:
            graph, node = rng.choice(steps)
            n = next(revision)
            board.put({**node, "status": ("todo", "doing", "done")[n % 3],
                       "summary": f"revision {n}"}, graph=graph)

        sizes: list[int] = []

        def project() -> None:
            iri, graph = rng.choice(focus)
            f = sparql_iri(iri)
            triples = board.construct(
                f"CONSTRUCT {{ {f} ?p ?o . ?s ?q {f} }} WHERE "
                f"{{ {{ {f} ?p ?o }} UNION {{ ?s ?q {f} }} }} LIMIT {PROJECTION_LIMIT}",
                graph=graph,
            )
            sizes.append(len(triples))

        counter = TokenCounter()
        graphs = sorted({graph for _, graph in focus})
        briefed: list[int] = []

        def brief() -> None:  # the real L3 path: a role's frame, rendered, never from cache
            projector = Projector(board, counter.count)
            text = projector.briefing(rng.choice(ROLES), rng.choice(graphs), BRIEFING_TOKENS)
            briefed.append(counter.count(text))

        writes = timed(write, samples)
        projections = timed(project, samples)
        briefings = timed(brief, samples)
    return {
        "triples": total,
        "load_s": round(load_s, 2),
        "write_ms_p50": round(percentile(writes, 0.50), 3),
        "write_ms_p99": round(percentile(writes, 0.99), 3),
        "projection_ms_p50": round(percentile(projections, 0.50), 3),
        "projection_ms_p99": round(percentile(projections, 0.99), 3),
        "projection_triples_mean": round(sum(sizes) / len(sizes), 1),
        "l3_briefing_ms_p50": round(percentile(briefings, 0.50), 3),
        "l3_briefing_ms_p99": round(percentile(briefings, 0.99), 3),
        "l3_briefing_tokens_mean": round(sum(briefed) / len(briefed), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--triples", type=int, default=1_000_000, help="triples to load")
    parser.add_argument("--samples", type=int, default=200, help="timed calls of each kind")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    parser.add_argument("--dir", type=Path, default=None,
                        help="store directory (must not exist); default: a temporary one")
    args = parser.parse_args()
    if args.triples < 1 or args.samples < 1:
        parser.error("--triples and --samples must be positive")
    if args.dir is not None:
        if args.dir.exists():
            parser.error(f"{args.dir} exists; give a new directory")
        result = run(args.dir, args.triples, args.samples, args.seed)
    else:
        with tempfile.TemporaryDirectory(prefix="gliding-bench-bb-") as tmp:
            result = run(Path(tmp) / "store", args.triples, args.samples, args.seed)
    from gliding.bench.stats import emit

    emit(result, args.out, indent=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
