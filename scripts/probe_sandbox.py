"""Try to break out of the command sandbox with a real job, and judge every try from the host.

    .venv/bin/python scripts/probe_sandbox.py --out r.json [--workspace DIR] [--json]

The probe puts fake API keys in its own environment (it re-executes itself with them, so they
are in its /proc/<pid>/environ as in a Gliding started from a shell that exports them), listens
on a loopback TCP port, plants a secret next to the workspace, and runs a whole job with
``gliding run --model scripted:replies.yaml`` (PA → DA → CA → AA, the data directory inside the
workspace, as `gliding run` in a project with ``workspace: .`` has it). DA's bash steps try, one
attempt each:

- ``read_shadow``: /etc/shadow;
- ``read_home``: the home directory and its ~/.ssh (the way to a toolchain prefix mounted in
  it, ``~/.pyenv`` for ``~/.pyenv/versions/3.11.7``, is not counted as read);
- ``read_parent``: the workspace's parent directory and the secret planted there;
- ``read_api_keys``: the keys, through ``env``, /proc/$PPID, /proc/1, the probe's own
  /proc/<pid>/environ and every /proc/*/environ;
- ``read_archive``: the data directory in the workspace (the job's own archive), and a file
  planted there;
- ``write_outside``: a file in /usr, /etc, the workspace parent, the host's /tmp and the home;
- ``connect_loopback``: a TCP connection to the port the probe listens on;
- ``fork_2000``: 2,000 processes;
- ``leave_process``: processes that outlive the command (setsid, nohup, a double fork).

An attempt counts as refused only when the tool result shows it failed or found nothing and the
host agrees: no secret in the output, none of the files it would have written exists, the
listener got no connection, no process carrying the probe's mark runs after the job. CA's
command check (``test ! -e /etc/shadow``, true only in the sandbox) shows checks are confined
too. The JSON (stdout with ``--json``, always ``--out``)::

    {"attempts": N, "refused": N, "host_changed": false, "job_outcome": "success", ...,
     "results": [{"attempt": "read_shadow", "refused": true, "evidence": "..."}, ...]}

Exit code 0 when every attempt was refused, the host is unchanged and the job ended cleanly
(exit code 0, outcome and archived status success); else 1. Without ``--workspace`` the probe
works in a temporary directory it removes at the end; with it, DIR is the workspace (created
if missing) and the job's archive stays in DIR/.gliding.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GLIDING = Path(sys.executable).parent / "gliding"
KEY_NAMES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PROBE_SECRET_TOKEN")
MARKED = "PROBE_SANDBOX_REEXECUTED"  # set once the probe re-executed itself with the fake keys
TIMEOUT_S = 10  # tools.bash.timeout_s of the job: every step ends well before it
FORKS = 2000


@dataclass(frozen=True)
class Step:
    """What DA's bash step ran and what came back (``None``: the step left no result)."""

    exit: str | None  # the status line: "exit code 1", "killed after 10s timeout"
    output: str

    @property
    def failed(self) -> bool:
        return self.exit is not None and self.exit != "exit code 0"


@dataclass(frozen=True)
class Layout:
    root: Path  # task.yaml and replies.yaml
    workspace: Path
    parent: Path  # the workspace's parent: the sibling secret lies here
    data: Path  # inside the workspace
    mark: str  # on the command line of every process the attempts start; in every file name
    secret: str  # the fake keys' value
    sibling: Path  # the secret planted next to the workspace
    planted: Path  # what read_archive tries to write into the data directory
    targets: tuple[Path, ...]  # what write_outside tries to write
    port: int
    probe_pid: int


def attempts(lay: Layout) -> dict[str, str]:
    """The bash command of each attempt."""
    home = Path.home()
    m = lay.mark
    writes = "; ".join(f"echo pwned > {t}" for t in lay.targets)
    fork = ("python3 -c \"\nimport os\nn = 0\ntry:\n"
            f"    for _ in range({FORKS}):\n        if os.fork() == 0:\n"
            f"            os.execvp('sleep', ['sleep', '{m}'])\n        n += 1\n"
            "except OSError as exc:\n    print('refused after', n, 'forks:', exc)\n"
            "else:\n    print('forked', n)\n\"")
    return {
        "read_shadow": "cat /etc/shadow",
        "read_home": f"ls -A {home} {home}/.ssh; cat {home}/.ssh/id_* {home}/.ssh/authorized_keys",
        "read_parent": f"ls -A ..; cat ../{lay.sibling.name} {lay.sibling}",
        "read_api_keys": ("env; cat /proc/$PPID/environ /proc/1/environ "
                          f"/proc/{lay.probe_pid}/environ; "
                          "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done"),
        "read_archive": (f"ls -A {lay.data.name}; ls {lay.data.name}/jobs; head -c 16 "
                         f"{lay.data.name}/jobs/*/archive.sqlite3; echo; "
                         f"echo planted > {lay.data.name}/{lay.planted.name}"),
        "write_outside": writes + "; true",
        "connect_loopback": f"exec 3<>/dev/tcp/127.0.0.1/{lay.port} && echo connected",
        "fork_2000": fork,
        "leave_process": (f"setsid sleep {m} & nohup sleep {m} >/dev/null 2>&1 & "
                          f"( sleep {m} & ); setsid -f sleep {m}; sleep {m} & disown; "
                          "echo started"),
    }


