"""``gliding bench``: the benchmarks that run on inputs given as arguments, JSON out
(docs/benchmarks.md)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from gliding.cli.common import (
    bench_app,
    bounded,
    fail,
    say,
    settings_of,
    write_result,
)

if TYPE_CHECKING:
    from gliding.memory.recall.knowledge import Precision


@bench_app.command("context")
def bench_context(
    trajectories: Path = typer.Argument(..., help="JSON-lines file of agent trajectories "
                                   "(format: docs/context.md, 'The benchmark')."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
    png: Path | None = typer.Option(None, "--png", help="Plot (default: next to --out)."),
    dump_prompts: Path | None = typer.Option(
        None, "--dump-prompts", help="Write every prompt gliding built here, one file a call."),
    cache_model: str = typer.Option(
        "anthropic/claude-3-5-haiku-latest", "--cache-model",
        help="The Anthropic model whose simulated prompt cache bills cached_cost."),
) -> None:
    """Replay trajectories through naive, obs_mask, compact_recent and gliding contexts."""

    from gliding.bench.context import check_plots, plot_png, run_bench

    settings = settings_of()
    picture = png or (out.with_suffix(".png") if out else None)
    if picture:
        check_plots()
    result = run_bench(trajectories, settings=settings.context,
                       progress=lambda line: say(line, event="bench.progress"),
                       dump_prompts=dump_prompts, cache_model=cache_model)
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    if picture:
        plot_png(result, picture)
        result["png"] = str(picture)
    summary = {name: {k: v for k, v in s.items() if k != "per_trajectory"}
               for name, s in result["strategies"].items()}
    typer.echo(json.dumps({"trajectories": result["trajectories"], "strategies": summary},
                          indent=2) if out else text)


@bench_app.command("cache")
def bench_cache(
    bodies: Path = typer.Argument(..., help="JSON-lines file of captured request bodies "
                                  "(scripts/bench_cache.py --bodies, or a fake provider's "
                                  "recording)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
    min_tokens: int | None = typer.Option(
        None, "--min-tokens", help="Anthropic's minimum cacheable prompt (default: by model, "
        "2048 for Haiku, 1024 otherwise)."),
    ttl: float = typer.Option(300.0, "--ttl", help="Anthropic cache entry lifetime, s."),
    openai_ttl: float = typer.Option(300.0, "--openai-ttl",
                                     help="OpenAI cache entry lifetime when idle, s."),
) -> None:
    """Simulate Anthropic's and OpenAI's prompt caches on captured request bodies: cache-read
    share of input tokens over all calls, steady state and after a resume, per provider."""

    from gliding.bench.cache import load_calls, run_cache_bench

    settings_of()
    bounded("--ttl", ttl, 1, 86_400)
    bounded("--openai-ttl", openai_ttl, 1, 86_400)
    if min_tokens is not None:
        bounded("--min-tokens", min_tokens, 1, 1_000_000)
    calls = load_calls(bodies)
    result = run_cache_bench(calls, min_tokens=min_tokens, ttl_s=ttl,
                             openai_ttl_s=openai_ttl)
    result["input"] = str(bodies)
    write_result(result, out, result)


@bench_app.command("prefetch")
def bench_prefetch(
    trajectories: Path = typer.Argument(..., help="JSON-lines file of agent trajectories "
                                   "(format: docs/context.md, 'The benchmark')."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
    budget: int = typer.Option(200, "--budget",
                               help="Tokens of the working-set block measured."),
) -> None:
    """Gaps the context engine leaves (per file and system), the predictor's top-1/top-3 on
    them against recency, the working set, and none/lru/gliding warming; a table, JSON with
    --out."""

    from gliding.bench.prefetch import run_prefetch_bench, table

    bounded("--budget", budget, 0, 100_000)
    settings = settings_of()
    result = run_prefetch_bench(trajectories, settings=settings.context, budget=budget,
                                progress=lambda line: say(line, event="bench.progress"))
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    typer.echo(table(result))


@bench_app.command("tools")
def bench_tools(
    modules: Path = typer.Argument(
        Path(".cache/mcp-servers/node_modules"),
        help="The node_modules folder holding the reference MCP servers (scripts/setup.sh "
             "installs the pinned ones here)."),
    node: str = typer.Option("node", "--node", help="The node program (found on PATH)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
) -> None:
    """Tool-definition tokens of each role's prompt with server-everything and
    server-filesystem attached, on demand against the full catalog, and the model calls the
    on-demand path took. Exits 1 when a session's tools changed between calls or the
    on-demand job did not read its file through the filesystem server."""
    import shutil

    from gliding.bench.tool_catalog import run_tool_bench
    from gliding.errors import GlidingError, UsageError

    settings = settings_of()
    program = shutil.which(node)
    if program is None:
        raise UsageError(f"no node program {node!r}",
                         hint="install node 20+ (the reference MCP servers are node programs)")
    result = run_tool_bench(settings, modules.resolve(), program,
                            progress=lambda line: say(line, event="bench.progress"))
    result["input"] = str(modules)
    write_result(result, out, result)
    if not (result["tools_unchanged"] and result["found_and_called"]["on_demand"]):
        fail(GlidingError("the on-demand path broke: see tools_unchanged and "
                          "found_and_called in the result"))


def _precision(text: str) -> Precision:
    from typing import get_args

    from gliding.errors import UsageError
    from gliding.memory.recall.knowledge import Precision

    choices = get_args(Precision)
    if text not in choices:
        fail(UsageError(f"unknown precision {text!r}", hint=f"use {', '.join(choices)}"))
    return cast("Precision", text)


@bench_app.command("memory")
def bench_memory(
    locomo: Path = typer.Argument(..., help="LoCoMo-format JSON (a list of conversations)."),
    conversations: str = typer.Option("0-2", "--conversations", help="Indexes, e.g. 0-2,5."),
    budgets: str = typer.Option("512,1024,2048,4096", "--budgets",
                                help="Token budgets (cl100k_base), comma-separated."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
    no_vectors: bool = typer.Option(False, "--no-vectors", help="Skip the embedding model."),
    precision: str = typer.Option("auto", "--precision",
                                  help="Embedding model precision: auto, fp32, bf16 or int8."),
) -> None:
    """Evidence recall of recency, bm25, vector and gliding (hybrid) retrieval on LoCoMo."""
    import os


    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gliding.bench.memory import parse_range, run_memory_bench

    settings_of()
    result = run_memory_bench(locomo, parse_range(conversations), parse_range(budgets),
                              embedder=not no_vectors,
                              precision=_precision(precision))
    write_result(result, out, result)


@bench_app.command("research")
def bench_research(
    trajectories: list[Path] = typer.Argument(
        ..., help="JSON-lines files of agent trajectories (format: docs/context.md, "
                  "'The benchmark'); all of them are ingested together."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
    questions: int = typer.Option(300, "--questions", help="Questions to draw, spread over "
                                  "the systems."),
    seed: int = typer.Option(7, "--seed", help="Seeds the question sampling."),
    budget: int = typer.Option(2048, "--budget",
                               help="Tokens (cl100k_base) of briefing plus first recall."),
    no_vectors: bool = typer.Option(False, "--no-vectors", help="Skip the embedding model."),
    vector_baseline: bool = typer.Option(
        False, "--vector-baseline", help="Also rank every line by cosine (embeds them all: "
        "minutes)."),
    precision: str = typer.Option("auto", "--precision",
                                  help="Embedding model precision: auto, fp32, bf16 or int8."),
) -> None:
    """Cross-job recall: jobs ingest the trajectories' tool results, a new job is asked for
    lines of them; its briefing plus first recall against BM25 (and vector) lines."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gliding.bench.research import run_research_bench, summary_line

    settings = settings_of()
    bounded("--questions", questions, 1, 100_000)
    bounded("--budget", budget, 1, 1_000_000)
    chosen = _precision(precision)
    memory = settings.memory
    settings = settings.model_copy(update={"memory": memory.model_copy(update={
        "vectors": memory.vectors.model_copy(update={"precision": chosen})})})
    result = run_research_bench(trajectories, questions=questions, seed=seed, budget=budget,
                                vectors=not no_vectors, vector_baseline=vector_baseline,
                                settings=settings,
                                progress=lambda line: say(line, event="bench.progress"))
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        typer.echo(summary_line(result))
    else:  # stdout stays JSON
        typer.echo(json.dumps(result, indent=2))
        say(summary_line(result), event="bench.summary")


