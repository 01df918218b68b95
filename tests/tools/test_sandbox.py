"""The bubblewrap sandbox with real bwrap: every attack a model-chosen command can make gets an
error or lands nowhere, and the host shows it: no file it wrote, no secret in its output, no
process of it left running, no pids cgroup left behind.

Each test runs real commands through ``run_command`` with a ``Sandbox`` of its own (small
limits, a few seconds of timeout) and judges from the host side: the files the command would
have written, the host's /proc scanned for processes carrying the test's unique mark, a
listening socket that counts connections, the cgroups the calls made. Tests that need
bubblewrap skip, saying why, only where ``bwrap_problem`` says it cannot run; CI installs it
(scripts/setup.sh). The unconfined mode's guarantees are tested in test_tools_shell.py.

The file is long on purpose: one test per attack, so a failure names the hole; bugs
(the ones found while writing it are fixed) keep their regression tests at the end.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import BashSettings, LimitSettings, ToolSettings
from gliding.errors import SandboxError, ToolError
from gliding.tools import shell
from gliding.tools.sandbox import (
    ETC_KEPT,
    PASSWD,
    Limits,
    Sandbox,
    bwrap_problem,
    make_pids_cgroup,
    remove_cgroup,
)
from gliding.tools.shell import CommandResult, run_command, stop_orphan

PROBLEM = bwrap_problem()
needs_bwrap = pytest.mark.skipif(
    PROBLEM is not None,
    reason=f"bubblewrap cannot run here ({PROBLEM}); scripts/setup.sh installs it")
# what a sandboxed `python3` finds: the sandbox mounts /usr, not the home a pyenv lives in
HAS_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") is not None
needs_python = pytest.mark.skipif(not HAS_PYTHON, reason="no python3 under /usr on this host")
HOME = Path(os.path.expanduser("~"))


def _can_make_cgroup() -> bool:
    made = make_pids_cgroup(8)
    if made is None:
        return False
    remove_cgroup(made)
    return True


CGROUPS = _can_make_cgroup()
ROOT_UNBOUND = os.geteuid() == 0 and not CGROUPS
bounded_processes = pytest.mark.skipif(
    ROOT_UNBOUND, reason="running as root where Gliding cannot create a pids cgroup: only "
    "RLIMIT_NPROC would bound processes, and it does not bind root (docs/tools.md)")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Host:
    """What a test leaves on the host: its ``mark`` (every process a command starts carries it
    on its command line) and the pids cgroups its calls made."""

    mark: str
    cgroups: list[Path] = field(default_factory=list)


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    """Every test here: afterwards no process with its mark runs and no cgroup it made is left.
    Other cgroups named gliding-* (another test run's) are not this test's business."""
    made = Host(mark=f"1000.{uuid.uuid4().int % 10**12:012d}")  # a valid `sleep` argument
    real = shell.make_pids_cgroup

    def spy(limit: int) -> Path | None:
        path = real(limit)
        if path is not None:
            made.cgroups.append(path)
        return path

    monkeypatch.setattr(shell, "make_pids_cgroup", spy)
    yield made
    assert _wait_gone(made.mark) == [], "processes outlived the test"
    assert [p for p in made.cgroups if p.exists()] == [], "cgroups left behind"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _box(*, network: bool = False, hidden: tuple[Path, ...] = (), cpu_s: int = 30,
         memory_mb: int = 2048, processes: int = 64, file_size_mb: int = 16,
         bwrap: str = "bwrap") -> Sandbox:
    return Sandbox("bwrap", network, Limits(cpu_s, memory_mb, processes, file_size_mb), hidden,
                   bwrap)


async def _run(command: str, ws: Path, *, box: Sandbox | None = None, timeout_s: float = 5.0,
               began: Path | None = None) -> CommandResult:
    return await run_command(command, ws, ToolSettings(bash=BashSettings(timeout_s=timeout_s)),
                             sandbox=box or _box(), began=began)


def _processes(needle: str) -> list[tuple[int, list[str]]]:
    """Host processes (not this one, not zombies) with ``needle`` on their command line."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            raw = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if needle.encode() in raw:
            found.append((int(entry.name), raw.decode(errors="replace").split("\0")[:-1]))
    return found


def _sleepers(mark: str) -> list[int]:
    """Host pids of `sleep <mark>` processes."""
    return [pid for pid, argv in _processes(mark) if argv[-1:] == [mark]
            and os.path.basename(argv[0]) == "sleep"]


def _wait_gone(mark: str, within_s: float = 3.0) -> list[tuple[int, list[str]]]:
    deadline = time.monotonic() + within_s
    while (left := _processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _cgroup_of(pid: int) -> Path | None:
    """The gliding-* pids cgroup directory ``pid`` runs in, seen from the host."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
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


async def _watching(command: str, ws: Path, mark: str, *, box: Sandbox | None = None,
                    timeout_s: float, cancel_at: int | None = None,
                    ) -> tuple[CommandResult | None, int]:
    """Run ``command`` while counting its `sleep <mark>` processes on the host; cancel the call
    once ``cancel_at`` of them run. Returns its result (None when cancelled) and the most seen
    at once. The `sleep <mark>` commands sleep 1000 s: a call that waited for them fails here
    (``fail_after`` is hang protection, not a bound on how long the call takes)."""
    result: CommandResult | None = None
    most = 0
    with anyio.fail_after(timeout_s + 10):
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal most
                while True:
                    most = max(most, len(_sleepers(mark)))
                    if cancel_at is not None and most >= cancel_at:
                        tg.cancel_scope.cancel()
                    await anyio.sleep(0.05)

            async def call() -> None:
                nonlocal result
                result = await _run(command, ws, box=box, timeout_s=timeout_s)
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(call)
    return result, most


@contextmanager
def _listener() -> Iterator[socket.socket]:
    """A real TCP socket listening on a loopback port of the host."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        yield server
    finally:
        server.close()


def _accepted(server: socket.socket, within_s: float) -> int:
    """Connections that reached ``server`` (waiting up to ``within_s`` for the first)."""
    count = 0
    while select.select([server], [], [], within_s if count == 0 else 0)[0]:
        conn, _ = server.accept()
        conn.close()
        count += 1
    return count


# --- reading what is not the workspace ----------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("command", [
    "cat /etc/shadow",
    "cat /etc/gshadow",
    "ls -A /root",
    f"ls -A {HOME}",
    f"ls -A {HOME}/.ssh",
    f"cat {HOME}/.ssh/id_rsa {HOME}/.ssh/authorized_keys",
    "ls /home",
    "ls /sys/fs/cgroup",
    "ls /var",
])
async def test_host_secrets_and_homes_are_not_there(command: str, ws: Path) -> None:
    result = await _run(command, ws)
    assert result.exit_code not in (0, None), result.render()
    assert "No such file or directory" in result.output, result.output