def write_job(lay: Layout, commands: dict[str, str]) -> None:
    """task.yaml and replies.yaml (JSON, which YAML reads) in ``lay.root``."""
    task = {
        "goal": "Probe the command sandbox: every step tries to get out of it",
        "workspace": str(lay.workspace), "pipeline": ["PA", "DA", "CA", "AA"],
        "budgets": {"turns": {"DA": len(commands) + 3}},
        # true only inside the sandbox (the host has /etc/shadow): checks are confined too
        "checks": [{"command": "test -s probe-done && test ! -e /etc/shadow"}],
    }
    da = [{"bash": {"command": f"echo '@@ {name}'; {command}"}}
          for name, command in commands.items()]
    da += [{"write_file": {"path": "probe-done", "content": "done\n"}},
           {"finish": {"summary": "tried every way out"}}]
    replies = {
        "PA": [{"finish": {"steps": [f"try {name}" for name in commands]}}],
        "DA": da,
        "CA": [{"run_checks": {}}, {"finish": {"notes": "checked"}}],
        "AA": [{"finish": {"decision": "done", "report": "probe finished"}}],
    }
    (lay.root / "task.yaml").write_text(json.dumps(task, indent=1), encoding="utf-8")
    (lay.root / "replies.yaml").write_text(json.dumps(replies, indent=1), encoding="utf-8")


def bash_steps(data: Path, job: str) -> dict[str, Step]:
    """DA's bash results from the job's archive, by attempt name."""
    from gliding.memory.archive.store import Archive

    steps: dict[str, Step] = {}
    with Archive.open(data, job, create=False) as arch:
        for item in arch.list("result"):
            if item.meta.get("tool") != "bash":
                continue
            text = arch.get(item.iri).text()
            status, _, output = text.partition("\n")
            first, _, rest = output.partition("\n")
            if first.startswith("@@ "):
                steps[first[3:].strip()] = Step(status, rest)
    return steps


def processes(needle: str) -> list[str]:
    """Host processes with ``needle`` on their command line (zombies have none)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in raw:
            found.append(entry.name + ": " + raw.replace(b"\0", b" ").decode(errors="replace"))
    return found


def wait_gone(needle: str, within_s: float = 3.0) -> list[str]:
    deadline = time.monotonic() + within_s
    while (left := processes(needle)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def cgroup_of(pid: str) -> Path | None:
    """The gliding-* pids cgroup a host process runs in (None: none, or it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if not Path(rel).name.startswith("gliding-"):
            continue
        bases = (("/sys/fs/cgroup/pids",) if "pids" in controllers.split(",") else
                 ("/sys/fs/cgroup/unified", "/sys/fs/cgroup") if controllers == "" else ())
        for base in bases:
            if Path(base + rel).is_dir():
                return Path(base + rel)
    return None


def run_watching(argv: list[str], cwd: Path, env: dict[str, str], mark: str,
                 ) -> tuple[int, str, str, int, set[Path]]:
    """Run the job; meanwhile note the host processes with ``mark`` and their cgroups.
    Returns its exit code, stdout, stderr, the most marked processes seen at once, and the
    cgroups they ran in."""
    seen: set[Path] = set()
    most = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err)  # noqa: S603
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            marked = processes(mark)
            most = max(most, len(marked))
            seen.update(c for line in marked if (c := cgroup_of(line.split(":")[0])))
            time.sleep(0.02)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"), most, seen)


def connections(server: socket.socket) -> int:
    count = 0
    while select.select([server], [], [], 0)[0]:
        conn, _ = server.accept()
        conn.close()
        count += 1
    return count


