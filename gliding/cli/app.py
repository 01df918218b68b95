"""``gliding``: run a task file, show the configuration, read archived items back.

Heavy modules (the runtime, litellm, llama.cpp) are imported inside the commands so that
``gliding --help`` stays instant. Errors become one message on stderr and an exit code:
2 for bad input (task file, config, IRI), 3 for something not found, 1 for a failed job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from gliding import __version__

if TYPE_CHECKING:
    from gliding.memory.vectors import Precision

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Gliding: run teams of LLM agents (Plan, Do, Check, Act) on a task.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect the configuration.")
memory_app = typer.Typer(no_args_is_help=True, help="Read the archive (L0) back.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (JSON output).")
app.add_typer(config_app, name="config")
app.add_typer(memory_app, name="memory")
app.add_typer(bench_app, name="bench")

_state: dict[str, Any] = {"config": None}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gliding {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    config: Path | None = typer.Option(None, "--config", "-c", help="config.yaml to use "
                                       "(default: $GLIDING_CONFIG, else ./config.yaml)"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    _state["config"] = config


def _settings(overrides: dict[str, Any] | None = None) -> Any:
    from gliding.cli.logs import configure_logging
    from gliding.config.loader import load_settings

    settings = load_settings(_state["config"], overrides=overrides or {})
    configure_logging(settings.log_level, settings.log_format)
    return settings


def _data_dir(data_dir: Path | None) -> dict[str, Any]:
    """The --data-dir flag as a settings override (none when the flag is absent)."""
    return {"data_dir": str(data_dir)} if data_dir else {}


def _fail(exc: Exception) -> None:
    from gliding.errors import GlidingError

    if isinstance(exc, GlidingError):
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code)
    raise exc


@app.command()
def run(
    task: Path = typer.Argument(..., help="The task file (task.yaml)."),
    model: str | None = typer.Option(None, "--model", "-m",
                                     help="Model: local, local:/path.gguf, "
                                     "scripted:replies.yaml or a litellm string."),
    json_out: bool = typer.Option(False, "--json", help="Print the final report as JSON."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives go."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """Run a task through the agent team and print the report."""
    from gliding.errors import GlidingError

    try:
        import anyio

        from gliding.cli.render import progress_line, report_dict, report_text
        from gliding.config.task import load_task
        from gliding.daemon.compose import run_job

        settings = _settings(_data_dir(data_dir))
        spec = load_task(task)

        def show(event: Any) -> None:
            line = None if quiet else progress_line(event)
            if line:
                typer.echo(line, err=True)

        handle = anyio.run(lambda: run_job(spec, settings, model=model, on_event=show))
    except GlidingError as exc:
        _fail(exc)
        return
    assert handle.report is not None  # a new job always has one
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if json_out else report_text(data))
    raise typer.Exit(0 if handle.report.outcome == "success" else 1)


@app.command()
def resume(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    json_out: bool = typer.Option(False, "--json", help="Print the final report as JSON."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives are."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """Continue an interrupted job from its last journaled step (archived model turns and
    tool results are replayed, not paid for or run again)."""
    from gliding.errors import GlidingError

    try:
        import anyio

        from gliding.cli.render import progress_line, report_dict, report_text
        from gliding.core.iri import job_iri
        from gliding.daemon.compose import resume_job

        settings = _settings(_data_dir(data_dir))
        job_iri(job)  # a bad job id is exit 2 before anything is opened

        def show(event: Any) -> None:
            line = None if quiet else progress_line(event)
            if line:
                typer.echo(line, err=True)

        handle = anyio.run(lambda: resume_job(job, settings, on_event=show))
    except GlidingError as exc:
        _fail(exc)
        return
    if handle.report is None:
        typer.echo(json.dumps({"job": job, "outcome": handle.finished_before,
                               "already_finished": True}) if json_out else
                   f"job {job} already finished: {handle.finished_before}; nothing to resume")
        raise typer.Exit(0)
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if json_out else report_text(data))
    raise typer.Exit(0 if handle.report.outcome == "success" else 1)


@app.command()
def jobs(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives are."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per job."),
) -> None:
    """List the jobs of a data directory, newest first, with their status (a job killed
    mid-run shows as interrupted: gliding resume JOB continues it)."""
    from gliding.errors import GlidingError

    try:
        from gliding.daemon.jobs import list_jobs

        settings = _settings(_data_dir(data_dir))
        found = list_jobs(settings.data_dir)
    except GlidingError as exc:
        _fail(exc)
        return
    if not found:
        typer.echo(f"no jobs in {settings.data_dir}", err=True)
    for info in found:
        if json_out:
            typer.echo(json.dumps(vars(info), ensure_ascii=False))
        else:
            resumed = f"  (resumed {info.resumes}×)" if info.resumes else ""
            typer.echo(f"{info.job}  {info.status:<15} {info.goal[:60]}{resumed}")


@config_app.command("show")
def config_show() -> None:
    """Print the effective configuration (defaults < config.yaml < GLIDING_* env)."""
    from gliding.config.loader import settings_as_yaml
    from gliding.errors import GlidingError

    try:
        typer.echo(settings_as_yaml(_settings()), nl=False)
    except GlidingError as exc:
        _fail(exc)


@memory_app.command("show")
def memory_show(
    iri: str = typer.Argument(..., help="gliding://job/<job>/..."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives are."),
    meta: bool = typer.Option(False, "--meta", help="Print the entry's metadata, not content."),
) -> None:
    """Print an archived item back, byte-exact."""
    from gliding.core.iri import parse_iri
    from gliding.errors import GlidingError, IRIError
    from gliding.memory.archive import open_for_iri

    try:
        settings = _settings(_data_dir(data_dir))
        parsed_iri = parse_iri(iri)
        if parsed_iri.kind is None:
            raise IRIError(f"{iri} names a job, not an archived item",
                           hint="add the item, e.g. /turn/DA/1 or /result/DA-1-0")
        archive, parsed = open_for_iri(settings.data_dir, iri)
        with archive:
            item = archive.get(str(parsed))
    except GlidingError as exc:
        _fail(exc)
        return
    if meta:
        typer.echo(json.dumps({"iri": item.iri, "kind": item.kind, "sha256": item.sha256,
                               "size": item.size, "media_type": item.media_type,
                               "created_at": item.created_at, "meta": item.meta}, indent=2))
        return
    assert item.content is not None
    sys.stdout.buffer.write(item.content)
    sys.stdout.buffer.flush()


@memory_app.command("query")
def memory_query(
    sparql: str = typer.Argument(..., help="A read-only SPARQL query (SELECT, ASK, CONSTRUCT)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    limit: int = typer.Option(100, "--limit", help="Most rows (a LIMIT is added or capped)."),
    timeout_s: float = typer.Option(10.0, "--timeout", help="Seconds before the query stops."),
) -> None:
    """Query the blackboard (L2) of a data directory; rows print as JSON lines."""
    from gliding.errors import GlidingError

    try:
        from gliding.memory.blackboard import check_read_only_query

        checked = check_read_only_query(sparql, max_limit=limit)
        board = _open_board(data_dir)
        try:
            rows = board.query(checked.text, timeout_s=timeout_s)
        finally:
            board.close()
    except GlidingError as exc:
        _fail(exc)
        return
    for row in rows:
        typer.echo(json.dumps(row, default=_plain, ensure_ascii=False))


@memory_app.command("search")
def memory_search(
    text: str = typer.Argument(..., help="Words to look for."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    k: int = typer.Option(10, "--top", "-k", help="How many nodes to show."),
) -> None:
    """Search the blackboard's nodes (plans, steps, checks, decisions, artifacts) by text."""
    from gliding.errors import GlidingError

    try:
        from gliding.memory.search import search_nodes

        board = _open_board(data_dir)
        try:
            hits = search_nodes(board, text, k=k)
        finally:
            board.close()
    except GlidingError as exc:
        _fail(exc)
        return
    if not hits:
        typer.echo("no node matches", err=True)
    for hit in hits:
        typer.echo(f"{hit.score:7.3f}  {hit.type:<11} {hit.iri}\n         {hit.text}")