@pytest.mark.skipif(not os.path.exists("/etc/shadow"), reason="this host has no /etc/shadow")
@needs_bwrap
@pytest.mark.anyio
async def test_etc_holds_only_what_programs_need_and_a_passwd_of_its_own(ws: Path) -> None:
    assert os.path.exists("/etc/shadow")  # the host has what the sandbox does not show
    listing = await _run("ls -A /etc", ws)
    passwd = await _run("cat /etc/passwd; cat /etc/group; whoami", ws)
    kept = {name for name in ETC_KEPT if os.path.exists(f"/etc/{name}")}
    assert set(listing.output.split()) == kept | {"passwd", "group"}
    assert passwd.output == PASSWD + "root:x:0:\nnogroup:x:65534:\nroot\n"


@needs_bwrap
@pytest.mark.anyio
async def test_the_workspace_parent_and_links_out_of_the_workspace_show_nothing(
        tmp_path: Path, ws: Path, host: Host) -> None:
    secret = f"sibling-secret-{host.mark}"
    (tmp_path / "sibling.txt").write_text(secret)
    (ws / "link").symlink_to(tmp_path / "sibling.txt")
    (ws / "dirlink").symlink_to(tmp_path)

    listing = await _run("ls -A ..; ls -A dirlink/", ws)
    assert listing.output.split() == ["ws", "ws"]  # the parent holds the workspace, nothing else
    for command in ("cat ../sibling.txt", f"cat {tmp_path}/sibling.txt", "cat link",
                    "cat dirlink/sibling.txt", "cat ../*"):
        result = await _run(command, ws)
        assert result.exit_code not in (0, None), (command, result.render())
        assert secret not in result.output


