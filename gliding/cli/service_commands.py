"""``gliding daemon``, ``worker``, ``broker init`` and the daemon's clients: ``submit``,
``status``, ``dashboard``, ``logs``, ``cancel`` (docs/daemon.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gliding.cli.common import (
    app,
    broker_app,
    data_dir_of,
    say,
    settings_of,
)

if TYPE_CHECKING:
    pass


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
    overrides = data_dir_of(data_dir)
    for key, value in (("daemon.port", port), ("daemon.host", host),
                       ("daemon.socket", str(socket) if socket else None),
                       ("daemon.max_jobs", max_jobs)):
        if value is not None:
            overrides[key] = value

    def announce(info: dict[str, Any]) -> None:
        from gliding.daemon.queue import token_path

        also = f" and {info['socket']}" if info.get("socket") else ""
        say(f"gliding daemon: serving {info['url']}{also} for {settings.data_dir} "
             f"(token: {token_path(settings.data_dir)}; up to {settings.daemon.max_jobs} jobs "
             "at once; Ctrl-C stops)", event="daemon.ready", **info)

    from gliding.daemon.api import serve
    from gliding.daemon.private import private_files

    settings = settings_of(overrides)
    with private_files(settings.data_dir):
        serve(settings, announce=announce,
              warn=lambda line: say(line, event="daemon.warning", level="warning"))


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
    roles: str | None = typer.Option(None, "--roles", help="The roles it serves, "
                                     "comma-separated (default: every role)."),
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
    overrides = data_dir_of(data_dir)
    if action:
        _worker_init(action, out, overrides)
        return
    if broker is not None:
        overrides["bus.url"] = broker
    if roles is None:
        from gliding.config.roles import role_names

        wanted = list(role_names())
    else:
        wanted = [r.strip().upper() for r in roles.split(",") if r.strip()]

    def announce(info: dict[str, Any]) -> None:
        board = "with" if info["blackboard"] else "without"
        say(f"gliding worker {info['worker']}: serving {','.join(info['roles'])} from "
             f"{info['broker']} ({info['concurrency']} at once, {board} a blackboard; "
             "Ctrl-C stops)", event="worker.ready", **info)

    import anyio

    from gliding.daemon.private import private_files
    from gliding.daemon.workers import serve_worker

    settings = settings_of(overrides)
    with private_files(settings.data_dir):
        anyio.run(lambda: serve_worker(settings, roles=wanted, concurrency=concurrency,
                                       remote=remote, announce=announce, enrolled=name))


def _worker_init(action: list[str], out: Path | None, overrides: dict[str, Any]) -> None:
    """``gliding worker init NAME``: the worker key of NAME, from the root key of this data
    directory (``bus.key_file``; made when there is none), written 0600 to ``out``."""
    from gliding.bus.auth import root_keyring, worker_key, write_key_file
    from gliding.daemon.runtime import bus_key_path
    from gliding.errors import UsageError

    if len(action) != 2 or action[0] != "init":
        raise UsageError(f"unknown worker action {' '.join(action)!r}",
                         hint="gliding worker init NAME [--out FILE], or gliding worker "
                              "--broker URL to serve")
    worker = action[1]
    settings = settings_of(overrides)
    root = root_keyring(bus_key_path(settings))
    if not root.is_root:
        raise UsageError(f"{bus_key_path(settings)} is a worker's key, not a root key",
                         hint="enrol workers on the daemon's host")
    path = write_key_file(out or Path(f"{worker}.bus.key"), worker_key(root.key, worker),
                          worker)
    say(f"wrote the bus key of worker {worker} to {path} (0600): copy it to the worker's "
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
    from gliding.bus.broker import JOB_USER, write_broker_config

    settings = settings_of({})
    files = write_broker_config(directory, workers=workers, port=port, bind=bind,
                                max_message_bytes=settings.bus.max_message_bytes,
                                tls=tls, tls_hosts=tls_hosts)
    tls_line = "" if files.ca_file is None else (
        f" and bus.ca_file: {files.ca_file} (copy it to every worker's host)")
    say(f"wrote {files.config}: start it with `mosquitto -c {files.config}`; clients use "
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

    settings = settings_of(data_dir_of(data_dir))
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
    job = str(answer["job"])
    typer.echo(job)
    if wait:
        _wait_for(settings.data_dir, job, quiet)


def _wait_for(data_dir: Path, job: str, quiet: bool) -> None:
    """Follow ``job``'s events (across daemon restarts) until it ends; exit 0 on success."""
    from gliding.cli.client import follow
    from gliding.daemon.render import StreamLines, event_lines

    end: dict[str, Any] = {}
    streams = StreamLines()
    for record in follow(data_dir, job):
        if not quiet and record["event"] != "job.ended":
            for line in event_lines(record, streams):
                say(line, event="job.progress", kind=record["event"], job=job,
                    data=record.get("data"))
        end = record
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
    _settings_, client = _client(data_dir)
    with client:
        found = client.status(job)
    from gliding.daemon.render import json_text, status_text

    typer.echo(json_text(found) if json_out else status_text(found))


