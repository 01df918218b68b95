"""The sandbox every model-chosen command runs in: ``bash`` calls and command checks.

With ``tools.sandbox: bwrap`` (the default) a command runs under bubblewrap:

- the workspace is the only place it may write (read-write, its cwd); the data directory is
  hidden when it lies inside the workspace, so the archive cannot be read or rewritten, and
  the git directory the workspace had when the job started is read-only unless the task says
  ``git_writes: true`` (``protected.git_paths``: its hooks and config run on the host);
- ``/usr`` (and ``/bin``, ``/lib``, ... where they are real directories or links) and ``/opt``
  read-only; of ``/etc`` only what programs need to start and resolve names (``ETC_KEPT``),
  with a ``passwd`` and ``group`` of its own: no shadow, no keys, no home directory;
- the toolchain (``toolchain.py``), read-only: the interpreters and tools the host's PATH and
  virtual environment resolve to (their prefixes only, never a credential or configuration
  directory), with the sandbox's own PATH and a ``python`` link where only ``python3`` exists;
- a private ``/tmp`` (``HOME`` and ``TMPDIR`` point there), its own ``/proc`` and ``/dev``;
- new user, PID, IPC, UTS, cgroup and network namespaces: it sees no process of the host
  (Gliding's environment and API keys among them), it has no network unless the task or
  ``tools.network`` allows it, every process it starts dies when the command or Gliding does
  (PID 1 of the namespace is the command's parent; ``--die-with-parent``), and all
  capabilities are dropped;
- resource limits: CPU seconds, address space, file size (``tools.limits``) as hard rlimits,
  and processes in a pids cgroup of its own where the host lets Gliding make one (else as an
  rlimit, which binds every user but root);
- the environment holds only ``tools.env_allow`` variables that do not look like secrets.

With ``tools.sandbox: off`` commands run on the host with only the cwd, the scrubbed
environment and the process-group kill; the job says so loudly when it starts. Where
bubblewrap cannot run, a job refuses to start unless the sandbox is set off explicitly.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import structlog

from gliding.config.settings import ToolSettings
from gliding.errors import SandboxError
from gliding.tools.toolchain import Toolchain
from gliding.tools.toolchain_plan import SYSTEM_DIRS

log = structlog.get_logger(__name__)
ETC_KEPT = (
    "alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version",
    "environment", "gai.conf", "gitconfig", "host.conf", "hosts", "inputrc", "ld.so.cache",
    "ld.so.conf", "ld.so.conf.d", "locale.alias", "localtime", "magic", "magic.mime",
    "mime.types", "networks", "nsswitch.conf", "os-release", "profile", "protocols",
    "python3", "python3.11", "resolv.conf", "services", "ssl", "timezone",
)
PASSWD = ("root:x:0:0:root:/tmp:/bin/bash\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
GROUP = "root:x:0:\nnogroup:x:65534:\n"
UNPROTECTED = (
    "tools.sandbox is off: bash and check commands, and the task's own stdio MCP servers, run "
    "unconfined on this host. They can read "
    "every file this user can (the home directory, SSH keys, other projects), read the "
    "environment of Gliding's own process through /proc (API keys included), write anywhere "
    "this user can (the archive included), reach the network, and leave processes behind "
    "(setsid). Only the cwd, a scrubbed environment and the process-group kill apply."
)
_CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    cpu_s: int  # CPU seconds of one process
    memory_mb: int  # address space of one process
    processes: int  # processes of one command at once
    file_size_mb: int  # the largest file it may write


@dataclass(frozen=True)
class Sandbox:
    """How commands of one job are confined. ``hidden``: paths inside the workspace the
    command must not see (the data directory); ``readonly``: real paths inside the workspace
    it may read but not change, rename or remove (its git directory, ``protected.git_paths``);
    ``toolchain``: what it gets read-only besides the system (``resolve_toolchain``), and its
    PATH. The file tools keep to ``hidden`` and ``readonly`` too (``protected.tool_guard``)."""

    mode: str  # "bwrap" or "off"
    network: bool
    limits: Limits
    hidden: tuple[Path, ...] = ()
    bwrap: str = "bwrap"
    toolchain: Toolchain = Toolchain()
    readonly: tuple[Path, ...] = ()

    @classmethod
    def of(cls, settings: ToolSettings, *, network: bool | None = None,
           hidden: Sequence[Path] = (), toolchain: Toolchain | None = None,
           readonly: Sequence[Path] = ()) -> Sandbox:
        """The sandbox ``settings`` ask for; ``network`` (the task's wish) overrides
        ``tools.network`` only to allow it."""
        lim = settings.limits
        return cls(settings.sandbox, bool(network) or settings.network,
                   Limits(lim.cpu_s, lim.memory_mb, lim.processes, lim.file_size_mb),
                   tuple(Path(p) for p in hidden), toolchain=toolchain or Toolchain(),
                   readonly=tuple(Path(p) for p in readonly))

    @property
    def confined(self) -> bool:
        return self.mode == "bwrap"

    def describe(self) -> str:
        """One line for the job's start: what confines its commands."""
        if not self.confined:
            return "sandbox: off (commands run unconfined)"
        net = "network allowed" if self.network else "no network"
        return (f"sandbox: bubblewrap (workspace read-write, system read-only, no home, {net}, "
                f"{self.limits.processes} processes, {self.limits.memory_mb} MB, "
                f"{self.limits.cpu_s} CPU s)") + (
                    "; git directory read-only" if self.readonly else "") + (
                    f"; {self.toolchain.describe()}" if self.toolchain.path else "")

    def require(self) -> None:
        """Refuse when bubblewrap cannot run here; with the sandbox off, say what is open.

        Raises:
            SandboxError: the sandbox is on and bubblewrap is missing or fails.
        """
        if not self.confined:
            log.warning("sandbox.off", unprotected=UNPROTECTED)
            return
        problem = bwrap_problem(self.bwrap)
        if problem is not None:
            raise SandboxError(
                f"the command sandbox cannot run: {problem}",
                hint="install bubblewrap (Debian: apt-get install bubblewrap; "
                     "scripts/setup.sh does it where it can), or set tools.sandbox: off to run "
                     "commands unconfined (not recommended)")

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The command's environment: ``base`` with the toolchain's PATH, VIRTUAL_ENV and
        PYTHONUSERBASE, and HOME and TMPDIR in the private /tmp."""
        env = self.toolchain.env(base, confined=self.confined)
        if self.confined:
            env["HOME"] = env["TMPDIR"] = "/tmp"
        return env

    def argv(self, command: str, workspace: Path, identity: tuple[int, int] = (-1, -1)
             ) -> list[str]:
        """What to execute for ``command`` (a bash command line) in ``workspace``.
        ``identity``: readable fds of the sandbox's passwd and group (``identity_fds``),
        inherited by the process.

        Raises:
            ToolError: a toolchain path is no longer the real path it was checked as (a
                directory swapped for a symlink since the job started).
        """
        inner = ["/bin/bash", "-c", self._limits_script(), command]
        if not self.confined:
            return inner
        self.toolchain.recheck()
        ws = str(workspace)
        args = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-all",
                "--cap-drop", "ALL", "--hostname", "gliding-sandbox"]
        if self.network:
            args.append("--share-net")
        for system in SYSTEM_DIRS:
            if os.path.islink(system):
                args += ["--symlink", os.readlink(system), system]
            elif os.path.isdir(system):
                args += ["--ro-bind", system, system]
        for name in ETC_KEPT:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        passwd, group = identity
        if passwd >= 0 and group >= 0:
            args += ["--ro-bind-data", str(passwd), "/etc/passwd",
                     "--ro-bind-data", str(group), "/etc/group"]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run",
                 *self.toolchain.bwrap_args(), "--bind", ws, ws]
        real_ws = os.path.realpath(ws)
        for keep in self.readonly:  # before the hidden: a data dir inside stays hidden
            if _still(keep, workspace):  # where the workspace is bound: below ws
                there = os.path.join(ws, os.path.relpath(keep, real_ws))
                args += ["--ro-bind", str(keep), there]
        for hide in self.hidden:
            if os.path.isdir(hide) and _inside(hide, workspace):  # never made on the host
                args += ["--tmpfs", os.path.realpath(hide)]
        # the root itself read-only: a write anywhere but the workspace and /tmp is an error
        return [*args, "--remount-ro", "/", "--chdir", ws, "--", *inner]

    def _limits_script(self) -> str:
        """Set the hard rlimits, then run the command (``$0``)."""
        lim = self.limits
        parts = [f"ulimit -t {lim.cpu_s}", f"ulimit -v {lim.memory_mb * 1024}",
                 f"ulimit -f {lim.file_size_mb * 1024}"]
        if os.geteuid() != 0:  # root is exempt from RLIMIT_NPROC: the pids cgroup bounds it
            parts.append(f"ulimit -u {lim.processes}")
        return " && ".join(parts) + ' && exec /bin/bash -c "$0"'


@functools.lru_cache(maxsize=4)
def bwrap_problem(bwrap: str = "bwrap") -> str | None:
    """Why bubblewrap cannot confine a command here, or None when it can (tried once)."""
    path = shutil.which(bwrap)
    if path is None:
        return f"{bwrap} is not installed"
    try:
        done = subprocess.run(  # noqa: S603 - fixed argv
            [path, "--die-with-parent", "--unshare-all", "--ro-bind", "/", "/", "--proc",
             "/proc", "--dev", "/dev", "--", "/bin/true"],
            capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} failed to start: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return f"{bwrap} failed: {why[-1] if why else f'exit code {done.returncode}'}"
    return None


def identity_fds() -> tuple[int, int]:
    """Pipes holding the sandbox's passwd and group, for ``--ro-bind-data``: readable ends
    the caller passes to the process and closes afterwards (nothing is left on disk)."""
    fds = []
    for data in (PASSWD, GROUP):
        read, write = os.pipe()
        with os.fdopen(write, "w", encoding="ascii") as out:  # far below a pipe's buffer
            out.write(data)
        fds.append(read)
    return fds[0], fds[1]


def _still(path: Path, workspace: Path) -> bool:
    """Whether ``path`` (a real path when the job started) still is one, inside ``workspace``:
    bubblewrap follows a symlink, and a mount is never made outside the workspace."""
    return os.path.lexists(path) and os.path.realpath(path) == str(path) and _inside(
        path, workspace)


def _inside(path: Path, root: Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    except ValueError:
        return False
    return True


def make_pids_cgroup(limit: int) -> Path | None:
    """A fresh pids cgroup allowing ``limit`` processes, or None where the host does not let
    this process make one (then only the rlimit bounds processes, and not for root)."""
    for root in _CGROUP_ROOTS:
        base = Path(root)
        if not (base / "cgroup.procs").exists():
            continue
        if root != "/sys/fs/cgroup/pids" and "pids" not in _controllers(base):
            continue
        made = base / f"gliding-{uuid.uuid4().hex[:12]}"
        try:
            made.mkdir()
            (made / "pids.max").write_text(str(limit), encoding="ascii")
        except OSError:
            with suppress(OSError):
                made.rmdir()
            continue
        return made
    return None


def _controllers(base: Path) -> set[str]:
    try:
        return set((base / "cgroup.controllers").read_text(encoding="ascii").split())
    except OSError:
        return set()


def remove_cgroup(path: Path) -> None:
    """Remove a command's cgroup. rmdir fails while a process is still in it; the caller
    killed them all, so retry briefly while the kernel reaps them."""
    for _ in range(50):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    log.warning("sandbox.cgroup.left", path=str(path))