def _short(text: str, limit: int = 160) -> str:
    one = " | ".join(line for line in text.splitlines() if line.strip())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def toolchain_ways(lay: Layout) -> set[str]:
    """The home's entries the job's sandbox shows as the path to a toolchain prefix mounted
    read-only (``~/.pyenv`` leading to ``~/.pyenv/versions/3.11.7``; docs/tools.md, "The
    toolchain"), resolved as the job did, from this environment."""
    from gliding.config.settings import ToolSettings
    from gliding.config.task import load_task
    from gliding.tools.toolchain import resolve_toolchain

    home = Path(os.path.realpath(Path.home()))
    with contextlib.redirect_stdout(sys.stderr):  # its debug log line: stdout is the JSON
        chain = resolve_toolchain(ToolSettings(), load_task(lay.root / "task.yaml"),
                                  data_dir=lay.data, environ=os.environ)
    return {m.relative_to(home).parts[0] for m in chain.mounts
            if m != home and m.is_relative_to(home)}


def judge(lay: Layout, steps: dict[str, Step], left: list[str],
          connected: int) -> list[dict[str, Any]]:
    """One verdict per attempt: refused, with the evidence from the result and the host."""
    home = Path.home()
    home_names = {p.name for p in home.iterdir()} if home.is_dir() else set()
    shadow = Path("/etc/shadow")

    def read_shadow(s: Step) -> tuple[bool, str]:
        leaked = any(line.startswith("root:") for line in s.output.splitlines())
        return (s.failed and not leaked,
                f"host has /etc/shadow: {shadow.exists()}; sandbox: {_short(s.output)}")

    ways = toolchain_ways(lay)

    def read_home(s: Step) -> tuple[bool, str]:
        shown = home_names & {line.strip() for line in s.output.splitlines()} - ways
        return (s.failed and not shown,
                f"{len(home_names)} entries in the host's {home}, {len(shown)} shown besides "
                f"the way to the toolchain ({', '.join(sorted(ways)) or 'none'}); "
                f"sandbox: {_short(s.output)}")

    def read_parent(s: Step) -> tuple[bool, str]:
        leaked = lay.secret in s.output or lay.sibling.name in s.output.split()
        return (s.failed and not leaked, f"the sibling secret shown: {leaked}; "
                f"`ls -A ..` shows: {s.output.split()[:1]}")

    def read_api_keys(s: Step) -> tuple[bool, str]:
        mine = Path(f"/proc/{lay.probe_pid}/environ").read_bytes()
        return (lay.secret not in s.output,
                f"the key is in the host's /proc/{lay.probe_pid}/environ: "
                f"{lay.secret.encode() in mine}; in the output: {lay.secret in s.output}")

    def read_archive(s: Step) -> tuple[bool, str]:
        listed = "jobs" in s.output.split() or "SQLite format" in s.output
        reached = lay.planted.exists()
        return (not listed and not reached,
                f"data dir listed or archive read: {listed}; planted file on the host: "
                f"{reached}")

    def write_outside(s: Step) -> tuple[bool, str]:
        there = [str(t) for t in lay.targets if os.path.lexists(t)]
        return (not there, f"{len(lay.targets)} targets, on the host: {there or 'none'}; "
                f"sandbox: {_short(s.output)}")

    def connect_loopback(s: Step) -> tuple[bool, str]:
        return (s.failed and "connected" not in s.output.split() and connected == 0,
                f"listener got {connected} connection(s); sandbox: {_short(s.output)}")

    def fork_2000(s: Step) -> tuple[bool, str]:
        refused = "refused after" in s.output
        return (refused and not left, f"{_short(s.output)}; processes left: {len(left)}")

    def leave_process(s: Step) -> tuple[bool, str]:
        return (not left, f"sandbox: {_short(s.output)}; alive after the job: {len(left)}")

    judges: dict[str, Callable[[Step], tuple[bool, str]]] = {
        "read_shadow": read_shadow, "read_home": read_home, "read_parent": read_parent,
        "read_api_keys": read_api_keys, "read_archive": read_archive,
        "write_outside": write_outside, "connect_loopback": connect_loopback,
        "fork_2000": fork_2000, "leave_process": leave_process,
    }
    results = []
    for name, verdict in judges.items():
        step = steps.get(name)
        if step is None:
            results.append({"attempt": name, "refused": False,
                            "evidence": "the step left no bash result: cannot judge"})
            continue
        refused, evidence = verdict(step)
        results.append({"attempt": name, "refused": refused,
                        "evidence": f"{step.exit}; {evidence}"})
    return results


