"""``gliding``: run a task file, show the configuration, read archived items back.

Heavy modules (the runtime, litellm, llama.cpp) are imported inside the commands so that
``gliding --help`` stays instant. Errors become one message on stderr and an exit code:
2 for bad input (task file, config, IRI, an option out of range), 3 for something not found,
4 for a sandbox that cannot run, 1 for a failed job or one stopped by an error (the disk full,
a bug: one message, never a traceback; ``log_level: debug`` logs the traceback). Everything on
stderr goes through ``gliding.cli.logs``: plain lines with control characters escaped, or, with
``log_format: json``, one JSON object a line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from gliding import __version__

if TYPE_CHECKING:
    from gliding.memory.recall.vectors import Precision

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Gliding: run teams of LLM agents (Plan, Do, Check, Act) on a task.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect the configuration.")
memory_app = typer.Typer(no_args_is_help=True, help="Read the archive (L0) back.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (JSON output).")
app.add_typer(config_app, name="config")
app.add_typer(memory_app, name="memory")
app.add_typer(bench_app, name="bench")
broker_app = typer.Typer(no_args_is_help=True, help="Set up an MQTT broker for workers.")
app.add_typer(broker_app, name="broker")

_state: dict[str, Any] = {"config": None, "log_format": "console"}


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
    _state["log_format"] = "console"  # until settings say otherwise


def _settings(overrides: dict[str, Any] | None = None) -> Any:
    from gliding.cli import logs
    from gliding.config.loader import load_settings

    settings = load_settings(_state["config"], overrides=overrides or {})
    logs.configure_logging(settings.log_level, settings.log_format)
    _state["log_format"] = settings.log_format
    return settings


def _say(text: str, **data: Any) -> None:
    """A line for the user on stderr (``gliding.cli.logs.say``, in the configured format)."""
    from gliding.cli.logs import say

    say(text, fmt=_state.get("log_format", "console"), **data)


def _progress(quiet: bool) -> Any:
    """The job's event callback: its progress line on stderr (a JSON event with the event's
    data under ``log_format: json``); nothing when ``quiet``."""
    from gliding.cli.render import progress_line

    def show(event: Any) -> None:
        line = None if quiet else progress_line(event)
        if line:
            _say(line, event="job.progress", kind=event.event, job=event.job, data=event.data)

    return show


def _bounded(option: str, value: float, low: float, high: float) -> None:
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


def _data_dir(data_dir: Path | None) -> dict[str, Any]:
    """The --data-dir flag as a settings override (none when the flag is absent)."""
    return {"data_dir": str(data_dir)} if data_dir else {}


def _fail(exc: Exception) -> None:
    """End the command on ``exc``: one message on stderr and its exit code. An error that is
    not a GlidingError (a group of them, an OSError, a bug) is first reduced to one
    (``stop_error``); its traceback is logged at debug level only."""
    from gliding.errors import GlidingError

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
        from gliding.cli.logs import terminal_safe

        typer.echo(f"\nOutcome: INTERRUPTED — the model provider stayed unreachable: "
                   f"{terminal_safe(_clipped(error.reason))}\n"
                   f"Resume: gliding resume {error.job}")
    _say(_clipped(f"error: {error}"), event="cli.error", level="error", code=error.code,
         exit_code=error.exit_code, error=_clipped(error.message), hint=error.hint)
    raise typer.Exit(error.exit_code)


MAX_ERROR_LINES = 40
MAX_ERROR_LINE = 1000


def _clipped(text: str) -> str:
    """An error message kept to MAX_ERROR_LINES lines of MAX_ERROR_LINE characters, whatever
    produced it (the config loaders bound theirs already; this holds for every error)."""
    lines = [line if len(line) <= MAX_ERROR_LINE else line[: MAX_ERROR_LINE - 3] + "..."
             for line in text.splitlines()]
    if len(lines) > MAX_ERROR_LINES:
        more = len(lines) - MAX_ERROR_LINES + 1
        lines = [*lines[: MAX_ERROR_LINES - 1], f"... and {more} more lines"]
    return "\n".join(lines)


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
    try:
        import anyio

        from gliding.cli.render import json_text, report_dict, report_text
        from gliding.config.task import load_task
        from gliding.daemon.compose import run_job
        from gliding.daemon.private import private_files

        settings = _settings(_data_dir(data_dir))
        spec = load_task(task)
        show = _progress(quiet)
        with private_files(settings.data_dir):
            handle = anyio.run(lambda: run_job(spec, settings, model=model, on_event=show))
    except Exception as exc:  # one message and an exit code, whatever stopped the job
        _fail(exc)
        return
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
    tool results are replayed, not paid for or run again)."""
    try:
        import anyio

        from gliding.cli.render import json_text, report_dict, report_text
        from gliding.core.iri import job_iri
        from gliding.daemon.compose import resume_job
        from gliding.daemon.private import private_files

        settings = _settings(_data_dir(data_dir))
        job_iri(job)  # a bad job id is exit 2 before anything is opened
        show = _progress(quiet)
        with private_files(settings.data_dir):
            handle = anyio.run(lambda: resume_job(job, settings, on_event=show))
    except Exception as exc:  # one message and an exit code, whatever stopped the job
        _fail(exc)
        return
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
    from gliding.errors import GlidingError

    try:
        from gliding.cli.client import DaemonClient
        from gliding.daemon.jobs import list_jobs

        settings = _settings(_data_dir(data_dir))
        client = DaemonClient.find(settings.data_dir)
        if client is not None:
            with client:
                queued = client.all_jobs()
            _print_queue(queued, settings.data_dir, json_out)
            return
        found = list_jobs(settings.data_dir)
    except GlidingError as exc:
        _fail(exc)
        return
    from gliding.cli.logs import terminal_safe
    from gliding.cli.render import json_text

    if not found:
        _say(f"no jobs in {settings.data_dir}")
    for info in found:
        if json_out:
            typer.echo(json_text(vars(info), indent=None))
        else:
            resumed = f"  (resumed {info.resumes}×)" if info.resumes else ""
            stopped = f"  stopped by: {info.stopped_by}" if info.stopped_by else ""
            typer.echo(terminal_safe(f"{info.job}  {info.status:<15} {info.goal[:60]}{resumed}"
                                     f"{stopped}"))