@bench_app.command("coherence")
def bench_coherence(
    processes: int = typer.Option(4, "--processes", help="Client processes per mode."),
    ops: int = typer.Option(10_000, "--ops", help="Operations per client process."),
    keys: int = typer.Option(100, "--keys", help="Registers (blackboard nodes)."),
    write_ratio: float = typer.Option(0.25, "--write-ratio", help="Share of writes."),
    kills: int = typer.Option(8, "--kills", help="Client SIGKILLs per mode (then restarts)."),
    directory_kills: int = typer.Option(1, "--directory-kills",
                                        help="Directory SIGKILLs in the mesi run."),
    lease: float = typer.Option(1.0, "--lease", help="Coherence lease, seconds."),
    seed: int = typer.Option(0, "--seed", help="Seeds the workload and the kill schedule."),
    broker: str | None = typer.Option(None, "--broker",
                                      help="mqtt://host:port (default: start mosquitto)."),
    protocol: str = typer.Option(
        "mesi", "--protocol", help="mesi, or broken: a testing flag, a directory that never "
        "invalidates (the bench must then report violations and fail)."),
    modes: str = typer.Option(",".join(("mesi", "no_cache", "broadcast_invalidation")),
                              "--modes", help="Comma-separated; mesi is required."),
    check_timeout: float = typer.Option(120.0, "--check-timeout",
                                        help="Linearizability search budget per key, s."),
    workdir: Path | None = typer.Option(None, "--workdir",
                                        help="Keep histories and logs here (default: temp)."),
    signed: bool = typer.Option(False, "--signed", help="Sign and check every message with "
                                "a bus key, as bus.auth does (docs/daemon.md, Trust)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
) -> None:
    """MESI coherence under kill -9: N client processes, a directory process, real mosquitto
    and oxigraph, a linearizability check; baselines no_cache and broadcast_invalidation.
    Exits 1 when the mesi run has a violation, a lost acknowledged write or a checker
    timeout."""
    from gliding.bench.coherence import MODES, BenchSettings, failures, run_coherence_bench
    from gliding.errors import UsageError

    settings_of()
    bounded("--processes", processes, 1, 64)
    bounded("--ops", ops, 1, 10_000_000)
    bounded("--keys", keys, 1, 100_000)
    bounded("--write-ratio", write_ratio, 0, 1)
    bounded("--kills", kills, 0, 10_000)
    bounded("--directory-kills", directory_kills, 0, 1000)
    bounded("--lease", lease, 0.05, 60)
    bounded("--check-timeout", check_timeout, 0.1, 86_400)
    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    if protocol not in ("mesi", "broken"):
        raise UsageError(f"unknown --protocol {protocol!r}", hint="use mesi or broken")
    if "mesi" not in chosen or set(chosen) - set(MODES):
        raise UsageError(f"bad --modes {modes!r}", hint=f"mesi plus any of {', '.join(MODES)}")
    settings = BenchSettings(
        processes=processes, ops=ops, keys=keys, write_ratio=write_ratio, seed=seed,
        kills=kills, directory_kills=directory_kills, lease_s=lease,
        protocol=cast(Any, protocol), broker=broker, modes=chosen,
        check_timeout_s=check_timeout, workdir=workdir,
        bus_key=Path(tempfile.mkdtemp(prefix="gliding-bench-key-")) / "bus.key"
        if signed else None)
    result = run_coherence_bench(settings,
                                 progress=lambda line: say(line, event="bench.progress"))
    summary = {k: v for k, v in result.items() if k not in ("mesi", "baselines", "checker")}
    summary["modes"] = {name: {k: v for k, v in m.items() if k not in ("counters", "checker")}
                        for name, m in [("mesi", result["mesi"]), *result["baselines"].items()]}
    write_result(result, out, summary)
    failed = failures(result)
    if failed:
        say(f"error: the mesi run is not coherent: {'; '.join(failed)}"
             + (f" (e.g. {result['checker']['examples'][0]})" if result["checker"]["examples"]
                else ""), event="bench.coherence.failed", level="error", failures=failed)
        raise typer.Exit(1)
