"""``gliding``: run a task file, show the configuration, read archived items back.

Heavy modules (the runtime, litellm, llama.cpp) are imported inside the commands so that
``gliding --help`` stays instant. The daemon's commands are in ``service_commands.py``, the
archive's in ``memory_commands.py``, the benchmarks in ``bench_commands.py``; what they share
(the one error boundary, settings, stderr lines) in ``common.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gliding.cli import bench_commands, memory_commands, schedule_commands, service_commands
from gliding.cli.common import (
    app,
    config_app,
    data_dir_of,
    progress,
    say,
    settings_of,
    state,
)

if TYPE_CHECKING:
    pass

# imported for their commands
COMMANDS = (service_commands, memory_commands, bench_commands, schedule_commands)


def refuse_beside_a_daemon(data_dir: Path, task: Path) -> None:
    """A daemon serving ``data_dir`` holds its blackboard and queue: a job run beside it would
    have no blackboard (no briefings, no memory of earlier jobs) and race the daemon's jobs.

    Raises:
        UsageError: a daemon serves ``data_dir``; the hint says how to submit the job to it.
    """
    from gliding.cli.client import DaemonClient
    from gliding.daemon.queue import read_info
    from gliding.errors import UsageError

    client = DaemonClient.find(data_dir)
    if client is None:
        return
    client.close()
    pid = (read_info(data_dir) or {}).get("pid")
    raise UsageError(
        f"a daemon serves {data_dir}" + (f" (pid {pid})" if pid else "") + ": a job run beside "
        "it would have no blackboard (the daemon holds it)",
        hint=f"submit it to that daemon: gliding submit {task} --wait --data-dir {data_dir} "
             "(the same report and exit code), or run with another --data-dir")


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
    import anyio

    from gliding.config.task import load_task
    from gliding.daemon.compose import run_job
    from gliding.daemon.private import private_files
    from gliding.daemon.render import json_text, report_dict, report_text

    settings = settings_of(data_dir_of(data_dir))
    spec = load_task(task)
    refuse_beside_a_daemon(settings.data_dir, task)
    show = progress(quiet)
    with private_files(settings.data_dir):
        handle = anyio.run(lambda: run_job(spec, settings, model=model, on_event=show))
    assert handle.report is not None  # a new job always has one
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    typer.echo(json_text(data) if json_out else report_text(data))
    raise typer.Exit(0 if handle.report.outcome == "success" else 1)


@app.command()
def resume(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    json_out: bool = typer.Option(False, "--json", help="Print the final report as JSON."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives are."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """Continue an interrupted job from its last journaled step (archived model turns and
    tool results are replayed, not paid for or run again). With a daemon serving the data
    directory, a job of its queue is queued there again (an interrupted, paused or cancelled
    one): this prints its new state and exits 0 (gliding submit's --wait, or gliding logs -f,
    follows it); any other job resumes here."""
    import anyio

    from gliding.cli.client import DaemonClient
    from gliding.core.iri import job_iri
    from gliding.daemon.compose import resume_job
    from gliding.daemon.private import private_files
    from gliding.daemon.render import json_text, report_dict, report_text

    settings = settings_of(data_dir_of(data_dir))
    job_iri(job)  # a bad job id is exit 2 before anything is opened
    client = DaemonClient.find(settings.data_dir)
    if client is not None:
        from gliding.errors import NotFoundError

        try:
            with client:
                queued = client.resume(job)
        except NotFoundError:  # not a job of the daemon's queue (a `gliding run` one): here
            queued = None
        if queued is not None:
            from gliding.core.logs import terminal_safe

            typer.echo(json_text(queued, indent=None) if json_out else terminal_safe(
                f"{queued['job']} {queued['state']} (the daemon runs it on)"))
            raise typer.Exit(0)
    show = progress(quiet)
    with private_files(settings.data_dir):
        handle = anyio.run(lambda: resume_job(job, settings, on_event=show))
    if handle.report is None:
        typer.echo(json.dumps({"job": job, "outcome": handle.finished_before,
                               "already_finished": True}) if json_out else
                   f"job {job} already finished: {handle.finished_before}; nothing to resume")
        raise typer.Exit(0)
    data = report_dict(handle.report, archive=str(handle.archive), model=handle.model)
    typer.echo(json_text(data) if json_out else report_text(data))
    raise typer.Exit(0 if handle.report.outcome == "success" else 1)


@app.command()
def jobs(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where job archives are."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per job."),
) -> None:
    """List the jobs of a data directory, newest first, with their status (a job killed
    mid-run shows as interrupted: gliding resume JOB continues it). With a daemon serving the
    data directory: its queue, queued jobs included."""

    from gliding.cli.client import DaemonClient
    from gliding.daemon.jobs import list_jobs

    settings = settings_of(data_dir_of(data_dir))
    client = DaemonClient.find(settings.data_dir)
    if client is not None:
        with client:
            queued = client.all_jobs()
        _print_queue(queued, settings.data_dir, json_out)
        return
    found = list_jobs(settings.data_dir)
    from gliding.core.logs import terminal_safe
    from gliding.daemon.render import json_text

    if not found:
        say(f"no jobs in {settings.data_dir}")
    for info in found:
        if json_out:
            typer.echo(json_text(vars(info), indent=None))
        else:
            resumed = f"  (resumed {info.resumes}×)" if info.resumes else ""
            stopped = f"  stopped by: {info.stopped_by}" if info.stopped_by else ""
            typer.echo(terminal_safe(f"{info.job}  {info.status:<15} {info.goal[:60]}{resumed}"
                                     f"{stopped}"))


def _print_queue(queued: list[dict[str, Any]], data_dir: Path, json_out: bool) -> None:
    from gliding.daemon.render import json_text, queue_line

    if not queued:
        say(f"no jobs in the queue of the daemon of {data_dir}")
    for entry in queued:
        typer.echo(json_text(entry, indent=None) if json_out else queue_line(entry))


@app.command("mcp")
def mcp_command(
    data_dir: Path | None = typer.Option(None, "--data-dir",
                                         help="Where job archives and the blackboard are."),
    transport: str = typer.Option("stdio", "--transport",
                                  help="stdio, or http: streamable HTTP on 127.0.0.1."),
    port: int = typer.Option(8000, "--port", help="The HTTP port (--transport http)."),
) -> None:
    """Serve Gliding to MCP clients (Claude Code, IDEs): run_job, submit_job, job_status,
    list_jobs, read_iri, recall and knowledge_query (docs/mcp.md)."""
    import os
    import sys

    # The MCP server is a front door of its own (gliding.mcp), beside this one: this process
    # becomes it, with the same interpreter, options and standard streams.
    argv = [sys.executable, "-m", "gliding.mcp.server", "--transport", transport,
            "--port", str(port)]
    if state["config"] is not None:
        argv += ["--config", str(state["config"])]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


@config_app.command("show")
def config_show() -> None:
    """Print the effective configuration (defaults < config.yaml < GLIDING_* env)."""
    from gliding.config.loader import settings_as_yaml

    typer.echo(settings_as_yaml(settings_of()), nl=False)


def main() -> None:
    app()