def _print_queue(queued: list[dict[str, Any]], data_dir: Path, json_out: bool) -> None:
    from gliding.cli.render import json_text, queue_line

    if not queued:
        _say(f"no jobs in the queue of the daemon of {data_dir}")
    for entry in queued:
        typer.echo(json_text(entry, indent=None) if json_out else queue_line(entry))


@app.command("daemon")
def daemon_command(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The data directory it "
                                         "serves (job archives, queue, token)."),
    port: int | None = typer.Option(None, "--port", help="The HTTP port (daemon.port; 0: any "
                                    "free one, see <data_dir>/daemon.json)."),
    host: str | None = typer.Option(None, "--host", help="The address (daemon.host; loopback "
                                    "unless you say otherwise)."),
    socket: Path | None = typer.Option(None, "--socket", help="Also serve on this unix socket "
                                       "(mode 0600; daemon.socket)."),
    max_jobs: int | None = typer.Option(None, "--max-jobs", help="Jobs run at once, 1 to "
                                        "1024 (daemon.max_jobs); the others wait queued."),
) -> None:
    """Run the daemon: a local HTTP API (bearer token in <data_dir>/daemon.token) that queues
    jobs, runs them a few at a time and resumes them after a crash (docs/daemon.md). Ctrl-C
    or SIGTERM stops it; running jobs resume at the next start."""
    overrides = _data_dir(data_dir)
    for key, value in (("daemon.port", port), ("daemon.host", host),
                       ("daemon.socket", str(socket) if socket else None),
                       ("daemon.max_jobs", max_jobs)):
        if value is not None:
            overrides[key] = value

    def announce(info: dict[str, Any]) -> None:
        from gliding.daemon.queue import token_path

        also = f" and {info['socket']}" if info.get("socket") else ""
        _say(f"gliding daemon: serving {info['url']}{also} for {settings.data_dir} "
             f"(token: {token_path(settings.data_dir)}; up to {settings.daemon.max_jobs} jobs "
             "at once; Ctrl-C stops)", event="daemon.ready", **info)

    try:
        from gliding.daemon.api import serve
        from gliding.daemon.private import private_files

        settings = _settings(overrides)
        with private_files(settings.data_dir):
            serve(settings, announce=announce,
                  warn=lambda line: _say(line, event="daemon.warning", level="warning"))
    except KeyboardInterrupt:  # before the daemon took over the signal
        raise typer.Exit(130) from None
    except Exception as exc:
        _fail(exc)