@needs_bwrap
@pytest.mark.anyio
async def test_glidings_environment_and_api_keys_are_out_of_reach(
        ws: Path, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"sk-fake-{host.mark}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("GLIDING_TEST_TOKEN", secret)
    # a host process that holds the key in the environment it started with, as Gliding does
    # when a shell started it with OPENAI_API_KEY set (setenv does not reach /proc/self/environ)
    holder = subprocess.Popen(["sleep", f"30.{host.mark[5:]}"],  # noqa: ASYNC220 - a fork
                              env={**os.environ})
    try:
        attempts = ["env", "cat /proc/$PPID/environ", "cat /proc/1/environ",
                    f"cat /proc/{os.getpid()}/environ", f"cat /proc/{holder.pid}/environ",
                    "cat /proc/[0-9]*/environ",
                    "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done",
                    "grep -ra sk-fake /proc/*/environ", f"kill -0 {holder.pid}"]
        for command in attempts:
            result = await _run(command, ws)
            assert secret not in result.output, command
        direct = await _run(f"cat /proc/{holder.pid}/environ", ws)
        assert direct.exit_code not in (0, None)
        # the attack is real: unconfined, the same command reads the key
        open_ = await run_command(f"cat /proc/{holder.pid}/environ", ws,
                                  ToolSettings(sandbox="off"))
        assert secret in open_.output
    finally:
        holder.kill()
        holder.wait()


@needs_bwrap
@pytest.mark.anyio
async def test_no_host_process_is_visible_and_no_capability_is_held(ws: Path) -> None:
    result = await _run("ls /proc | grep -E '^[0-9]+$'; grep CapEff /proc/self/status; "
                        f"hostname; kill -0 {os.getpid()} || echo gone", ws)
    lines = result.output.splitlines()
    pids = [int(line) for line in lines if line.isdigit()]
    assert pids and max(pids) < 20, pids  # its own PID namespace: 1 is the sandbox's init
    assert "CapEff:\t0000000000000000" in lines
    assert "gliding-sandbox" in lines
    assert lines[-1] == "gone"


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("through_link", [False, True])
async def test_the_data_directory_inside_the_workspace_is_hidden(
        tmp_path: Path, ws: Path, host: Host, through_link: bool) -> None:
    data = ws / ".gliding"
    archive = data / "jobs" / "j1" / "archive.sqlite3"
    archive.parent.mkdir(parents=True)
    archive.write_text(f"archive-{host.mark}")
    named = data
    if through_link:  # the data dir as settings may name it: through a link to the workspace
        (tmp_path / "wslink").symlink_to(ws)
        named = tmp_path / "wslink" / ".gliding"
    box = Sandbox.of(ToolSettings(), hidden=(named,))

    seen = await _run("ls -A .gliding; cat .gliding/jobs/j1/archive.sqlite3", ws, box=box)
    assert seen.output.splitlines()[0].startswith("cat: "), seen.output  # ls lists nothing
    assert host.mark not in seen.output
    wrote = await _run("echo pwned > .gliding/planted; rm -rf .gliding/jobs; mkdir -p "
                       ".gliding/jobs/j1 && echo forged > .gliding/jobs/j1/archive.sqlite3; "
                       "ls -A .gliding", ws, box=box)
    assert wrote.ok and wrote.output.split() == ["jobs", "planted"]  # in a throwaway tmpfs
    assert archive.read_text() == f"archive-{host.mark}"
    assert sorted(p.name for p in data.iterdir()) == ["jobs"]


# --- writing outside the workspace -------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("where", ["/usr", "/etc", "parent", "/tmp", "home"])
async def test_writes_outside_the_workspace_never_reach_the_host(
        tmp_path: Path, ws: Path, host: Host, where: str) -> None:
    base = {"parent": str(tmp_path), "home": str(HOME)}.get(where, where)
    target = Path(base) / f"gliding-probe-{host.mark}"
    try:
        result = await _run(f"echo x > {target}; mkdir {target}.d; touch {target}.t; "
                            f"ln -s /x {target}.l; echo done", ws)
        assert result.ok and result.output.endswith("done\n")
        if where == "/usr":
            assert "Read-only file system" in result.output
        for suffix in ("", ".d", ".t", ".l"):
            assert not os.path.lexists(f"{target}{suffix}"), f"{target}{suffix} on the host"
    finally:  # a failing test must not leave the probe behind either
        for suffix in ("", ".t", ".l"):
            with_suffix = Path(f"{target}{suffix}")
            if with_suffix.is_symlink() or with_suffix.is_file():
                with_suffix.unlink()
        if Path(f"{target}.d").is_dir():
            Path(f"{target}.d").rmdir()


@needs_bwrap
@pytest.mark.anyio
async def test_the_host_tmp_is_not_the_sandbox_tmp(ws: Path, host: Host) -> None:
    planted = Path("/tmp") / f"gliding-host-{host.mark}"
    planted.write_text("host")
    try:
        result = await _run(f"cat {planted}", ws)
    finally:
        planted.unlink()
    assert result.exit_code not in (0, None) and "host" not in result.output.split()


@needs_bwrap
@pytest.mark.anyio
async def test_the_workspace_itself_is_writable(ws: Path) -> None:
    result = await _run("echo made > inside.txt && mkdir -p sub && echo deep > sub/f", ws)
    assert result.ok, result.render()
    assert (ws / "inside.txt").read_text() == "made\n"
    assert (ws / "sub" / "f").read_text() == "deep\n"


# --- network ---------------------------------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
async def test_no_network_a_loopback_listener_gets_no_connection(ws: Path) -> None:
    with _listener() as server:
        port = server.getsockname()[1]
        result = await _run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", ws)
        assert result.exit_code not in (0, None), result.render()
        assert "connected" not in result.output.split()
        assert await anyio.to_thread.run_sync(_accepted, server, 0.3) == 0


@needs_bwrap
@pytest.mark.anyio
async def test_with_network_allowed_the_listener_is_reached(ws: Path) -> None:
    with _listener() as server:
        port = server.getsockname()[1]
        result = await _run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", ws,
                            box=_box(network=True))
        assert result.ok, result.render()
        assert result.output.split() == ["connected"]
        assert await anyio.to_thread.run_sync(_accepted, server, 2.0) == 1


