"""A task's own stdio MCP server, run inside the job's command sandbox.

A server a task file declares (``mcp_servers``) is a program the task chose, so it gets what
the task's commands get, from the job's ``Sandbox``: its ``argv`` (the same bubblewrap mounts,
namespaces, rlimits and toolchain as ``bash`` and command checks: the workspace read-write and
the cwd, the system and the toolchain read-only, the data directory hidden, the git directory
read-only unless ``git_writes``, a private ``/tmp`` that is ``HOME``, no network unless the
task grants it), its passwd and group, and a pids cgroup of its own where the host lets
Gliding make one. bubblewrap passes stdin and stdout through, so the MCP pipes reach the
server itself. npm is told to stay offline (``npm_config_offline``): ``npx`` runs a local
install and never downloads a package. The servers of the host's own ``mcp.servers`` are not
confined (the operator chose them), nor is anything when ``tools.sandbox`` is off.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import anyio
import anyio.to_thread
from anyio.abc import Process

from gliding.errors import ToolError
from gliding.tools.sandbox import (
    Sandbox,
    bwrap_problem,
    identity_fds,
    make_pids_cgroup,
    remove_cgroup,
)
from gliding.tools.shell import entering

OFFLINE = {"npm_config_offline": "true"}  # npx and npm: the local install or the cache only


@dataclass(frozen=True)
class Confined:
    """Where a confined server runs: the job's sandbox (confined: ``tools.sandbox`` is
    ``bwrap``) and workspace."""

    sandbox: Sandbox
    workspace: Path

    def env(self, host: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
        """The server's environment: ``host`` (what Gliding passes on: ``tools.env_allow`` and
        its ``pass_env``) with the sandbox's PATH, HOME and TMPDIR, then its own ``env``, then
        npm offline."""
        return {**self.sandbox.env(host), **own, **OFFLINE}

    def line(self, command: str, args: Sequence[str], cwd: Path | None) -> str:
        """The bash command line the sandbox runs: ``exec`` the server (it keeps the shell's
        pid) after a ``cd`` to ``cwd`` when that is not the workspace."""
        run = "exec " + shlex.join([command, *args])
        if cwd is None or os.path.normpath(cwd) == os.path.normpath(self.workspace):
            return run
        return f"cd -- {shlex.quote(str(cwd))} && {run}"

    async def spawn(self, command: str, args: Sequence[str], env: Mapping[str, str],
                    cwd: Path | None, errlog: IO[bytes] | IO[str] | int | None,
                    ) -> tuple[Process, Path | None]:
        """Start the server in the sandbox with pipes for stdin and stdout, in a session of its
        own; the process and its pids cgroup (None where none could be made), which the caller
        removes with ``release`` once the process is gone.

        Raises:
            ToolError: bubblewrap cannot run here, or a toolchain path changed since the job
                started.
            OSError: the host shell that enters the sandbox cannot be started.
        """
        box = self.sandbox
        problem = await anyio.to_thread.run_sync(bwrap_problem, box.bwrap)
        if problem is not None:
            raise ToolError(f"the command sandbox cannot run: {problem}",
                            hint="install bubblewrap, or set tools.sandbox: off")
        with anyio.CancelScope(shield=True):  # made, it is removed whatever happens
            cgroup = await anyio.to_thread.run_sync(make_pids_cgroup, box.limits.processes)
        try:
            identity = identity_fds()
            try:
                argv = entering(cgroup, None, box.argv(self.line(command, args, cwd),
                                                       self.workspace, identity))
                process = await anyio.open_process(
                    argv, env=dict(env), stderr=errlog, cwd=self.workspace,
                    start_new_session=True, pass_fds=identity)
            finally:
                for fd in identity:
                    os.close(fd)
        except BaseException:
            await release(cgroup)
            raise
        return process, cgroup


async def release(cgroup: Path | None) -> None:
    """Remove a confined server's pids cgroup (its processes are gone). Raises nothing."""
    if cgroup is None:
        return
    with anyio.CancelScope(shield=True), suppress(OSError):
        await anyio.to_thread.run_sync(remove_cgroup, cgroup)