@app.command("worker")
def worker_command(
    action: list[str] = typer.Argument(None, help="`init NAME`: enrol a worker: write the "
                                       "bus key for NAME (from this data directory's root "
                                       "key) to --out, to copy to the worker's host."),
    out: Path | None = typer.Option(None, "--out", help="init: where the worker's key goes "
                                    "(default: ./NAME.bus.key)."),
    name: str | None = typer.Option(None, "--name", help="The enrolled name it signs as "
                                    "(default: its key's)."),
    broker: str | None = typer.Option(None, "--broker", help="The MQTT 5 broker, "
                                      "mqtt://host:port or mqtts:// with TLS (bus.url)."),
    roles: str = typer.Option("PA,DA,CA,AA", "--roles", help="The roles it serves, "
                              "comma-separated."),
    concurrency: int = typer.Option(1, "--concurrency", help="Assignments it runs at once."),
    remote: bool = typer.Option(False, "--remote", help="Write L0 through the broker even "
                                "where this host has the job's archive."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Its own data directory "
                                         "(begin marks of remote jobs, its blackboard)."),
) -> None:
    """Run agents for the jobs of a daemon (or `gliding run`) with daemon.agents: workers:
    take their assignments from the broker, N workers splitting the work (docs/daemon.md,
    Workers). Ctrl-C or SIGTERM stops it; what it held is handed to another worker.
    `gliding worker init NAME` enrols one instead (docs/daemon.md, "Trust")."""
    overrides = _data_dir(data_dir)
    if action:
        _worker_init(action, out, overrides)
        return
    if broker is not None:
        overrides["bus.url"] = broker
    wanted = [r.strip().upper() for r in roles.split(",") if r.strip()]

    def announce(info: dict[str, Any]) -> None:
        board = "with" if info["blackboard"] else "without"
        _say(f"gliding worker {info['worker']}: serving {','.join(info['roles'])} from "
             f"{info['broker']} ({info['concurrency']} at once, {board} a blackboard; "
             "Ctrl-C stops)", event="worker.ready", **info)

    try:
        import anyio

        from gliding.daemon.private import private_files
        from gliding.daemon.workers import serve_worker

        settings = _settings(overrides)
        with private_files(settings.data_dir):
            anyio.run(lambda: serve_worker(settings, roles=wanted, concurrency=concurrency,
                                           remote=remote, announce=announce, enrolled=name))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as exc:
        _fail(exc)


def _worker_init(action: list[str], out: Path | None, overrides: dict[str, Any]) -> None:
    """``gliding worker init NAME``: the worker key of NAME, from the root key of this data
    directory (``bus.key_file``; made when there is none), written 0600 to ``out``."""
    try:
        from gliding.bus.auth import root_keyring, worker_key, write_key_file
        from gliding.daemon.runtime import bus_key_path
        from gliding.errors import UsageError

        if len(action) != 2 or action[0] != "init":
            raise UsageError(f"unknown worker action {' '.join(action)!r}",
                             hint="gliding worker init NAME [--out FILE], or gliding worker "
                                  "--broker URL to serve")
        worker = action[1]
        settings = _settings(overrides)
        root = root_keyring(bus_key_path(settings))
        if not root.is_root:
            raise UsageError(f"{bus_key_path(settings)} is a worker's key, not a root key",
                             hint="enrol workers on the daemon's host")
        path = write_key_file(out or Path(f"{worker}.bus.key"), worker_key(root.key, worker),
                              worker)
    except Exception as exc:
        _fail(exc)
    _say(f"wrote the bus key of worker {worker} to {path} (0600): copy it to the worker's "
         f"host and start it with `gliding worker --broker URL` and bus.key_file: <that file>",
         event="worker.enrolled", worker=worker, key_file=str(path))