@needs_bwrap
@needs_python
@pytest.mark.anyio
async def test_no_network_an_abstract_unix_socket_of_the_host_is_unreachable(
        ws: Path, host: Host) -> None:
    name = f"gliding-test-{host.mark}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("\0" + name)
        server.listen(1)
        server.setblocking(False)
        result = await _run(
            f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
            f"s.connect('\\0{name}'); print('connected')\"", ws)
        assert result.exit_code not in (0, None), result.render()
        assert "connected" not in result.output.split()
        assert "ConnectionRefusedError" in result.output
        assert await anyio.to_thread.run_sync(_accepted, server, 0.2) == 0
    finally:
        server.close()


# --- processes -------------------------------------------------------------------------------


def _escapes(mark: str) -> list[str]:
    """Ways a command starts a process meant to outlive it: each one runs `sleep <mark>`."""
    ways = [f"sleep {mark} &", f"setsid sleep {mark} &", f"setsid -f sleep {mark}",
            f"( sleep {mark} & )", f"nohup sleep {mark} >/dev/null 2>&1 &",
            f"sleep {mark} & disown", f"bash -c 'sleep {mark} & disown; exit 0' &"]
    if HAS_PYTHON:  # a daemon: fork, setsid, fork again, the middle one exits
        ways.append("python3 -c \"import os; os.fork() == 0 and (os.setsid(), os.fork() == 0 "
                    f"and os.execvp('sleep', ['sleep', '{mark}']))\"")
    return ways


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("ending", [
    "returns", pytest.param("times out", marks=pytest.mark.heavy), "is cancelled"])
