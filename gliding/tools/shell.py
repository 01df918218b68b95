"""The bash tool and the sandbox it shares with command checks.

A command runs as ``/bin/bash -c`` in its own session (so its own process group), with the
workspace as cwd, no stdin, stdout and stderr merged, and an environment holding only
allow-listed variables that do not look like secrets. When the command ends, times out,
floods its output, or the caller is cancelled, the whole process group gets SIGKILL, so
background children and grandchildren die with it. Output is read as it comes and kept
whole up to ``tools.bash.archive_max_bytes`` (16 MiB): in memory up to
``tools.bash.max_output_bytes``, past that in a temporary file; a command that prints more is
killed and the excess only counted. The whole output is the tool's result: the agent loop
archives it in L0 and the context engine shows a large one as its summary and IRI, so nothing
the command printed within the cap is lost. A process that leaves the group (setsid) escapes;
containing that needs cgroups or a container, which is the daemon's concern.

With ``began`` (the bash tool gets it from ``ToolContext.began``), the bash process first writes
its pid to that file and then ``exec``s the command: a resumed job that finds the file knows the
command began (its effects are unknown; ``stop_orphan`` stops it if it still runs), and one
that does not find it knows it never ran.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.abc import Process

from gliding.config.settings import ToolSettings
from gliding.errors import ToolError
from gliding.tools.base import Tool, ToolContext, prop, schema
from gliding.tools.sandbox import (
    Sandbox,
    bwrap_problem,
    identity_fds,
    make_pids_cgroup,
    remove_cgroup,
)
from gliding.tools.toolchain_plan import DEFAULT_PATH
from gliding.tools.workspace import workspace_root

TAIL_BYTES = 2048  # the last bytes of output kept for check evidence
DRAIN_GRACE_S = 0.5  # how long to keep reading after the command and its group are gone
_SIGNAL_NAMES = {int(s): s.name for s in signal.Signals}
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?)?KEY$|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE
)


def is_secret_name(name: str) -> bool:
    """True for names like OPENAI_API_KEY, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD."""
    return bool(_SECRET_NAME.search(name))


def filtered_env(allow: Sequence[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed variables present in ``environ``, never one that looks like a secret.

    PATH falls back to a minimal default so ``bash`` still finds the usual tools.
    """
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in allow if k in source and not is_secret_name(k)}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


@dataclass(frozen=True)
class CommandResult:
    """How a sandboxed command ended and what it printed (head kept, the rest counted)."""

    exit_code: int | None  # None when it was killed by us
    output: str  # the whole output up to ``archive_max_bytes``, decoded
    tail: str  # the last TAIL_BYTES bytes, decoded
    cut_bytes: int  # bytes past ``archive_max_bytes`` that were counted, not kept
    spilled: bool  # the output passed ``max_output_bytes`` and went to a temporary file
    timed_out: bool
    flooded: bool
    timeout_s: float
    flood_limit: int
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def status_line(self) -> str:
        if self.timed_out:
            return f"killed after {self.timeout_s:g}s timeout"
        if self.flooded:
            return f"killed after more than {self.flood_limit} bytes of output"
        code = self.exit_code
        if code is not None and -code in _SIGNAL_NAMES:
            return f"exit code {code} (killed by {_SIGNAL_NAMES[-code]})"
        return f"exit code {code}"

    def render(self) -> str:
        """The tool's result: status line and the whole output (archived whole in L0; the
        context engine shows a large one as its summary and IRI), and a notice for what was
        past the archive cap."""
        parts = [self.status_line(), self.output.rstrip("\n") or "(no output)"]
        if self.cut_bytes:
            parts.append(f"[output past the {self.flood_limit}-byte cap "
                         f"(tools.bash.archive_max_bytes): {self.cut_bytes} more bytes not kept]")
        return "\n".join(parts)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# on the host, before the sandbox: join the command's pids cgroup ($0, may be empty), write the
# pid to the mark ($1, may be empty), then become the sandbox (the rest); the pid stays the
# session leader that stop_orphan looks for
_ENTER = ('if [ -n "$0" ]; then echo $$ > "$0/cgroup.procs" || exit 126; fi; '
          'if [ -n "$1" ]; then echo $$ > "$1" || exit 126; fi; shift; umask 022; exec "$@"')
# umask 022 for the command (after its begin mark, which stays private): Gliding's own files are
# born 0600 (daemon/private.py), a workspace's files are the user's, with their usual modes


def entering(cgroup: Path | None, began: Path | None, argv: Sequence[str]) -> list[str]:
    """``argv`` (the sandbox's) run by a host shell that first joins ``cgroup`` and writes its
    pid to ``began`` (either may be None), then ``exec``s it, keeping its pid."""
    return ["/bin/bash", "-c", _ENTER, str(cgroup or ""), str(began or ""), *argv]


def stop_orphan(began: Path) -> bool:
    """Kill the process group of a command a killed job left running, if it still runs.

    ``began`` holds the pid (= process group: the command leads its own session) it ran as.
    The group is killed only while that pid is still a session leader that started before
    ``began`` was written, so a reused pid is left alone. Returns whether a group was killed.
    Raises nothing.
    """
    try:
        pid = int(began.read_text().strip())
        marked = began.stat().st_mtime
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    session, start_ticks = int(fields[3]), int(fields[19])  # stat fields 6 and 22
    started = boot + start_ticks / os.sysconf("SC_CLK_TCK")
    if session != pid or started > marked + 1.0:  # btime has whole seconds
        return False
    _kill_group(pid)
    return True


