"""daemon.heartbeat_s, daemon.lease_s, daemon.agents: each key, set through GLIDING_* variables,
changes how a job's agents run on ``gliding worker`` services (``WorkerService``).

heartbeat_s is watched on an in-process bus in virtual time; lease_s and agents on jobs that
run through ``run_job`` over a real mosquitto on 127.0.0.1, as in tests/workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus import topics
from gliding.bus.auth import root_keyring, worker_key, write_key_file
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import Claim, GrantMsg, Heartbeat, JobEvent, WorkItem
from gliding.bus.mqtt import MQTTBus
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.daemon.compose import JobHandle, run_job
from gliding.daemon.runtime import Runtime, bus_auth, bus_key_path, open_bus
from gliding.daemon.workers import WorkerService
from gliding.testing.clock import autojump
from gliding.testing.servers import Mosquitto, mosquitto
from tests.settings_effects.effects_support import settings_from, write_task

DEFAULTS = Settings().daemon

DA_TASK = """\
goal: Write hello.txt containing Hello
pipeline: [DA]
checks:
  - file_contains: {path: hello.txt, text: Hello}
"""
REPLIES = """\
DA:
  - write_file: {path: hello.txt, content: Hello}
  - finish: {summary: wrote hello.txt}
"""


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def broker() -> Iterator[Mosquitto]:
    with mosquitto() as server:
        yield server


# --- daemon.heartbeat_s -----------------------------------------------------------------------

WINDOW_S = 4.5  # virtual seconds of heartbeats watched


async def heartbeat_times(settings: Settings) -> list[float]:
    """When a WorkerService with ``settings`` sent its heartbeats, for WINDOW_S seconds."""
    times: list[float] = []
    async with InProcessBus() as bus:
        runtime = Runtime(settings, TokenCounter(settings.context.tokenizer))  # never asked
        service = WorkerService(settings, bus, runtime, roles=["DA"], name="w1")
        async with bus.subscribe(topics.heartbeats()) as beats, anyio.create_task_group() as tg:
            await tg.start(service.serve)
            with anyio.move_on_after(WINDOW_S):
                async for _topic, beat in beats:
                    assert isinstance(beat, Heartbeat) and beat.worker == "w1"
                    times.append(anyio.current_time())
            tg.cancel_scope.cancel()
    return times


@pytest.mark.parametrize("heartbeat_s", [0.2, 1.0, None])
def test_heartbeat_s_is_how_often_a_worker_says_it_is_alive(
    tmp: Path, heartbeat_s: float | None
) -> None:
    env = {} if heartbeat_s is None else {"GLIDING_DAEMON__HEARTBEAT_S": str(heartbeat_s)}
    expected = DEFAULTS.heartbeat_s if heartbeat_s is None else heartbeat_s

    times = autojump(heartbeat_times, settings_from(tmp, env))

    intervals = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(times) == int(WINDOW_S / expected) + 1
    assert intervals == pytest.approx([expected] * len(intervals), abs=1e-6)


# --- daemon.lease_s ---------------------------------------------------------------------------


async def lease_lapse(tmp: Path, settings: Settings) -> tuple[float, JobEvent]:
    """A job whose agents run on workers; a ghost worker claims its DA's work and is never
    heard from again. How long after the grant the work was offered again (epoch 2), and the
    ``work.lapsed`` event the job published about it."""
    task = write_task(tmp, DA_TASK)
    (tmp / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    assert settings.bus.url is not None
    root_keyring(bus_key_path(settings))  # the ghost is enrolled: it signs as worker "ghost"
    async with (
        MQTTBus(settings.bus.url, auth=bus_auth(settings, worker="ghost")) as ghost,
        ghost.subscribe(topics.work("DA")) as offers,  # not the workers' shared group
        ghost.subscribe(topics.grants("ghost")) as grants,
        ghost.subscribe("job/+/events") as events,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(lambda: run_job(task, settings, model=f"scripted:{tmp / 'replies.yaml'}"))
        _topic, first = await offers.receive()
        assert isinstance(first, WorkItem) and first.epoch == 1
        job = first.assignment.job
        await ghost.publish(topics.claims(job), Claim(job=job, key=first.key, epoch=1,
                                                      worker="ghost"))
        _topic, grant = await grants.receive()
        assert isinstance(grant, GrantMsg) and grant.granted and grant.key == first.key
        granted = anyio.current_time()
        _topic, again = await offers.receive()  # no heartbeat ever names the key
        reoffered = anyio.current_time()
        assert isinstance(again, WorkItem) and again.key == first.key and again.epoch == 2
        async for _topic, event in events:
            assert isinstance(event, JobEvent)
            if event.event == "work.lapsed":
                tg.cancel_scope.cancel()  # the job itself is of no more interest
                return reoffered - granted, event
    raise AssertionError("the events ended without work.lapsed")


@pytest.mark.heavy
@pytest.mark.parametrize("lease_s", [0.5, 2.0])
def test_lease_s_is_how_long_a_silent_workers_work_stays_with_it(
    tmp: Path, broker: Mosquitto, lease_s: float
) -> None:
    settings = settings_from(tmp, {
        "GLIDING_BUS__URL": broker.url, "GLIDING_DAEMON__AGENTS": "workers",
        "GLIDING_DAEMON__LEASE_S": str(lease_s), "GLIDING_DAEMON__HEARTBEAT_S": "0.1",
        "GLIDING_MEMORY__VECTORS__ENABLED": "false"})

    async def main() -> tuple[float, JobEvent]:
        with anyio.fail_after(30):
            return await lease_lapse(tmp, settings)

    held_for, lapsed = anyio.run(main)

    # the dispatcher looks every min(lease_s, offer_s) / 4, offer_s = max(0.5, min(2, lease_s / 2))
    assert lease_s - 0.1 <= held_for < lease_s + 0.25 + 0.5
    assert held_for < DEFAULTS.lease_s
    assert lapsed.data["worker"] == "ghost"
    assert lapsed.data["silent_s"] >= lease_s


# --- daemon.agents ----------------------------------------------------------------------------


async def job_beside_a_worker(tmp: Path, job_settings: Settings,
                              worker_settings: Settings) -> tuple[JobHandle, WorkerService]:
    """Run the DA task while a WorkerService serves every role on the same broker."""
    task = write_task(tmp, DA_TASK)
    (tmp / "replies.yaml").write_text(REPLIES, encoding="utf-8")
    services: list[WorkerService] = []

    async def serve(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with Runtime.open(worker_settings) as rt, open_bus(worker_settings,
                                                                 worker="w1.1") as bus:
            services.append(WorkerService(worker_settings, bus, rt, name="w1.1"))
            await services[0].serve(task_status=task_status)

    async with anyio.create_task_group() as tg:
        await tg.start(serve)
        with anyio.fail_after(60):
            handle = await run_job(task, job_settings, model=f"scripted:{tmp / 'replies.yaml'}")
        tg.cancel_scope.cancel()
    return handle, services[0]


@pytest.mark.parametrize("agents", ["workers", "local", None])
def test_agents_decides_whether_workers_or_the_jobs_own_process_run_its_roles(
    tmp: Path, broker: Mosquitto, agents: str | None
) -> None:
    assert DEFAULTS.agents == "local"
    env = {"GLIDING_BUS__URL": broker.url, "GLIDING_MEMORY__VECTORS__ENABLED": "false"}
    key = root_keyring(bus_key_path(settings_from(tmp, env)))  # the job's root key
    worker_key_file = tmp / "w1.bus.key"
    write_key_file(worker_key_file, worker_key(key.key, "w1"), "w1")  # enrolled as w1
    worker_settings = settings_from(tmp, {**env, "GLIDING_DATA_DIR": str(tmp / "worker"),
                                          "GLIDING_BUS__KEY_FILE": str(worker_key_file)})
    worker_settings.data_dir.mkdir()
    if agents is not None:
        env["GLIDING_DAEMON__AGENTS"] = agents

    handle, service = anyio.run(job_beside_a_worker, tmp, settings_from(tmp, env),
                                worker_settings)

    report = handle.report
    assert report is not None and report.outcome == "success", report
    assert (tmp / "workspace" / "hello.txt").read_text(encoding="utf-8") == "Hello"
    assert service.finished == (1 if agents == "workers" else 0)  # DA's one assignment