@memory_app.command("recall")
def memory_recall(
    text: str = typer.Argument(..., help="What to remember, e.g. a question."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    budget: int | None = typer.Option(None, "--budget", "-b",
                                      help="Tokens (default memory.recall.budget_tokens)."),
    no_vectors: bool = typer.Option(False, "--no-vectors",
                                    help="Words and graph only (no embedding model)."),
) -> None:
    """What an agent's recall(query) would get from long-term memory: the blackboard's turns,
    results, steps, checks and decisions of every job, ranked by hybrid recall."""
    import os

    from gliding.errors import GlidingError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from gliding.context.tokens import TokenCounter
        from gliding.daemon.runtime import open_knowledge

        overrides = _data_dir(data_dir)
        if no_vectors:
            overrides["memory.vectors.enabled"] = False
        settings = _settings(overrides)
        board = _open_board(data_dir, settings)
        try:
            knowledge = open_knowledge(board, settings,
                                       TokenCounter(settings.context.tokenizer).count)
            try:
                packed = knowledge.recall(text, budget or settings.memory.recall.budget_tokens)
            finally:
                knowledge.close()
        finally:
            board.close()
    except GlidingError as exc:
        _fail(exc)
        return
    if not packed.ids:
        typer.echo("nothing recalled", err=True)
        return
    typer.echo(packed.text)
    typer.echo(f"[{len(packed.ids)} items, {packed.tokens} tokens]", err=True)


@memory_app.command("graph")
def memory_graph(
    iri: str = typer.Argument(..., help="The node, e.g. gliding://job/<job>/plan/1."),
    png: Path = typer.Option(..., "--png", help="Write the picture here."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
) -> None:
    """Draw a node's 1-hop neighbourhood on the blackboard as a PNG."""
    from gliding.errors import GlidingError

    try:
        from gliding.memory.picture import draw, neighbourhood
        from gliding.memory.vocabulary import check_iri

        check_iri(iri)
        board = _open_board(data_dir)
        try:
            rows = neighbourhood(board, iri)
        finally:
            board.close()
        draw(iri, rows, png)
    except GlidingError as exc:
        _fail(exc)
        return
    typer.echo(f"{len(rows)} edges drawn to {png}")


def _open_board(data_dir: Path | None, settings: Any = None) -> Any:
    from gliding.daemon.runtime import blackboard_path
    from gliding.errors import NotFoundError
    from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard

    settings = settings or _settings(_data_dir(data_dir))
    if settings.memory.blackboard.url:
        from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard

        return SparqlEndpointBlackboard.for_oxigraph(settings.memory.blackboard.url)
    path = blackboard_path(settings.data_dir)
    if not path.exists():
        raise NotFoundError(f"no blackboard in {settings.data_dir}",
                            hint="run a job first, or pass --data-dir")
    return OxigraphBlackboard.open(path)


def _plain(value: Any) -> Any:
    """Blackboard result values (Ref, TypedLiteral) as JSON."""
    if hasattr(value, "iri"):
        return value.iri
    if hasattr(value, "__dict__"):
        return vars(value)
    return str(value)


@bench_app.command("context")
def bench_context(
    trajectories: Path = typer.Argument(..., help="JSON-lines file of agent trajectories."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
    png: Path | None = typer.Option(None, "--png", help="Plot (default: next to --out)."),
    dump_prompts: Path | None = typer.Option(
        None, "--dump-prompts", help="Write every prompt gliding built here, one file a call."),
) -> None:
    """Replay trajectories through naive, obs_mask, compact_recent and gliding contexts."""
    from gliding.errors import GlidingError

    try:
        from gliding.bench.context import plot_png, run_bench

        settings = _settings()
        result = run_bench(trajectories, settings=settings.context,
                           progress=lambda line: typer.echo(line, err=True),
                           dump_prompts=dump_prompts)
        text = json.dumps(result, indent=2)
        if out:
            out.write_text(text + "\n", encoding="utf-8")
        picture = png or (out.with_suffix(".png") if out else None)
        if picture:
            plot_png(result, picture)
            result["png"] = str(picture)
    except GlidingError as exc:
        _fail(exc)
        return
    summary = {name: {k: v for k, v in s.items() if k != "per_trajectory"}
               for name, s in result["strategies"].items()}
    typer.echo(json.dumps({"trajectories": result["trajectories"], "strategies": summary},
                          indent=2) if out else text)


@bench_app.command("prefetch")
def bench_prefetch(
    trajectories: Path = typer.Argument(..., help="JSON-lines file of agent trajectories."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON result here."),
) -> None:
    """Hit rate and precision of none, lru and gliding prefetch before every model call."""
    from gliding.errors import GlidingError

    try:
        from gliding.bench.prefetch import run_prefetch_bench

        settings = _settings()
        result = run_prefetch_bench(trajectories, settings=settings.context,
                                    progress=lambda line: typer.echo(line, err=True))
    except GlidingError as exc:
        _fail(exc)
        return
    _write_result(result, out, {k: v for k, v in result.items() if k != "per_trajectory"})


def _precision(text: str) -> Precision:
    from typing import get_args

    from gliding.errors import UsageError
    from gliding.memory.vectors import Precision

    choices = get_args(Precision)
    if text not in choices:
        _fail(UsageError(f"unknown precision {text!r}", hint=f"use {', '.join(choices)}"))
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

    from gliding.errors import GlidingError

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from gliding.bench.memory import parse_range, run_memory_bench

        _settings()
        result = run_memory_bench(locomo, parse_range(conversations), parse_range(budgets),
                                  embedder=not no_vectors,
                                  precision=_precision(precision))
    except GlidingError as exc:
        _fail(exc)
        return
    _write_result(result, out, result)


def _write_result(result: dict[str, Any], out: Path | None, summary: dict[str, Any]) -> None:
    """The whole result to ``out`` (when given) and ``summary`` to stdout, else all to stdout."""
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    typer.echo(json.dumps(summary, indent=2) if out else text)


def main() -> None:
    app()