@app.command()
def dashboard(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Print a one-time login link of the running daemon's web dashboard (good once, for
    five minutes; the token's login form at / works too)."""
    _settings_, client = _client(data_dir)
    with client:
        typer.echo(client.dashboard_link())


@app.command()
def logs(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    follow_: bool = typer.Option(False, "--follow", "-f", help="Go on until the job ends."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
    json_out: bool = typer.Option(False, "--json", help="One JSON event a line."),
) -> None:
    """The events of a job of the running daemon, one a line (-f: follow them)."""
    from gliding.cli.client import follow
    from gliding.daemon.render import StreamLines, event_lines, json_text

    settings, client = _client(data_dir)
    streams = StreamLines()  # model.delta events as the model's own lines
    with client:
        records = (follow(settings.data_dir, job) if follow_ else
                   client.events(job, follow=False))
        for record in records:
            if record["event"] == "job.ended":
                continue
            if json_out:
                typer.echo(json_text(record, indent=None))
            else:
                for line in event_lines(record, streams):
                    typer.echo(line)
        for line in streams.flush():
            typer.echo(line)


@app.command()
def steer(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    message: str = typer.Argument(..., help="What to tell it (at most 4000 characters)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Tell a running job of the daemon something: appended before the next model call of
    one of its sessions, and kept in its archive (a resumed job replays it where it was)."""
    _settings_, client = _client(data_dir)
    with client:
        found = client.steer(job, message)
    from gliding.core.logs import terminal_safe

    typer.echo(terminal_safe(f"{found['job']} steered: {found['steer']}"))


@app.command()
def fork(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    at: str = typer.Option(..., "--at", help="The step: a turn such as DA/3 (gliding logs "
                                             "JOB shows [DA turn 3])."),
    workspace: Path | None = typer.Option(None, "--workspace", help=(
        "Where to restore the workspace (absent or empty; default: the job's workspace with "
        "-fork-<id>).")),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Start a new job of the daemon from a step of an old one: its workspace restored as
    that step left it, the steps up to it replayed from the archive (no tool runs again, no
    model call is paid again), and the new job runs on from there."""
    _settings_, client = _client(data_dir)
    with client:
        found = client.fork(job, at, str(workspace.resolve()) if workspace else None)
    from gliding.core.logs import terminal_safe

    typer.echo(terminal_safe(
        f"{found['job']} {found['state']}: forked from {job} at {found['step']} "
        f"({found['entries']} archived entries replayed, workspace {found['workspace']})"))


@app.command()
def interrupt(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Pause a running job of the daemon: its current model or tool call stops now, and it
    waits, paused, until gliding steer JOB MSG or gliding resume JOB runs it on."""
    _settings_, client = _client(data_dir)
    with client:
        found = client.interrupt(job)
    from gliding.core.logs import terminal_safe

    typer.echo(terminal_safe(f"{found['job']} pausing: its current call stops now"))


@app.command()
def approve(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    approval: str = typer.Option(..., "--id", help=(
        "The waiting call, as gliding status JOB names it (DA-3): the answer binds to it.")),
    note: str = typer.Option("", "--note", help="What to tell the agent with the answer."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Approve a tool call of a job waiting for a person (--id, as gliding status JOB shows
    it): it runs with exactly the arguments its request holds (gliding status JOB --json
    shows them whole)."""
    _answer(job, approval, note, data_dir, approve=True)


@app.command()
def deny(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    approval: str = typer.Option(..., "--id", help=(
        "The waiting call, as gliding status JOB names it (DA-3): the answer binds to it.")),
    note: str = typer.Option("", "--note", help="Why not, or what to do instead (the agent "
                                                 "reads it)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Deny a tool call of a job waiting for a person (--id, as gliding status JOB shows
    it): it is not run, and the agent is told (with the note)."""
    _answer(job, approval, note, data_dir, approve=False)


def _answer(job: str, approval: str, note: str, data_dir: Path | None, *,
            approve: bool) -> None:
    """Answer the waiting call the person names. An id is one turn's call for good (a later
    call has another), so the answer binds to the call the person saw listed; its digest
    goes with it."""
    from gliding.core.logs import terminal_safe
    from gliding.daemon.render import approval_text
    from gliding.errors import UsageError

    _settings_, client = _client(data_dir)
    with client:
        every = client.approvals(job)
        waiting = [a for a in every if a["answer"] is None and a["approval"] == approval]
        if not waiting:
            ids = ", ".join(a["approval"] for a in every if a["answer"] is None)
            raise UsageError(f"job {job} has no call waiting for approval with id {approval}",
                             hint=f"waiting now: {ids}" if ids else
                             "gliding status JOB lists the calls waiting")
        found = client.answer(job, waiting[0]["approval"], approve=approve, note=note,
                              digest=waiting[0]["digest"])
    verdict = "approved" if approve else "denied"
    typer.echo(terminal_safe(f"{job} {found['approval']} {verdict}: {approval_text(found)}"))


@app.command()
def cancel(
    job: str = typer.Argument(..., help="The job id (see gliding jobs)."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="The daemon's data dir."),
) -> None:
    """Cancel a job of the running daemon: a queued one never starts, a running one stops
    at its next safe point (gliding resume JOB, or the API's resume, continues it)."""
    _settings_, client = _client(data_dir)
    with client:
        found = client.cancel(job)
    from gliding.core.logs import terminal_safe

    typer.echo(terminal_safe(f"{found['job']} {found['state']}"))