async def run_command(
    command: str, workspace: Path, settings: ToolSettings, *, timeout_s: float | None = None,
    began: Path | None = None, sandbox: Sandbox | None = None, stdin: bytes | None = None,
) -> CommandResult:
    """Run ``command`` with bash in the workspace, confined by ``sandbox`` (by default the one
    ``settings`` ask for), and wait for it and every process it started. ``stdin``: what it
    reads on its standard input (None: nothing, /dev/null).

    Raises:
        ToolError: the workspace is missing, the sandbox cannot run, or bash cannot be started.
    """
    cwd = workspace_root(workspace)
    if not await anyio.to_thread.run_sync(os.path.isdir, cwd):
        raise ToolError(f"workspace {cwd} does not exist")
    box = sandbox if sandbox is not None else Sandbox.of(settings)
    if box.confined and (problem := await anyio.to_thread.run_sync(bwrap_problem,
                                                                   box.bwrap)) is not None:
        raise ToolError(f"the command sandbox cannot run: {problem}",
                        hint="install bubblewrap, or set tools.sandbox: off")
    timeout = settings.bash.timeout_s if timeout_s is None else timeout_s
    flood_limit = settings.bash.archive_max_bytes
    with anyio.CancelScope(shield=True):  # made, it is removed below whatever happens
        cgroup = (await anyio.to_thread.run_sync(make_pids_cgroup, box.limits.processes)
                  if box.confined else None)
    try:
        identity = identity_fds() if box.confined else (-1, -1)
        try:
            argv = entering(cgroup, began, box.argv(command, Path(cwd), identity))
            proc = await anyio.open_process(
                argv,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=box.env(filtered_env(settings.env_allow)),
                start_new_session=True,
                pass_fds=[fd for fd in identity if fd >= 0],
            )
        except OSError as exc:
            raise ToolError(f"cannot start bash: {exc}") from exc
        finally:
            for fd in identity:
                if fd >= 0:
                    os.close(fd)
        return await _wait(proc, settings, timeout, flood_limit, stdin)
    finally:
        if cgroup is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(remove_cgroup, cgroup)


async def _wait(proc: Process, settings: ToolSettings, timeout: float,  # noqa: ASYNC109
                flood_limit: int, feed: bytes | None = None) -> CommandResult:
    """Read the output of ``proc`` while it runs (writing ``feed`` to its stdin meanwhile,
    then closing it); kill its group when it ends, times out or floods."""
    pgid = proc.pid  # start_new_session: bash leads a new session and process group
    started = anyio.current_time()
    # the output is kept whole up to the archive cap: in memory up to max_output_bytes, then
    # in a temporary file on disk, so a chatty command never holds more than that in memory
    in_memory = settings.bash.max_output_bytes
    kept = tempfile.SpooledTemporaryFile(max_size=in_memory)  # noqa: SIM115
    tail = b""
    total = 0
    flooded = False
    exited = False
    pump_done = anyio.Event()

    async def pump() -> None:
        nonlocal tail, total, flooded
        try:
            if proc.stdout is None:  # cannot happen with stdout=PIPE; for the type checker
                return
            async for chunk in proc.stdout:
                if total < flood_limit:
                    part = chunk[: flood_limit - total]
                    if total + len(part) > in_memory:  # on disk now: write off the event loop
                        await anyio.to_thread.run_sync(kept.write, part)
                    else:
                        kept.write(part)
                total += len(chunk)
                tail = (tail + chunk)[-TAIL_BYTES:]
                if total > flood_limit and not flooded:
                    flooded = True
                    _kill_group(pgid)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            pump_done.set()

    async def write() -> None:  # a command that reads none of it closes the pipe: fine
        if proc.stdin is None or feed is None:
            return
        try:
            await proc.stdin.send(feed)
            await proc.stdin.aclose()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass

    try:
        with anyio.move_on_after(timeout) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pump)
                tg.start_soon(write)
                await proc.wait()
                exited = True
                _kill_group(pgid)  # background jobs the command left behind
                with anyio.move_on_after(DRAIN_GRACE_S):
                    await pump_done.wait()
                tg.cancel_scope.cancel()
    except BaseException:
        kept.close()
        raise
    finally:
        with anyio.CancelScope(shield=True):
            _kill_group(pgid)
            await proc.aclose()
    try:
        data = await anyio.to_thread.run_sync(_read_all, kept)
    finally:
        kept.close()
    timed_out = deadline.cancelled_caught and not exited
    return CommandResult(
        exit_code=None if timed_out or flooded else proc.returncode,
        output=data.decode("utf-8", errors="replace"),
        tail=tail.decode("utf-8", errors="replace"),
        cut_bytes=max(0, total - len(data)),
        spilled=len(data) > settings.bash.max_output_bytes,
        timed_out=timed_out,
        flooded=flooded and not timed_out,
        timeout_s=timeout,
        flood_limit=flood_limit,
        elapsed_s=anyio.current_time() - started,
    )


def _read_all(kept: IO[bytes]) -> bytes:
    kept.seek(0)
    return kept.read()


async def _bash(args: dict[str, Any], ctx: ToolContext) -> str:
    result = await run_command(args["command"], ctx.workspace, ctx.settings, began=ctx.began,
                               sandbox=ctx.sandbox)
    return result.render()


BASH = Tool(
    "bash",
    "Run a bash command in the workspace; returns exit code and output.",
    schema(["command"], command=prop("string", "bash command line")),
    _bash,
    idempotent=False,
    marks_begin=True,
)
