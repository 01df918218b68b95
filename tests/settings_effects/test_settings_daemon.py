"""daemon.host, daemon.port, daemon.socket, daemon.max_jobs: each key, set through GLIDING_*
variables (max_jobs through the loader's overrides, as the daemon tests set it), changes where
the daemon's API answers or how many of its jobs run at once.

host, port and socket: the real server (``serve_async``, what ``gliding daemon`` runs) in this
process, asked with httpx over real TCP and unix sockets, and stopped as ``gliding daemon`` is,
by a SIGTERM its own handler takes. max_jobs: the job service in process, on scripted jobs whose
bash step sleeps. Everything listens on loopback only: a host that is not loopback is only
tried while the data directory's daemon lock is held, so the daemon warns and stops before it
binds anything.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gliding.config.settings import Settings
from gliding.daemon.api import serve_async
from gliding.daemon.jobs import DaemonLock
from gliding.daemon.queue import read_info
from tests.cli.cli_support import invoke
from tests.daemon.daemon_support import (
    TASK,
    TIMEOUT_S,
    events_of,
    replies,
    serving,
    wait_for,
    write_replies,
)
from tests.settings_effects.effects_support import settings_from

DEFAULTS = Settings().daemon


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@asynccontextmanager
async def listening(tmp: Path, env: dict[str, str],
                    warnings: list[str] | None = None) -> AsyncIterator[dict[str, Any]]:
    """The daemon of the settings ``env`` gives (data dir ``tmp/data``) serving in this
    process; what it announced once it listened, which daemon.json says too. ``warnings``
    gets the lines it warns. On exit it is stopped by SIGTERM and has removed daemon.json."""
    settings = settings_from(tmp, {"GLIDING_MEMORY__VECTORS__ENABLED": "false", **env})
    announced: dict[str, Any] = {}
    ready = anyio.Event()
    before = signal.getsignal(signal.SIGTERM)

    def announce(info: dict[str, Any]) -> None:
        announced.update(info)
        ready.set()

    warn = (warnings if warnings is not None else []).append
    by_signal = True
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(serve_async, settings, announce=announce, warn=warn,
                              base_dir=tmp))
        with anyio.fail_after(TIMEOUT_S):
            await ready.wait()
        try:
            assert read_info(settings.data_dir) == announced
            yield announced
        finally:
            # the daemon's own handler takes the signal; never send it to Python's default
            # one, which would end the test run
            by_signal = signal.getsignal(signal.SIGTERM) is not before
            if by_signal:
                os.kill(os.getpid(), signal.SIGTERM)
            else:
                tg.cancel_scope.cancel()
    assert by_signal, "the daemon did not handle SIGTERM"
    assert read_info(settings.data_dir) is None  # a clean stop removes daemon.json


def bearer(tmp: Path) -> dict[str, str]:
    """The Authorization header with the token the daemon made in <data_dir>/daemon.token."""
    token = (tmp / "data" / "daemon.token").read_text(encoding="ascii").strip()
    return {"Authorization": f"Bearer {token}"}


async def listed_jobs(url: str, tmp: Path) -> httpx.Response:
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
        return await http.get("/v1/jobs", headers=bearer(tmp))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- daemon.port ------------------------------------------------------------------------------


@pytest.mark.parametrize("chosen", [True, False], ids=["a-free-port", "zero"])
def test_port_is_where_the_api_listens(tmp: Path, chosen: bool) -> None:
    port = free_port() if chosen else 0

    async def main() -> None:
        async with listening(tmp, {"GLIDING_DAEMON__PORT": str(port)}) as info:
            url = httpx.URL(info["url"])
            assert url.host == "127.0.0.1"
            if chosen:
                assert url.port == port
            else:  # any free one, not the default
                assert url.port and url.port != DEFAULTS.port
            answer = await listed_jobs(info["url"], tmp)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"total": 0, "offset": 0, "jobs": []}

    anyio.run(main)


# --- daemon.host ------------------------------------------------------------------------------


def first_address(host: str) -> str:
    return str(socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][4][0])


@pytest.mark.parametrize(("host", "other"), [(None, "127.0.0.2"), ("127.0.0.2", "127.0.0.1"),
                                             ("localhost", "127.0.0.2")])
def test_host_is_the_address_the_api_listens_on(tmp: Path, host: str | None,
                                                other: str) -> None:
    bound = first_address(host or DEFAULTS.host)
    assert bound != other
    warnings: list[str] = []

    async def main(port: int) -> None:
        env = {"GLIDING_DAEMON__PORT": str(port)}
        if host is not None:
            env["GLIDING_DAEMON__HOST"] = host
        async with listening(tmp, env, warnings) as info:
            url = httpx.URL(info["url"])
            assert (url.host, url.port) == (bound, port)
            answer = await listed_jobs(info["url"], tmp)
            assert answer.status_code == 200, answer.text
            elsewhere = str(url.copy_with(host=other))
            with pytest.raises(httpx.ConnectError):  # the same port, another loopback address
                await listed_jobs(elsewhere, tmp)

    # The port on the other address is bound here but never listened on: a connection to it
    # is refused, whatever else runs on this machine.
    with socket.socket() as holder:
        holder.bind((other, 0))
        anyio.run(main, int(holder.getsockname()[1]))
    assert warnings == []  # loopback: nothing to warn about
    assert DEFAULTS.host == "127.0.0.1"


@pytest.mark.parametrize(("host", "warned"), [("0.0.0.0", True), ("::", True),
                                              ("192.0.2.1", True), ("127.0.0.2", False),
                                              ("localhost", False), (None, False)])
def test_host_that_is_not_loopback_prints_a_warning(tmp: Path, host: str | None,
                                                    warned: bool) -> None:
    env = {} if host is None else {"GLIDING_DAEMON__HOST": host}
    with DaemonLock(tmp / "data"):  # it stops at the lock, before it listens anywhere
        result = invoke(["daemon", "--data-dir", "data", "--port", "0"], cwd=tmp, env=env)

    assert result.code == 2, result.stderr
    assert "error: a daemon already serves" in result.stderr
    warning = (f"warning: the API listens on {host}, not only on this machine: anyone who "
               "reaches it and holds the token can run commands here (daemon.host)")
    assert (warning in result.stderr) is warned, result.stderr
    assert ("not only on this machine" in result.stderr) is warned, result.stderr
    assert read_info(tmp / "data") is None


# --- daemon.socket ----------------------------------------------------------------------------


@pytest.mark.parametrize("with_socket", [True, False], ids=["socket", "none"])
def test_socket_also_serves_the_api_on_a_private_unix_socket(tmp: Path,
                                                             with_socket: bool) -> None:
    path = tmp / "d.sock"
    env = {"GLIDING_DAEMON__PORT": "0"}
    if with_socket:
        env["GLIDING_DAEMON__SOCKET"] = str(path)

    async def main() -> None:
        async with listening(tmp, env) as info:
            if not with_socket:
                assert info["socket"] is None and DEFAULTS.socket is None
                assert not path.exists()
                return
            assert info["socket"] == str(path)
            mode = os.stat(path).st_mode
            assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
            transport = httpx.AsyncHTTPTransport(uds=str(path))
            async with httpx.AsyncClient(transport=transport, base_url="http://daemon",
                                         trust_env=False, timeout=30) as uds:
                answer = await uds.get("/v1/jobs", headers=bearer(tmp))
                assert answer.status_code == 200, answer.text
                assert answer.json() == {"total": 0, "offset": 0, "jobs": []}
                assert (await uds.get("/v1/jobs")).status_code == 401  # still wants the token

    anyio.run(main)
    assert not path.exists()  # removed on the stop


# --- daemon.max_jobs --------------------------------------------------------------------------

JOBS = 3


@pytest.mark.heavy  # three jobs whose step sleeps a second: seconds
@pytest.mark.timeout(300)
@pytest.mark.parametrize("max_jobs", [1, JOBS])
def test_max_jobs_is_how_many_jobs_run_at_once(tmp: Path, max_jobs: int) -> None:
    assert DEFAULTS.max_jobs >= JOBS  # the default would run all three at once
    model = write_replies(tmp, "slow.yaml", replies(steps=1, sleep_s=1))

    async def main() -> tuple[list[list[dict[str, Any]]], list[Counter[str]]]:
        async with serving(tmp, max_jobs=max_jobs) as service:
            jobs = [(await service.submit(TASK.format(workspace=f"ws{i}"), model=model)).job
                    for i in range(JOBS)]
            states: list[Counter[str]] = []  # the queue's states, every 20 ms

            async def watch() -> None:
                while True:
                    states.append(Counter(e.state for e in (await service.jobs())[1]))
                    await anyio.sleep(0.02)

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                events = [await events_of(service, job) for job in jobs]
                tg.cancel_scope.cancel()
            for job in jobs:
                assert (await wait_for(service, job, "finished"))["outcome"] == "success"
            return events, states

    events, states = anyio.run(main)

    assert max(s["running"] for s in states) == max_jobs
    assert Counter({"running": max_jobs, "queued": JOBS - max_jobs}) in states
    spans = []
    for job_events in events:
        assert job_events[-1]["event"] == "job.finished"
        dispatched = next(e for e in job_events if e["event"] == "job.dispatched")
        assert dispatched["data"]["running"] <= max_jobs
        spans.append((dispatched["at"], job_events[-1]["at"]))
    at_once = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    assert at_once == max_jobs  # between dispatch and job.finished, at each job's start
    for i in range(JOBS):
        assert (tmp / f"ws{i}" / "trace.txt").read_text().split() == ["step-1"]
