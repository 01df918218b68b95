"""A task's own stdio MCP server runs inside the job's command sandbox; the host's own servers
(``mcp.servers``) run as configured (docs/mcp.md, "What a server may see").

Real bubblewrap and a real MCP server: ``probe_stdio_server.py`` (standard library only),
copied into the workspace and run by the ``python3`` the sandbox's toolchain gives, whose tools
try to read, write and connect where a task's server must not. Each attack is judged from the
host: the secret file the host can read, the file that must not appear, the loopback listener
that counts connections, the processes and the pids cgroup left after the server stops. Every
attack is also run against the same server unconfined, so a test would fail if the sandbox
were not there. Tests skip only where bubblewrap cannot run (scripts/setup.sh installs it).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from gliding.config.settings import MCPServerSettings, MCPSettings, Settings, ToolSettings
from gliding.config.task import load_task
from gliding.daemon.compose import run_job
from gliding.errors import ToolError
from gliding.memory.archive.store import Archive
from gliding.testing import ScriptedLLM, call
from gliding.tools.mcp import confined as confined_module
from gliding.tools.mcp.client import MCPGroup, mcp_groups
from gliding.tools.sandbox import Limits, Sandbox, bwrap_problem
from gliding.tools.toolchain import resolve_toolchain

PROBLEM = bwrap_problem()
pytestmark = pytest.mark.skipif(
    PROBLEM is not None,
    reason=f"bubblewrap cannot run here ({PROBLEM}); scripts/setup.sh installs it")
PROBE = Path(__file__).resolve().parent / "probe_stdio_server.py"
SECRET = "the host's secret, not the server's"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The workspace, holding the probe server (a task's server lives where the task does)."""
    path = tmp_path / "ws"
    path.mkdir()
    shutil.copy(PROBE, path / "probe.py")
    return path


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the workspace that the host (Gliding's user) can read."""
    path = tmp_path / "secret.txt"
    path.write_text(SECRET, encoding="utf-8")
    return path


@pytest.fixture
def box(tmp_path: Path) -> Callable[..., Sandbox]:
    """Makes the sandbox a job's commands get here: the settings' mode and limits, the task's
    network, the toolchain this process resolves (its python3). The toolchain is resolved
    here, in a sync fixture: it runs a subprocess probe, which must not block a test's loop."""
    tools = ToolSettings()
    toolchain = resolve_toolchain(tools, None, data_dir=tmp_path / "data",
                                  environ=dict(os.environ))

    def make(*, network: bool = False) -> Sandbox:
        return Sandbox.of(tools, network=network, hidden=(tmp_path / "data",),
                          toolchain=toolchain)

    return make


PROBE_SERVER = MCPServerSettings(command="python3", args=("probe.py",))


def _group(ws: Path, sandbox: Sandbox | None, server: MCPServerSettings = PROBE_SERVER
           ) -> MCPGroup:
    """The probe as a task's server (confined by ``sandbox``) or, with None, as the host's."""
    return MCPGroup("probe", server, MCPSettings(startup_timeout_s=30, timeout_s=10),
                    workspace=ws, env_allow=ToolSettings().env_allow, sandbox=sandbox)


async def _calls(group: MCPGroup, *calls: tuple[str, dict[str, object]]) -> list[str]:
    """Open the group, make the calls, close it: each result's text, or ``error: ...``."""
    await group.open()
    assert group.unavailable is None, group.unavailable
    out = []
    try:
        for tool, arguments in calls:
            try:
                out.append((await group.call(tool, arguments)).text)
            except ToolError as exc:
                out.append(f"error: {exc.message}")
    finally:
        await group.aclose()
    return out


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


def _sleepers(mark: str) -> list[int]:
    """Host pids of `sleep <mark>` processes."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if argv[-1:] == [mark.encode()] and os.path.basename(argv[0]) == b"sleep":
            found.append(int(entry.name))
    return found


# --- a task's server works, in the workspace ------------------------------------------------


@pytest.mark.anyio
async def test_a_task_server_answers_its_tool_calls_from_inside_the_sandbox(
        ws: Path, tmp_path: Path, box: Callable[..., Sandbox]) -> None:
    group = _group(ws, box())
    assert group.sandboxed
    written, read, where = await _calls(group, ("write", {"path": "out.txt", "text": "made"}),
                                        ("read", {"path": "out.txt"}), ("where", {}))
    assert (written, read) == ("written", "made")
    assert (ws / "out.txt").read_text(encoding="utf-8") == "made"  # the workspace is the host's
    seen = json.loads(where)
    assert seen["cwd"] == str(ws)
    assert seen["home"] == "/tmp"  # the sandbox's private /tmp, not the host's home
    assert seen["pid"] < 10  # its own PID namespace: it sees no process of the host
    assert "npm_config_offline" in seen["env"]  # npx runs a local install, never a download


def test_a_task_server_gets_env_allow_as_commands_do_and_npm_offline(
        ws: Path, tmp_path: Path, box: Callable[..., Sandbox]) -> None:
    environ = {"PATH": "/usr/bin:/bin", "DEPLOY_TOKEN": "t0ken", "LANG": "C.UTF-8",
               "GITHUB_TOKEN": "gh"}
    server = PROBE_SERVER.model_copy(update={"pass_env": ("GITHUB_TOKEN",),
                                             "env": {"OWN": "{workspace}"}})

    def env(sandbox: Sandbox | None) -> dict[str, str]:
        group = MCPGroup("probe", server, MCPSettings(), workspace=ws,
                         env_allow=("PATH", "LANG", "DEPLOY_TOKEN"), environ=environ,
                         sandbox=sandbox)
        return group.session.target.env  # type: ignore[union-attr]

    confined, host = env(box()), env(None)
    assert "DEPLOY_TOKEN" not in confined and host["DEPLOY_TOKEN"] == "t0ken"
    assert confined["GITHUB_TOKEN"] == "gh"  # named by pass_env: copied, as before
    assert confined["OWN"] == str(ws) and confined["LANG"] == "C.UTF-8"
    assert (confined["HOME"], confined["TMPDIR"]) == ("/tmp", "/tmp")
    assert confined["npm_config_offline"] == "true" and "npm_config_offline" not in host


@pytest.mark.anyio
async def test_a_task_servers_cwd_inside_the_workspace_is_where_it_starts(
        ws: Path, tmp_path: Path, box: Callable[..., Sandbox]) -> None:
    (ws / "sub").mkdir()
    shutil.move(ws / "probe.py", ws / "sub" / "probe.py")
    server = MCPServerSettings(command="python3", args=("probe.py",), cwd="sub")
    (where,) = await _calls(_group(ws, box(), server), ("where", {}))
    assert json.loads(where)["cwd"] == str(ws / "sub")


# --- what it must not reach -----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_task_server_cannot_read_a_file_outside_the_workspace(
        ws: Path, tmp_path: Path, secret: Path, box: Callable[..., Sandbox]) -> None:
    (unconfined,) = await _calls(_group(ws, None), ("read", {"path": str(secret)}))
    assert unconfined == SECRET  # the host can read it: the file is a real secret
    (read,) = await _calls(_group(ws, box()), ("read", {"path": str(secret)}))
    assert read.startswith("error: read (server probe): FileNotFoundError"), read
    assert SECRET not in read


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["parent", "/usr", "home"])
async def test_a_task_server_cannot_write_outside_the_workspace(
        ws: Path, tmp_path: Path, where: str, box: Callable[..., Sandbox]) -> None:
    base = {"parent": str(tmp_path), "home": os.path.expanduser("~")}.get(where, where)
    target = Path(base) / f"gliding-probe-{uuid.uuid4().hex}"
    try:
        (written,) = await _calls(_group(ws, box()),
                                  ("write", {"path": str(target), "text": "planted"}))
        if where == "/usr":  # read-only in the sandbox; elsewhere it lands in a private tmpfs
            assert "Read-only file system" in written, written  # or nowhere at all
        assert not target.exists(), f"{written}: {target} is on the host"
        if where == "parent":  # the host could write it: the sandbox is what stopped it
            (unconfined,) = await _calls(_group(ws, None),
                                         ("write", {"path": str(target), "text": "planted"}))
            assert unconfined == "written" and target.exists()
    finally:  # a failing test must not leave the probe behind either
        target.unlink(missing_ok=True)


@pytest.mark.anyio
async def test_a_task_server_has_no_network_without_network_true(
        ws: Path, tmp_path: Path, box: Callable[..., Sandbox]) -> None:
    with _listener() as listener:
        port = listener.getsockname()[1]
        (refused,) = await _calls(_group(ws, box()), ("connect", {"port": port}))
        none = await anyio.to_thread.run_sync(_accepted, listener, 0.3)
        (reached,) = await _calls(_group(ws, box(network=True)),
                                  ("connect", {"port": port}))
        one = await anyio.to_thread.run_sync(_accepted, listener, 2.0)
    assert refused.startswith("error: connect (server probe): "), refused
    assert none == 0
    assert reached == "connected" and one == 1  # network: true grants it, as to commands


@pytest.mark.anyio
async def test_no_process_of_a_task_server_outlives_it_and_its_cgroup_is_removed(
        ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        box: Callable[..., Sandbox]) -> None:
    made: list[Path] = []
    real = confined_module.make_pids_cgroup

    def spy(limit: int) -> Path | None:
        path = real(limit)
        if path is not None:
            made.append(path)
        return path

    monkeypatch.setattr(confined_module, "make_pids_cgroup", spy)
    mark = f"1000.{uuid.uuid4().int % 10**12:012d}"  # a valid `sleep` argument
    group = _group(ws, box())
    await group.open()
    try:
        spawned = await group.call("spawn", {"mark": mark})  # in a session of its own
        deadline = time.monotonic() + 3
        while not _sleepers(mark) and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert _sleepers(mark), f"the probe did not start its child: {spawned.text}"
        for cgroup in made:  # where the host lets Gliding make one, it holds the server's
            assert (cgroup / "pids.max").read_text().strip() == str(_limit(group))
            procs = (cgroup / "cgroup.procs").read_text().split()
            assert {str(pid) for pid in _sleepers(mark)} <= set(procs)
    finally:
        await group.aclose()
    deadline = time.monotonic() + 3
    while _sleepers(mark) and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert _sleepers(mark) == []
    assert [p for p in made if p.exists()] == []


def _limit(group: MCPGroup) -> int:
    target = group.session.target
    assert target.confined is not None  # type: ignore[union-attr]
    return target.confined.sandbox.limits.processes  # type: ignore[union-attr]


# --- the host's own servers, and a sandbox that is off or cannot run -----------------------


@pytest.mark.anyio
async def test_a_host_configured_server_is_unchanged_and_a_task_server_is_confined(
        ws: Path, tmp_path: Path, secret: Path, box: Callable[..., Sandbox]) -> None:
    settings = MCPSettings(servers={"host": PROBE_SERVER.model_copy(update={
        "command": os.path.realpath(shutil.which("python3") or "python3")})})
    host, task = mcp_groups(settings, {"task": PROBE_SERVER}, workspace=ws,
                            env_allow=ToolSettings().env_allow, sandbox=box())
    assert (host.server_name, host.sandboxed) == ("host", False)
    assert (task.server_name, task.sandboxed) == ("task", True)
    (by_host,) = await _calls(host, ("read", {"path": str(secret)}))
    (by_task,) = await _calls(task, ("read", {"path": str(secret)}))
    assert by_host == SECRET  # the operator's server runs as configured, as before
    assert by_task.startswith("error: read (server task): FileNotFoundError"), by_task


@pytest.mark.anyio
async def test_a_task_server_that_replaces_a_host_server_of_its_name_is_confined(
        ws: Path, tmp_path: Path, box: Callable[..., Sandbox]) -> None:
    settings = MCPSettings(servers={"probe": PROBE_SERVER})
    (group,) = mcp_groups(settings, {"probe": PROBE_SERVER}, workspace=ws,
                          sandbox=box())
    assert group.sandboxed


@pytest.mark.anyio
async def test_with_the_sandbox_off_a_task_server_runs_unconfined_as_commands_do(
        ws: Path, tmp_path: Path, secret: Path) -> None:
    off = Sandbox("off", False, Limits(60, 2048, 64, 16))
    group = _group(ws, off, PROBE_SERVER.model_copy(update={
        "command": os.path.realpath(shutil.which("python3") or "python3")}))
    assert not group.sandboxed
    (read,) = await _calls(group, ("read", {"path": str(secret)}))
    assert read == SECRET


@pytest.mark.anyio
async def test_a_task_server_where_bubblewrap_cannot_run_does_not_start(
        ws: Path, tmp_path: Path) -> None:
    box = Sandbox("bwrap", False, Limits(60, 2048, 64, 16), bwrap="/nonexistent/bwrap")
    group = _group(ws, box)
    await group.open()
    try:
        assert group.tools == ()
        assert group.unavailable is not None
        assert "the command sandbox cannot run: /nonexistent/bwrap is not installed" in \
            group.unavailable
    finally:
        await group.aclose()


# --- through a job --------------------------------------------------------------------------


def test_a_jobs_task_server_runs_in_the_jobs_sandbox(tmp_path: Path, secret: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(PROBE, ws / "probe.py")
    (ws / "task.yaml").write_text(json.dumps({
        "goal": "Probe with the task's own MCP server", "pipeline": ["DA"], "workspace": ".",
        "mcp_servers": {"probe": {"command": "python3", "args": ["probe.py"],
                                  "on_demand": False}},
    }), encoding="utf-8")  # JSON is YAML
    llm = ScriptedLLM({"DA": [call("probe__read", path=str(secret)),
                              call("probe__write", path="made.txt", text="inside"),
                              call("finish", summary="probed")]})
    settings = Settings(data_dir=tmp_path / "data")

    handle = anyio.run(lambda: run_job(load_task(ws / "task.yaml"), settings, llm=llm))

    assert handle.report is not None
    with Archive.open(settings.data_dir, handle.report.job, create=False) as archive:
        results = [archive.get(r.iri).text() for r in archive.list(kind="result")]
    assert (ws / "made.txt").read_text(encoding="utf-8") == "inside"
    assert len(results) == 2
    assert "FileNotFoundError" in results[0] and SECRET not in results[0], results[0]