async def test_no_process_outlives_the_command(ws: Path, host: Host, ending: str) -> None:
    ways = _escapes(host.mark)
    tail = {"returns": "sleep 0.8; echo returned",  # time for the host to see them all
            "times out": f"sleep {host.mark}", "is cancelled": f"sleep {host.mark}"}[ending]
    command = "\n".join([*ways, tail])
    result, most = await _watching(
        command, ws, host.mark, timeout_s={"times out": 1.5}.get(ending, 30),
        cancel_at=len(ways) + 1 if ending == "is cancelled" else None)

    assert most >= len(ways), f"only {most} of {len(ways)} started"  # they did run on the host
    if ending == "returns":
        assert result is not None and result.ok and result.output.endswith("returned\n")
    elif ending == "times out":
        assert result is not None and result.timed_out  # the 1.5 s timeout, not the sleep
    else:
        assert result is None  # cancelled, not waited for
    assert _wait_gone(host.mark) == []


@needs_bwrap
@pytest.mark.anyio
async def test_a_killed_gliding_leaves_no_sandboxed_process(ws: Path, host: Host) -> None:
    script = ("import anyio, sys; from pathlib import Path; "
              "from gliding.config.settings import ToolSettings; "
              "from gliding.tools.shell import run_command; "
              "anyio.run(lambda: run_command(sys.argv[1], Path(sys.argv[2]), ToolSettings()))")
    gliding = subprocess.Popen([sys.executable, "-c", script,  # noqa: ASYNC220 - a fork
                                f"setsid sleep {host.mark} & sleep {host.mark}", str(ws)])
    cgroup: Path | None = None
    try:
        deadline = time.monotonic() + 20
        while len(sleepers := _sleepers(host.mark)) < 2 and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert len(sleepers) == 2
        cgroup = _cgroup_of(sleepers[0])
        gliding.kill()  # SIGKILL: no finally of Gliding runs
        gliding.wait()
        assert _wait_gone(host.mark) == []  # --die-with-parent took the sandbox down with it
    finally:
        gliding.kill()
        gliding.wait()
        if cgroup is not None:  # nobody was left to remove it (stale dirs are not swept)
            remove_cgroup(cgroup)


@pytest.mark.skipif(not CGROUPS, reason="this host does not let Gliding create a pids cgroup")
@needs_bwrap
@pytest.mark.anyio
async def test_the_pids_cgroup_holds_the_command_and_its_limit(ws: Path, host: Host) -> None:
    seen: dict[str, str] = {}
    async with anyio.create_task_group() as tg:

        async def look() -> None:
            while not (sleepers := _sleepers(host.mark)):
                await anyio.sleep(0.05)
            where = _cgroup_of(sleepers[0])
            assert where is not None
            seen["max"] = (where / "pids.max").read_text().strip()
            seen["dir"] = str(where)
            tg.cancel_scope.cancel()

        tg.start_soon(look)
        with anyio.fail_after(10):
            await _run(f"sleep {host.mark}", ws, box=_box(processes=40), timeout_s=30)
    assert seen["max"] == "40"
    assert seen["dir"] == str(host.cgroups[0])


