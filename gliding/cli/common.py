"""What every ``gliding`` command shares: the Typer apps, the one error boundary, settings
and the lines a command says on stderr.

Errors become one message on stderr and an exit code, in one place (``Boundary``, around every
command): 2 for bad input (task file, config, IRI, an option out of range), 3 for something
not found, 4 for a sandbox that cannot run, 1 for a failed job or one stopped by an error (the
disk full, a bug: one message, never a traceback; ``log_level: debug`` logs the traceback).
Everything on stderr goes through ``gliding.core.logs``: plain lines with control characters
escaped, or, with ``log_format: json``, one JSON object a line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from gliding import __version__


class Boundary(TyperGroup):
    """The one error boundary of every command: whatever escapes one ends it through ``fail``
    (one message, its exit code); Ctrl-C is exit 130. Click's own exits pass through."""

    def invoke(self, ctx: Any) -> Any:  # typer's own (vendored) click Context
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - one message and an exit code, whatever stopped the command
            fail(exc)


app = typer.Typer(cls=Boundary, add_completion=False, no_args_is_help=True,
                  help="Gliding: run teams of LLM agents (Plan, Do, Check, Act) on a task.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect the configuration.")
memory_app = typer.Typer(no_args_is_help=True, help="Read the archive (L0) back.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (JSON output).")
broker_app = typer.Typer(no_args_is_help=True, help="Set up an MQTT broker for workers.")
app.add_typer(config_app, name="config")
app.add_typer(memory_app, name="memory")
app.add_typer(bench_app, name="bench")
app.add_typer(broker_app, name="broker")

state: dict[str, Any] = {"config": None, "log_format": "console"}


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
    state["config"] = config
    state["log_format"] = "console"  # until settings say otherwise


def settings_of(overrides: dict[str, Any] | None = None) -> Any:
    from gliding.config.loader import load_settings
    from gliding.core import logs

    settings = load_settings(state["config"], overrides=overrides or {})
    logs.configure_logging(settings.log_level, settings.log_format)
    state["log_format"] = settings.log_format
    return settings


def say(text: str, **data: Any) -> None:
    """A line for the user on stderr (``gliding.core.logs.say``, in the configured format)."""
    from gliding.core import logs

    logs.say(text, fmt=state.get("log_format", "console"), **data)


def progress(quiet: bool) -> Any:
    """The job's event callback: its progress line on stderr (a JSON event with the event's
    data under ``log_format: json``); nothing when ``quiet``."""
    from gliding.daemon.render import StreamLines, progress_line

    streams = StreamLines()  # model.delta events as the model's own lines

    def show(event: Any) -> None:
        if quiet:
            return
        taken = streams.take(event)  # None: not a streamed event
        lines = [*taken] if taken is not None else [*streams.flush(), progress_line(event)]
        for line in lines:
            if line:
                say(line, event="job.progress", kind=event.event, job=event.job,
                    data=event.data)

    return show


def bounded(option: str, value: float, low: float, high: float) -> None:
    """Refuse a number option outside ``low``..``high`` (NaN and infinities included).

    Raises:
        UsageError: it is out of range.
    """
    from gliding.errors import UsageError

    if not low <= value <= high:  # False for NaN too
        def shown(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else str(x)

        raise UsageError(f"{option} must be from {shown(low)} to {shown(high)}, got {value}",
                         hint=f"give {option} a number in that range")


def data_dir_of(data_dir: Path | None) -> dict[str, Any]:
    """The --data-dir flag as a settings override (none when the flag is absent)."""
    return {"data_dir": str(data_dir)} if data_dir else {}


def fail(exc: Exception) -> None:
    """End the command on ``exc``: one message on stderr and its exit code. An error that is
    not a GlidingError (a group of them, an OSError, a bug) is first reduced to one
    (``stop_error``); its traceback is logged at debug level only."""
    from gliding.errors import GlidingError

    if isinstance(exc, BrokenPipeError):  # the reader went away (`gliding jobs | head -1`)
        import os
        import sys

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
        raise typer.Exit(141)  # what a shell reports for a command SIGPIPE ended
    error: GlidingError | None = exc if isinstance(exc, GlidingError) else None
    if error is None:
        import structlog

        from gliding.daemon.jobs import stop_error

        structlog.get_logger("gliding.cli").debug("cli.failed", exc_info=exc)
        error = stop_error(exc)
        if error is None:
            raise exc
    from gliding.errors import ProviderUnavailable

    if isinstance(error, ProviderUnavailable) and error.job:  # run, resume: no report to show
        from gliding.core.logs import terminal_safe

        typer.echo(f"\nOutcome: INTERRUPTED — the model provider stayed unreachable: "
                   f"{terminal_safe(clipped(error.reason))}\n"
                   f"Resume: gliding resume {error.job}")
    say(clipped(f"error: {error}"), event="cli.error", level="error", code=error.code,
         exit_code=error.exit_code, error=clipped(error.message), hint=error.hint)
    raise typer.Exit(error.exit_code)


MAX_ERROR_LINES = 40


MAX_ERROR_LINE = 1000


def clipped(text: str) -> str:
    """An error message kept to MAX_ERROR_LINES lines of MAX_ERROR_LINE characters, whatever
    produced it (the config loaders bound theirs already; this holds for every error)."""
    lines = [line if len(line) <= MAX_ERROR_LINE else line[: MAX_ERROR_LINE - 3] + "..."
             for line in text.splitlines()]
    if len(lines) > MAX_ERROR_LINES:
        more = len(lines) - MAX_ERROR_LINES + 1
        lines = [*lines[: MAX_ERROR_LINES - 1], f"... and {more} more lines"]
    return "\n".join(lines)


def write_result(result: dict[str, Any], out: Path | None, summary: dict[str, Any]) -> None:
    """The whole result to ``out`` (when given) and ``summary`` to stdout, else all to stdout."""
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    typer.echo(json.dumps(summary, indent=2) if out else text)