@broker_app.command("init")
def broker_init(
    directory: Path = typer.Argument(..., help="Where the configuration goes (made 0700)."),
    workers: list[str] = typer.Option([], "--worker", help="A worker's name (repeat it)."),
    port: int | None = typer.Option(None, "--port",
                                    help="The port mosquitto listens on (1883; 8883 with --tls)."),
    bind: str = typer.Option("127.0.0.1", "--bind", help="The address it listens on."),
    tls: bool = typer.Option(False, "--tls", help="Listen with TLS only: writes a new CA "
                             "(ca.crt, for bus.ca_file) and the broker's certificate."),
    tls_hosts: list[str] = typer.Option([], "--tls-host", help="A name or address clients "
                                        "reach the broker by, for its certificate (repeat "
                                        "it; default: the --bind address)."),
) -> None:
    """Write a mosquitto configuration for Gliding: users and passwords for the daemon
    (`gliding`) and each --worker, what each may read and write, and with --tls a TLS
    listener (docs/daemon.md, "Trust")."""
    try:
        from gliding.bus.broker import JOB_USER, write_broker_config

        settings = _settings({})
        files = write_broker_config(directory, workers=workers, port=port, bind=bind,
                                    max_message_bytes=settings.bus.max_message_bytes,
                                    tls=tls, tls_hosts=tls_hosts)
    except Exception as exc:
        _fail(exc)
    tls_line = "" if files.ca_file is None else (
        f" and bus.ca_file: {files.ca_file} (copy it to every worker's host)")
    _say(f"wrote {files.config}: start it with `mosquitto -c {files.config}`; clients use "
         f"bus.url: {files.url}{tls_line}; the daemon "
         f"uses bus.username: {JOB_USER} and bus.password_file: "
         f"{files.passwords[JOB_USER]}, each worker its own name and password file "
         f"({', '.join(str(p) for u, p in files.passwords.items() if u != JOB_USER) or 'none'})",
         event="broker.configured", config=str(files.config), url=files.url,
         ca_file=None if files.ca_file is None else str(files.ca_file),
         passwords={u: str(p) for u, p in files.passwords.items()})


def _client(data_dir: Path | None) -> Any:
    """The settings and the client of the daemon of the data directory.

    Raises:
        UsageError: no daemon runs for it ("start one with `gliding daemon`").
    """
    from gliding.cli.client import DaemonClient

    settings = _settings(_data_dir(data_dir))
    return settings, DaemonClient.connect(settings.data_dir)


@app.command()
def submit(
    task: Path = typer.Argument(..., help="The task file (task.yaml)."),
    model: str | None = typer.Option(None, "--model", "-m",
                                     help="Model: local, local:/path.gguf, "
                                     "scripted:replies.yaml or a litellm string."),
    wait: bool = typer.Option(False, "--wait", help="Follow the job until it ends; exit as "
                              "gliding run does (0: success)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines (--wait)."),
) -> None:
    """Queue a task with the running daemon; print the job id."""
    try:
        from gliding.config.yamlsource import USER_FILE_MAX_BYTES, read_yaml_text
        from gliding.errors import TaskFileError

        settings, client = _client(data_dir)
        text = read_yaml_text(task, what="task file", error=TaskFileError,
                              max_bytes=USER_FILE_MAX_BYTES)
        if model and model.startswith("scripted:"):  # the replies file is the caller's
            replies = Path(model.split(":", 1)[1]).expanduser()
            model = f"scripted:{replies.resolve()}" if replies.parts else model
        with client:
            answer = client.submit(text, task.name, model=model,
                                   base_dir=str(task.resolve().parent))
    except Exception as exc:
        _fail(exc)
        return
    job = str(answer["job"])
    typer.echo(job)
    if wait:
        _wait_for(settings.data_dir, job, quiet)


def _wait_for(data_dir: Path, job: str, quiet: bool) -> None:
    """Follow ``job``'s events (across daemon restarts) until it ends; exit 0 on success."""
    try:
        from gliding.cli.client import follow
        from gliding.cli.render import event_line

        end: dict[str, Any] = {}
        for record in follow(data_dir, job):
            if not quiet and record["event"] != "job.ended":
                _say(event_line(record), event="job.progress", kind=record["event"], job=job,
                     data=record.get("data"))
            end = record
    except Exception as exc:
        _fail(exc)
        return
    data = end.get("data") or {}
    outcome = {"job.finished": data.get("outcome"), "job.cancelled": "cancelled",
               "job.stopped": "interrupted"}.get(end.get("event", ""))
    if end.get("event") == "job.ended":
        outcome = data.get("outcome") or data.get("state")
    typer.echo(f"{job} {outcome}")
    raise typer.Exit(0 if outcome == "success" else 1)


