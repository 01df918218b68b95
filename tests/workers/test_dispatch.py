"""The dispatcher and a worker on the in-process bus, the worker's sessions faked (``_run``):
an offer delivered twice, a full worker, a revoked session, the end of a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.agents.worker import failed_answer
from gliding.bus import topics
from gliding.bus.auth import digest
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import Assignment, Claim, GrantMsg, WorkItem
from gliding.config.loader import load_settings
from gliding.daemon.dispatch import Dispatcher
from gliding.daemon.workers import WorkerService
from gliding.testing.clock import autojump

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def assignment(role: str = "DA", job: str = "j1") -> Assignment:
    return Assignment(job=job, role=role, cycle=1, attempt=0, goal="g", instructions="i")


class SlowWorker(WorkerService):
    """Its sessions take ``work_s`` and answer as failed (no agent is run)."""

    def __init__(self, *args: Any, work_s: float = 1.0, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.work_s = work_s
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def _run(self, item: WorkItem) -> Any:
        self.started.append(item.key)
        try:
            await anyio.sleep(self.work_s)
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(item.key)
            raise
        return failed_answer(item.assignment, "fake")


def settings(tmp: Path) -> Any:
    return load_settings(env={}, overrides={"data_dir": str(tmp), "daemon.heartbeat_s": 0.5,
                                            "daemon.lease_s": 2.0})


async def test_an_offer_delivered_twice_is_claimed_once(tmp_path: Path) -> None:
    bus = InProcessBus()
    worker = SlowWorker(settings(tmp_path), bus, None, name="w1", work_s=0.5)  # type: ignore[arg-type]
    item = WorkItem(key="j1/DA/1/0", epoch=1, assignment=assignment(), task_record={},
                    model="m")
    claims: list[Claim] = []
    with anyio.fail_after(10):
        async with bus.subscribe(topics.claims("j1")) as inbox, anyio.create_task_group() as tg:
            await tg.start(worker.serve)
            for _ in range(3):  # QoS 1 and a re-offer: the same item again
                await bus.publish(topics.work("DA"), item)
            _t, claim = await inbox.receive()
            claims.append(claim)
            await bus.publish(topics.grants("w1"), GrantMsg(job="j1", key=item.key, epoch=1,
                                                            worker="w1", granted=True,
                                                            item=digest(item.to_json())))
            await bus.publish(topics.work("DA"), item)  # and once more while it runs
            with anyio.move_on_after(1.0):
                claims.append((await inbox.receive())[1])
            tg.cancel_scope.cancel()
    assert [c.key for c in claims] == [item.key]
    assert worker.started == [item.key]


async def test_a_full_pool_is_not_flooded_with_offers(tmp_path: Path) -> None:
    bus = InProcessBus()
    worker = SlowWorker(settings(tmp_path), bus, None, name="w1", work_s=60)  # type: ignore[arg-type]
    dispatcher = Dispatcher(bus, "j1", task_record={}, model="m", origin="", lease_s=2.0)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(dispatcher.serve)
            await tg.start(worker.serve)
            await bus.publish(topics.agent("j1", "DA"), assignment())
            await bus.publish(topics.agent("j1", "DA"),
                              assignment().model_copy(update={"attempt": 1}))
            await anyio.sleep(1.5)
            tg.cancel_scope.cancel()
    assert len(worker.started) == 1  # concurrency 1: the second waits
    assert dispatcher.handed <= 4  # the second offer is made again every offer_s, not in a loop


async def test_a_lapsed_or_ended_session_is_revoked(tmp_path: Path) -> None:
    bus = InProcessBus()
    worker = SlowWorker(settings(tmp_path), bus, None, name="w1", work_s=60)  # type: ignore[arg-type]
    dispatcher = Dispatcher(bus, "j1", task_record={}, model="m", origin="", lease_s=2.0)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as outer:
            await outer.start(worker.serve)
            async with anyio.create_task_group() as tg:
                await tg.start(dispatcher.serve)
                await bus.publish(topics.agent("j1", "DA"), assignment())
                while not worker.started:
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()  # the job ends with the session still at work
            while not worker.cancelled:
                await anyio.sleep(0.05)
            outer.cancel_scope.cancel()
    assert worker.cancelled == ["j1/DA/1/0"] and worker.finished == 0


def test_heartbeats_keep_a_slow_worker_s_work(tmp_path: Path) -> None:
    async def main() -> tuple[SlowWorker, Dispatcher]:
        bus = InProcessBus()
        worker = SlowWorker(settings(tmp_path), bus, None, name="w1", work_s=30)  # type: ignore[arg-type]
        dispatcher = Dispatcher(bus, "j1", task_record={}, model="m", origin="", lease_s=2.0)
        async with bus.subscribe(topics.results("j1")) as answers:
            async with anyio.create_task_group() as tg:
                await tg.start(dispatcher.serve)
                await tg.start(worker.serve)
                await bus.publish(topics.agent("j1", "DA"), assignment())
                await answers.receive()
                while not worker.finished:  # its publish returns after the delivery
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
        return worker, dispatcher

    worker, dispatcher = autojump(main)  # virtual time: 30 s pass at once
    assert worker.finished == 1 and worker.cancelled == []
    assert dispatcher.lapsed == 0 and dispatcher.handed == 1  # 30 s of work, a lease of 2 s
