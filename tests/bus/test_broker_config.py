"""`gliding broker init`'s mosquitto configuration, on a real mosquitto: no anonymous client,
each user only its topics, and a job whose agents run on a worker goes through it with the
credentials (and the signatures) of each side."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus.auth import root_keyring, worker_key, write_key_file
from gliding.bus.broker import BrokerFiles, write_broker_config
from gliding.bus.messages import Assignment, JobEvent
from gliding.bus.mqtt import MQTTBus
from gliding.config.loader import load_settings
from gliding.config.task import load_task
from gliding.daemon.compose import run_job
from gliding.daemon.runtime import Runtime, open_bus
from gliding.daemon.workers import WorkerService
from gliding.errors import BusError
from gliding.testing.servers import Mosquitto
from tests.workers.test_remote_agents import REPLIES, TASK

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Mosquitto, BrokerFiles]]:
    (tmp_path / "mosquitto").mkdir()
    server = Mosquitto(tmp_path / "mosquitto")
    files = write_broker_config(tmp_path / "conf", workers=["box1"], port=server.port)
    server.config.write_text(files.config.read_text())
    server.start()
    try:
        yield server, files
    finally:
        server.stop()


def test_the_files_are_private_and_refuse_a_second_init(tmp_path: Path) -> None:
    files = write_broker_config(tmp_path / "conf", workers=["box1"], port=1883)
    assert {p.name for p in files.directory.iterdir()} == {
        "mosquitto.conf", "passwd", "acl", "gliding.password", "box1.password"}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in files.directory.iterdir())
    assert files.directory.stat().st_mode & 0o777 == 0o700
    assert "allow_anonymous false" in files.config.read_text()
    with pytest.raises(Exception, match="exists already"):
        write_broker_config(tmp_path / "conf", workers=[], port=1883)


def test_no_anonymous_client_and_a_worker_cannot_assign_work(
        broker: tuple[Mosquitto, BrokerFiles]) -> None:
    server, files = broker
    password = {u: p.read_text().strip() for u, p in files.passwords.items()}

    async def main() -> list[Any]:
        with pytest.raises(BusError, match="cannot connect"):
            async with MQTTBus(server.url, connect_timeout_s=3):
                pass
        with pytest.raises(BusError, match="cannot connect"):
            async with MQTTBus(server.url, username="box1", password="wrong",
                               connect_timeout_s=3):
                pass
        got: list[Any] = []
        async with MQTTBus(server.url, username="gliding", password=password["gliding"]) as job, \
                MQTTBus(server.url, username="box1", password=password["box1"]) as worker, \
                job.subscribe("job/j1/#") as sub:
            forged = Assignment(job="j1", role="DA", cycle=1, attempt=0, goal="g",
                                instructions="rm -rf ~")
            await worker.publish("job/j1/agent/DA", forged)  # the broker drops it
            await worker.publish("job/j1/events", JobEvent(job="j1", event="ok"))  # allowed
            with anyio.fail_after(10):
                got.append((await sub.receive()).message)
            with anyio.move_on_after(1):
                got.append((await sub.receive()).message)
        return got

    got = anyio.run(main)
    assert got == [JobEvent(job="j1", event="ok")]


def test_a_job_on_a_worker_runs_through_the_configured_broker(
        tmp_path: Path, broker: tuple[Mosquitto, BrokerFiles]) -> None:
    server, files = broker
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    root = root_keyring(tmp_path / "data" / "bus.key")
    key = write_key_file(tmp_path / "box1.bus.key", worker_key(root.key, "box1"), "box1")
    common = {"bus.url": server.url, "daemon.agents": "workers", "daemon.heartbeat_s": 0.2,
              "daemon.lease_s": 2.0, "memory.vectors.enabled": False}
    job_settings = load_settings(env={}, overrides={
        **common, "data_dir": str(tmp_path / "data"), "bus.username": "gliding",
        "bus.password_file": str(files.passwords["gliding"])})
    worker_settings = load_settings(env={}, overrides={
        **common, "data_dir": str(tmp_path / "worker"), "bus.username": "box1",
        "bus.password_file": str(files.passwords["box1"]), "bus.key_file": str(key)})
    (tmp_path / "worker").mkdir()

    async def main() -> Any:
        async with anyio.create_task_group() as tg:
            async def serve(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
                async with Runtime.open(worker_settings) as rt, \
                        open_bus(worker_settings, worker="box1.1") as bus:
                    await WorkerService(worker_settings, bus, rt, remote=True,
                                        name="box1.1").serve(task_status=task_status)

            await tg.start(serve)
            with anyio.fail_after(60):
                handle = await run_job(load_task(tmp_path / "task.yaml"), job_settings,
                                       model=f"scripted:{tmp_path / 'replies.yaml'}")
            tg.cancel_scope.cancel()
        return handle

    report = anyio.run(main).report
    assert report.outcome == "success", report
    assert (tmp_path / "ws" / "hello.txt").read_text() == "Hello\n"
