"""``gliding schedule add|list|rm``: the running daemon's recurring jobs, through its API
(docs/daemon.md, "Scheduled jobs")."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gliding.cli.common import app, data_dir_of, say, settings_of

if TYPE_CHECKING:
    from gliding.cli.client import DaemonClient

schedule_app = typer.Typer(no_args_is_help=True,
                           help="Recurring jobs of the running daemon (cron expressions).")
app.add_typer(schedule_app, name="schedule")


class Missed(StrEnum):
    skip = "skip"
    once = "once"


class Overlap(StrEnum):
    skip = "skip"
    queue = "queue"


def _client(data_dir: Path | None) -> DaemonClient:
    """The client of the daemon of the data directory.

    Raises:
        UsageError: no daemon runs for it ("start one with `gliding daemon`").
    """
    from gliding.cli.client import DaemonClient

    return DaemonClient.connect(settings_of(data_dir_of(data_dir)).data_dir)


@schedule_app.command("add")
def add(
    name: str = typer.Argument(..., help="The schedule's name (letters, digits, . _ -); its "
                               "jobs are named <name>@<local time>."),
    task: Path = typer.Argument(..., help="The task file (task.yaml); its text is kept."),
    cron: str = typer.Option(..., "--cron", help="Five fields: minute hour day-of-month month "
                             "day-of-week, e.g. '*/15 * * * *' or '30 2 * * MON-FRI'."),
    tz: str = typer.Option("UTC", "--tz", help="The IANA time zone the expression is read "
                           "in, e.g. Europe/Paris."),
    missed: Missed = typer.Option(Missed.skip, "--missed", help="Due times missed while the "
                                  "daemon was down: skip (none run) or once (one catch-up "
                                  "run when it starts)."),
    overlap: Overlap = typer.Option(Overlap.skip, "--overlap", help="A due time while its "
                                    "last job is still queued or running: skip it, or queue "
                                    "another job."),
    model: str | None = typer.Option(None, "--model", "-m", help="Model: local, "
                                     "local:/path.gguf, scripted:replies.yaml or a litellm "
                                     "string (default: the task's, else llm.model)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Add a recurring job to the running daemon: it submits TASK at every due time."""
    from gliding.config.yamlsource import USER_FILE_MAX_BYTES, read_yaml_text
    from gliding.core.logs import terminal_safe
    from gliding.daemon.render import schedule_line
    from gliding.errors import TaskFileError

    text = read_yaml_text(task, what="task file", error=TaskFileError,
                          max_bytes=USER_FILE_MAX_BYTES)
    if model and model.startswith("scripted:"):  # the replies file is the caller's
        replies = Path(model.split(":", 1)[1]).expanduser()
        model = f"scripted:{replies.resolve()}" if replies.parts else model
    with _client(data_dir) as client:
        added = client.add_schedule({
            "name": name, "cron": cron, "task": text, "task_name": task.name, "tz": tz,
            "missed": missed.value, "overlap": overlap.value, "model": model,
            "base_dir": str(task.resolve().parent)})
    typer.echo(terminal_safe(f"added {schedule_line(added)}"))


@schedule_app.command("list")
def list_(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per schedule."),
) -> None:
    """The running daemon's recurring jobs: expression, zone, policies, next due time."""
    from gliding.daemon.render import json_text, schedule_line

    with _client(data_dir) as client:
        found = client.schedules()
    if not found:
        say("no schedules: gliding schedule add NAME TASK --cron EXPR adds one")
    for record in found:
        typer.echo(json_text(record, indent=None) if json_out else schedule_line(record))


@schedule_app.command("rm")
def remove(
    name: str = typer.Argument(..., help="The schedule's name (see gliding schedule list)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Remove a recurring job from the running daemon (the jobs it started stay)."""
    from gliding.core.logs import terminal_safe

    with _client(data_dir) as client:
        gone = client.remove_schedule(name)
    typer.echo(terminal_safe(f"removed schedule {gone['name']} (its jobs stay)"))