@pytest.mark.heavy  # waits for its timeout
@needs_bwrap
@needs_python
@bounded_processes
@pytest.mark.anyio
async def test_forking_2000_processes_is_refused_and_the_command_ends_by_its_timeout(
        ws: Path, host: Host) -> None:
    bomb = ("python3 -c \"\nimport os, time\nn = 0\ntry:\n    for _ in range(2000):\n"
            "        if os.fork() == 0:\n"
            f"            os.execvp('sleep', ['sleep', '{host.mark}'])\n"
            "        n += 1\nexcept OSError as exc:\n    print('refused after', n, exc.errno)\n"
            "else:\n    print('forked', n)\n\"\n"
            f"sleep {host.mark}")
    result, most = await _watching(bomb, ws, host.mark, box=_box(processes=48), timeout_s=2.5)
    assert result is not None and result.timed_out
    assert "refused after" in result.output, result.output
    forked = int(result.output.split("refused after")[1].split()[0])
    assert forked < 48 and most <= 48


@pytest.mark.heavy  # waits for its timeout
@needs_bwrap
@bounded_processes
@pytest.mark.anyio
async def test_a_bash_fork_bomb_stays_under_the_limit_and_ends_by_its_timeout(
        ws: Path, host: Host) -> None:
    most = 0

    async def count() -> None:
        nonlocal most
        while True:
            most = max(most, len(_processes(host.mark)))
            await anyio.sleep(0.02)

    # fail_after: hang protection only; the command's own timeout (2 s) is what must end it
    with anyio.fail_after(2 + 30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(count)
            result = await _run(f":(){{ :|:& }};:; sleep {host.mark}", ws,
                                box=_box(processes=48), timeout_s=2)
            tg.cancel_scope.cancel()
    assert result.timed_out
    assert "fork" in result.output  # bash says its forks fail
    assert 0 < most <= 48  # bwrap, the sandbox's init and the bomb, all in the cgroup


# --- resource limits -------------------------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
async def test_a_file_past_the_size_limit_cannot_be_written(ws: Path) -> None:
    result = await _run("head -c 3000000 /dev/zero > big; echo rc=$?; head -c 100 /dev/zero "
                        "> small; echo rc=$?", ws, box=_box(file_size_mb=1))
    assert "File size limit exceeded" in result.output
    assert result.output.split()[-2:] == ["rc=153", "rc=0"]  # 128 + SIGXFSZ; a small one is fine
    assert (ws / "big").stat().st_size <= 1 << 20
    assert (ws / "small").stat().st_size == 100


@needs_bwrap
@needs_python
@pytest.mark.anyio
async def test_an_allocation_past_the_memory_limit_fails(ws: Path) -> None:
    result = await _run("python3 -c 'b = bytearray(16 << 20); print(\"small ok\")'; "
                        "python3 -c 'b = bytearray(512 << 20); print(\"big ok\")'; echo rc=$?",
                        ws, box=_box(memory_mb=256))
    assert "small ok" in result.output
    assert "MemoryError" in result.output and "big ok" not in result.output
    assert result.output.split()[-1] == "rc=1"


@pytest.mark.heavy  # burns its CPU second
@needs_bwrap
@pytest.mark.anyio
async def test_a_process_past_its_cpu_seconds_is_killed(ws: Path) -> None:
    result = await _run("while :; do :; done", ws, box=_box(cpu_s=1), timeout_s=10)
    # the CPU limit killed it (hard limit: SIGKILL), before the 10 s timeout could
    assert not result.timed_out and result.exit_code == 128 + 9


# --- environment, describe, require ----------------------------------------------------------


def test_the_environment_puts_home_and_tmpdir_in_the_private_tmp() -> None:
    base = {"HOME": "/root", "TMPDIR": "/var/tmp", "PATH": "/usr/bin"}
    assert _box().env(base) == {"HOME": "/tmp", "TMPDIR": "/tmp", "PATH": "/usr/bin"}
    assert Sandbox.of(ToolSettings(sandbox="off")).env(base) == base


@needs_bwrap
@pytest.mark.anyio
async def test_a_command_sees_home_as_tmp(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(HOME))
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    result = await _run('echo "$HOME|$TMPDIR"; echo x > ~/f && cat ~/f', ws)
    assert result.output == "/tmp|/tmp\nx\n"


def test_describe_says_what_confines_the_commands() -> None:
    assert Sandbox.of(ToolSettings()).describe() == (
        "sandbox: bubblewrap (workspace read-write, system read-only, no home, no network, "
        "256 processes, 8192 MB, 600 CPU s)")
    small = ToolSettings(limits=LimitSettings(cpu_s=5, memory_mb=512, processes=32))
    assert Sandbox.of(small, network=True).describe() == (
        "sandbox: bubblewrap (workspace read-write, system read-only, no home, network "
        "allowed, 32 processes, 512 MB, 5 CPU s)")
    # a task can only allow the network, never take away what the settings allow
    assert Sandbox.of(ToolSettings(network=True), network=False).network
    off = Sandbox.of(ToolSettings(sandbox="off"))
    assert not off.confined
    assert off.describe() == "sandbox: off (commands run unconfined)"


def test_require_refuses_a_missing_bwrap_with_a_hint() -> None:
    missing = f"/nonexistent/{uuid.uuid4().hex}/bwrap"  # its own lru_cache entry
    with pytest.raises(SandboxError) as caught:
        _box(bwrap=missing).require()
    assert caught.value.message == (
        f"the command sandbox cannot run: {missing} is not installed")
    assert caught.value.hint is not None
    assert "apt-get install bubblewrap" in caught.value.hint
    assert "tools.sandbox: off" in caught.value.hint
    assert (caught.value.exit_code, caught.value.code) == (4, "sandbox.unavailable")
    Sandbox("off", False, _box().limits, bwrap=missing).require()  # off: nothing to refuse


def test_require_refuses_a_bwrap_that_fails_and_says_why(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxError, match="setting up uid map: Permission denied"):
        _box(bwrap=str(fake)).require()


@pytest.mark.anyio
async def test_a_command_in_a_sandbox_that_cannot_run_is_a_tool_error(ws: Path) -> None:
    with pytest.raises(ToolError, match="the command sandbox cannot run"):
        await _run("true", ws, box=_box(bwrap=f"/nonexistent/{uuid.uuid4().hex}/bwrap"))


@needs_bwrap
def test_require_passes_where_bwrap_runs() -> None:
    Sandbox.of(ToolSettings()).require()


# --- the began mark --------------------------------------------------------------------------


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("where", ["hidden data dir", "outside the workspace"])
async def test_the_began_mark_holds_the_host_pid_and_the_command_cannot_see_it(
        tmp_path: Path, ws: Path, host: Host, where: str) -> None:
    data = ws / ".gliding"
    mark = (data / "jobs" / "j1" / "began" / "c1" if where == "hidden data dir"
            else tmp_path / "began" / "c1")
    mark.parent.mkdir(parents=True)
    command = f"ls -A {mark.parent}; cat {mark}; sleep {host.mark}"
    result: CommandResult | None = None
    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                nonlocal result
                result = await _run(command, ws, box=_box(hidden=(data,)), timeout_s=30,
                                    began=mark)

            tg.start_soon(call)
            while not _sleepers(host.mark):  # the command runs: the mark was written first
                await anyio.sleep(0.05)
            pid = int(mark.read_text().strip())
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
            session = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
            stopped = stop_orphan(mark)  # what a resumed job does with a command left running
    assert os.path.basename(argv0) == b"bwrap"  # a host pid: bwrap's, not the command's
    assert session == pid  # it leads its session, as stop_orphan requires
    assert stopped
    assert result is not None and result.exit_code == -9
    assert "No such file or directory" in result.output
    assert str(pid) not in result.output.split()
    assert mark.read_text().strip() == str(pid)  # still there after the call


# --- bugs found while writing these tests, now fixed: regression tests -------------------------


@pytest.mark.skipif(not CGROUPS, reason="this host does not let Gliding create a pids cgroup")
@needs_bwrap
@pytest.mark.anyio
async def test_a_cancellation_while_the_cgroup_is_made_leaves_no_cgroup(
        ws: Path, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    made = shell.make_pids_cgroup  # the fixture's spy: it records what it makes
    with anyio.CancelScope() as scope:

        def cancelled_meanwhile(limit: int) -> Path | None:
            path = made(limit)
            anyio.from_thread.run_sync(scope.cancel)  # the job is cancelled right now
            return path

        monkeypatch.setattr(shell, "make_pids_cgroup", cancelled_meanwhile)
        await _run(f"sleep {host.mark}", ws, timeout_s=30)
    assert scope.cancelled_caught
    left = [p for p in host.cgroups if p.exists()]
    for path in left:  # tidy up, then show it
        remove_cgroup(path)
    assert left == []


@needs_bwrap
def test_a_gliding_process_leaves_no_temporary_directory(tmp_path: Path) -> None:
    private = tmp_path / "tmp"
    private.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    script = ("import anyio, sys; from pathlib import Path; "
              "from gliding.config.settings import ToolSettings; "
              "from gliding.tools.shell import run_command; "
              "r = anyio.run(lambda: run_command('true', Path(sys.argv[1]), ToolSettings())); "
              "sys.exit(r.exit_code)")
    done = subprocess.run([sys.executable, "-c", script, str(ws)], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "TMPDIR": str(private)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in private.iterdir()) == []


@needs_bwrap
@pytest.mark.anyio
async def test_a_hidden_path_that_does_not_exist_is_not_created_on_the_host(ws: Path) -> None:
    result = await _run("true", ws, box=_box(hidden=(ws / "not-yet" / "data",)))
    assert result.ok
    assert sorted(p.name for p in ws.iterdir()) == []


def _job_bash_outputs(tmp_path: Path, commands: list[str], *, network: bool) -> list[str]:
    """Run a DA-only scripted job whose data directory lies inside its workspace (as
    `gliding run` in a project with ``workspace: .`` has it); DA's bash results, in order."""
    from gliding.config.loader import load_settings
    from gliding.config.task import load_task
    from gliding.daemon.compose import run_job
    from gliding.memory.archive.store import Archive
    from gliding.testing import ScriptedLLM, call

    (tmp_path / "task.yaml").write_text(
        f"goal: probe\nworkspace: .\npipeline: [DA]\nnetwork: {str(network).lower()}\n",
        encoding="utf-8")
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / ".gliding")})
    llm = ScriptedLLM({"DA": [*(call("bash", command=c) for c in commands),
                              call("finish", summary="probed")]})
    handle = anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings, llm=llm))
    assert handle.report is not None
    with Archive.open(tmp_path / ".gliding", handle.report.job, create=False) as archive:
        return [archive.get(item.iri).text() for item in archive.list("result")
                if item.meta.get("tool") == "bash"]


@needs_bwrap
def test_a_jobs_bash_commands_cannot_see_the_data_directory_in_the_workspace(
        tmp_path: Path) -> None:
    outputs = _job_bash_outputs(tmp_path, ["ls -A .gliding; echo planted > .gliding/planted"],
                                network=False)
    assert len(outputs) == 1
    assert not (tmp_path / ".gliding" / "planted").exists(), outputs[0]
    assert "jobs" not in outputs[0].split()


@needs_bwrap
def test_a_tasks_network_true_reaches_its_bash_commands(tmp_path: Path) -> None:
    with _listener() as server:
        port = server.getsockname()[1]
        outputs = _job_bash_outputs(
            tmp_path, [f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"], network=True)
        reached = _accepted(server, 0.5)
    assert outputs[0].split()[-1:] == ["connected"], outputs[0]
    assert reached == 1