@app.command()
def status(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
    json_out: bool = typer.Option(False, "--json", help="Print it as JSON."),
) -> None:
    """How a job of the running daemon stands: state, outcome, turns, tokens."""
    try:
        _settings_, client = _client(data_dir)
        with client:
            found = client.status(job)
    except Exception as exc:
        _fail(exc)
        return
    from gliding.cli.render import json_text, status_text

    typer.echo(json_text(found) if json_out else status_text(found))


@app.command()
def logs(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    follow_: bool = typer.Option(False, "--follow", "-f", help="Go on until the job ends."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
    json_out: bool = typer.Option(False, "--json", help="One JSON event a line."),
) -> None:
    """The events of a job of the running daemon, one a line (-f: follow them)."""
    try:
        from gliding.cli.client import follow
        from gliding.cli.render import event_line, json_text

        settings, client = _client(data_dir)
        with client:
            records = (follow(settings.data_dir, job) if follow_ else
                       client.events(job, follow=False))
            for record in records:
                if record["event"] == "job.ended":
                    continue
                typer.echo(json_text(record, indent=None) if json_out else event_line(record))
    except Exception as exc:
        _fail(exc)


@app.command()
def cancel(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Cancel a job of the running daemon: a queued one never starts, a running one stops
    at its next safe point (gliding resume JOB, or the API's resume, continues it)."""
    try:
        _settings_, client = _client(data_dir)
        with client:
            found = client.cancel(job)
    except Exception as exc:
        _fail(exc)
        return
    from gliding.cli.logs import terminal_safe

    typer.echo(terminal_safe(f"{found['job']} {found['state']}"))


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
    from gliding.errors import GlidingError

    try:
        from gliding.daemon.private import private_files
        from gliding.mcp.server import serve

        settings = _settings(_data_dir(data_dir))
        with private_files(settings.data_dir):
            serve(settings, transport=transport, port=port,
                  announce=lambda url: typer.echo(
                      f"gliding mcp: serving at {url} (bearer token in "
                      f"{settings.data_dir / 'mcp.token'})", err=True))
    except GlidingError as exc:
        _fail(exc)


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
    from gliding.memory.archive.store import open_for_iri

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
    limit: int = typer.Option(100, "--limit", help="Most rows, 1 to 100000 (a LIMIT is added "
                              "or capped)."),
    timeout_s: float = typer.Option(10.0, "--timeout", help="Seconds before the query stops "
                                    "(0.001 to 3600)."),
) -> None:
    """Query the blackboard (L2) of a data directory; rows print as JSON lines."""
    from gliding.errors import GlidingError

    try:
        from gliding.memory.board.blackboard import check_read_only_query

        settings = _settings(_data_dir(data_dir))
        _bounded("--limit", limit, 1, 100_000)
        _bounded("--timeout", timeout_s, 0.001, 3600)
        checked = check_read_only_query(sparql, max_limit=limit)
        board = _open_board(data_dir, settings)
        try:
            rows = board.query(checked.text, timeout_s=timeout_s)
        finally:
            board.close()
    except GlidingError as exc:
        _fail(exc)
        return
    from gliding.cli.render import json_text

    for row in rows:
        typer.echo(json_text(row, indent=None, default=_plain))


@memory_app.command("search")
def memory_search(
    text: str = typer.Argument(..., help="Words to look for."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    k: int = typer.Option(10, "--top", "-k", help="How many nodes to show (1 to 1000)."),
) -> None:
    """Search the blackboard's nodes (plans, steps, checks, decisions, artifacts) by text."""
    from gliding.errors import GlidingError

    try:
        from gliding.memory.board.search import search_nodes

        settings = _settings(_data_dir(data_dir))
        _bounded("--top", k, 1, 1000)
        board = _open_board(data_dir, settings)
        try:
            hits = search_nodes(board, text, k=k)
        finally:
            board.close()
    except GlidingError as exc:
        _fail(exc)
        return
    from gliding.cli.logs import terminal_safe

    if not hits:
        _say("no node matches")
    for hit in hits:
        typer.echo(terminal_safe(f"{hit.score:7.3f}  {hit.type:<11} {hit.iri}") + "\n         "
                   + terminal_safe(hit.text))


@memory_app.command("recall")
def memory_recall(
    text: str = typer.Argument(..., help="What to remember, e.g. a question."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
    budget: int | None = typer.Option(None, "--budget", "-b",
                                      help="Tokens, 1 to 1000000 (default "
                                      "memory.recall.budget_tokens)."),
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
        if budget is not None:
            _bounded("--budget", budget, 1, 1_000_000)
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
    from gliding.cli.logs import terminal_safe

    if not packed.ids:
        _say("nothing recalled")
        return
    typer.echo(terminal_safe(packed.text, one_line=False))
    _say(f"[{len(packed.ids)} items, {packed.tokens} tokens]", items=len(packed.ids),
         tokens=packed.tokens)


@memory_app.command("graph")
def memory_graph(
    iri: str = typer.Argument(..., help="The node, e.g. gliding://job/<job>/plan/1."),
    png: Path = typer.Option(..., "--png", help="Write the picture here."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where the blackboard is."),
) -> None:
    """Draw a node's 1-hop neighbourhood on the blackboard as a PNG."""
    from gliding.errors import GlidingError

    try:
        from gliding.cli.picture import draw, neighbourhood
        from gliding.memory.board.vocabulary import check_iri

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
    cache_model: str = typer.Option(
        "anthropic/claude-3-5-haiku-latest", "--cache-model",
        help="The Anthropic model whose simulated prompt cache bills cached_cost."),
) -> None:
    """Replay trajectories through naive, obs_mask, compact_recent and gliding contexts."""
    from gliding.errors import GlidingError

    try:
        from gliding.bench.context import plot_png, run_bench

        settings = _settings()
        result = run_bench(trajectories, settings=settings.context,
                           progress=lambda line: _say(line, event="bench.progress"),
                           dump_prompts=dump_prompts, cache_model=cache_model)
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
    from gliding.errors import GlidingError

    try:
        from gliding.bench.cache import load_calls, run_cache_bench

        _settings()
        _bounded("--ttl", ttl, 1, 86_400)
        _bounded("--openai-ttl", openai_ttl, 1, 86_400)
        if min_tokens is not None:
            _bounded("--min-tokens", min_tokens, 1, 1_000_000)
        calls = load_calls(bodies)
        result = run_cache_bench(calls, min_tokens=min_tokens, ttl_s=ttl,
                                 openai_ttl_s=openai_ttl)
        result["input"] = str(bodies)
    except GlidingError as exc:
        _fail(exc)
        return
    _write_result(result, out, result)


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
                                    progress=lambda line: _say(line, event="bench.progress"))
    except GlidingError as exc:
        _fail(exc)
        return
    _write_result(result, out, {k: v for k, v in result.items() if k != "per_trajectory"})


def _precision(text: str) -> Precision:
    from typing import get_args

    from gliding.errors import UsageError
    from gliding.memory.recall.vectors import Precision

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
    from gliding.errors import GlidingError, UsageError

    try:
        from gliding.bench.coherence import MODES, BenchSettings, failures, run_coherence_bench

        _settings()
        _bounded("--processes", processes, 1, 64)
        _bounded("--ops", ops, 1, 10_000_000)
        _bounded("--keys", keys, 1, 100_000)
        _bounded("--write-ratio", write_ratio, 0, 1)
        _bounded("--kills", kills, 0, 10_000)
        _bounded("--directory-kills", directory_kills, 0, 1000)
        _bounded("--lease", lease, 0.05, 60)
        _bounded("--check-timeout", check_timeout, 0.1, 86_400)
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
                                     progress=lambda line: _say(line, event="bench.progress"))
    except GlidingError as exc:
        _fail(exc)
        return
    summary = {k: v for k, v in result.items() if k not in ("mesi", "baselines", "checker")}
    summary["modes"] = {name: {k: v for k, v in m.items() if k not in ("counters", "checker")}
                        for name, m in [("mesi", result["mesi"]), *result["baselines"].items()]}
    _write_result(result, out, summary)
    failed = failures(result)
    if failed:
        _say(f"error: the mesi run is not coherent: {'; '.join(failed)}"
             + (f" (e.g. {result['checker']['examples'][0]})" if result["checker"]["examples"]
                else ""), event="bench.coherence.failed", level="error", failures=failed)
        raise typer.Exit(1)


def _write_result(result: dict[str, Any], out: Path | None, summary: dict[str, Any]) -> None:
    """The whole result to ``out`` (when given) and ``summary`` to stdout, else all to stdout."""
    text = json.dumps(result, indent=2)
    if out:
        out.write_text(text + "\n", encoding="utf-8")
    typer.echo(json.dumps(summary, indent=2) if out else text)


def main() -> None:
    app()