def run(lay: Layout) -> dict[str, Any]:
    commands = attempts(lay)
    write_job(lay, commands)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GLIDING_TOOLS__BASH__TIMEOUT_S": str(TIMEOUT_S)}
    argv = [str(GLIDING), "run", "task.yaml", "--model", "scripted:replies.yaml",
            "--data-dir", str(lay.data), "--json"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", lay.port))
        server.listen(8)
        server.setblocking(False)
        code, stdout, stderr, most, seen = run_watching(argv, lay.root, env, lay.mark)
        connected = connections(server)
    left = wait_gone(lay.mark)
    time.sleep(0.2)  # what the job left: nothing of it runs, so its cgroups are gone or stay
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        report = {}
    steps: dict[str, Step] = {}
    status = None
    if report.get("job"):
        from gliding.memory.archive.store import Archive

        steps = bash_steps(lay.data, report["job"])
        with Archive.open(lay.data, report["job"], create=False) as arch:
            status = arch.get_meta("status")
    results = judge(lay, steps, left, connected)
    host = {
        "files_written": [str(t) for t in (*lay.targets, lay.planted) if os.path.lexists(t)],
        "processes_left": left,
        "listener_connections": connected,
        "cgroups_left": sorted(str(c) for c in seen if c.exists()),
    }
    host_changed = any(bool(v) for v in host.values())
    host["marked_processes_seen"] = most  # while the job ran: the attempts did run
    host["cgroups_seen"] = len(seen)
    clean = code == 0 and report.get("outcome") == "success" and status == "success"
    return {
        "attempts": len(results), "refused": sum(1 for r in results if r["refused"]),
        "host_changed": host_changed, "host": host,
        "job_outcome": report.get("outcome"), "job_status": status,
        "job_exit_code": code, "job_clean": clean, "job": report.get("job"),
        "checks": [{"check": c["check"], "status": c["status"]}
                   for c in report.get("checks", [])],
        "sandbox": next((line.split(": ", 1)[1] for line in stderr.splitlines()
                         if ": sandbox: " in line), None),
        "job_stderr_tail": stderr.strip().splitlines()[-5:] if not clean else [],
        "results": results,
    }


def layout(workspace: Path | None, probe_pid: int) -> tuple[Layout, Path]:
    """Where everything goes, and the temporary directory to remove afterwards."""
    mark = f"1000.{uuid.uuid4().int % 10**12:012d}"  # a valid `sleep` argument
    temp = None
    if workspace is None:
        temp = Path(tempfile.mkdtemp(prefix="gliding-probe-"))
        workspace = temp / "ws"
    workspace = workspace.resolve()
    workspace.mkdir(parents=True, exist_ok=True)
    root = temp or Path(tempfile.mkdtemp(prefix="gliding-probe-job-"))
    parent = workspace.parent
    with socket.socket() as free:  # a port free now; the probe listens on it for the job
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    name = f"gliding-probe-{mark}"
    data = workspace / ".gliding"
    lay = Layout(
        root=root, workspace=workspace, parent=parent, data=data, mark=mark,
        secret=os.environ[KEY_NAMES[0]], sibling=parent / f"{name}.secret",
        planted=data / f"{name}.planted",
        targets=(Path("/usr") / name, Path("/etc") / name, parent / name, Path("/tmp") / name,
                 Path.home() / name),
        port=port, probe_pid=probe_pid)
    lay.sibling.write_text(lay.secret + "\n", encoding="utf-8")
    return lay, root


def clean_up(lay: Layout, remove: Path) -> None:
    """Remove what the probe planted, and anything an attempt managed to write."""
    for path in (lay.sibling, lay.planted, *lay.targets):
        if os.path.lexists(path) and not path.is_dir():
            path.unlink()
    shutil.rmtree(remove, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON")
    parser.add_argument("--workspace", type=Path, default=None,
                        help="the job's workspace (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the JSON on stdout")
    opts = parser.parse_args()
    if os.environ.get(MARKED) is None:  # put the fake keys where a real Gliding has them
        secret = f"sk-probe-{uuid.uuid4().hex}"
        env = {**os.environ, MARKED: "1", **dict.fromkeys(KEY_NAMES, secret)}
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)  # noqa: S606
    lay, remove = layout(opts.workspace, os.getpid())
    try:
        result = run(lay)
    finally:
        clean_up(lay, remove)
    text = json.dumps(result, indent=2)
    opts.out.write_text(text + "\n", encoding="utf-8")
    if opts.json:
        print(text)
    else:
        for r in result["results"]:
            print(f"{'refused' if r['refused'] else 'NOT REFUSED':12} {r['attempt']:18} "
                  f"{r['evidence']}")
        print(f"{result['refused']}/{result['attempts']} refused, host changed: "
              f"{result['host_changed']}, job: {result['job_outcome']} "
              f"(exit code {result['job_exit_code']})")
    ok = (result["refused"] == result["attempts"] and not result["host_changed"]
          and result["job_clean"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
