"""A job whose agents run on WorkerServices, not in its own process: the job and two workers
meet only through a real mosquitto broker (each with its own MQTT connection). One worker
writes L0 into the job's archive file (same host), the other only through the broker."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.bus.auth import root_keyring
from gliding.bus.messages import JobEvent
from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.config.task import load_task
from gliding.daemon.compose import resume_job, run_job
from gliding.daemon.runtime import Runtime, open_bus
from gliding.daemon.workers import WorkerService
from gliding.errors import ProviderUnavailable, UsageError
from gliding.memory.archive.store import Archive
from gliding.testing.fake_provider import FakeProvider, FaultPlan
from gliding.testing.servers import Mosquitto, mosquitto

TASK = """\
goal: Create hello.txt containing "Hello"
pipeline: [PA, DA, CA, AA]
workspace: ws
checks:
  - file_contains: {path: hello.txt, text: "Hello"}
"""
REPLIES = """\
PA:
  - finish: {steps: [write hello.txt]}
DA:
  - bash: {command: "echo Hello > hello.txt"}
  - finish: {summary: wrote hello.txt}
CA:
  - run_checks: {}
  - finish: {notes: ok}
AA:
  - finish: {decision: done, report: hello.txt holds Hello}
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[Mosquitto]:
    with mosquitto() as server:
        yield server


def settings_for(tmp: Path, url: str, data: str, **more: Any) -> Settings:
    root_keyring(tmp / "data" / "bus.key")  # what the job's process makes: workers read it
    return load_settings(env={}, overrides={
        "data_dir": str(tmp / data), "bus.url": url, "daemon.agents": "workers",
        "bus.key_file": str(tmp / "data" / "bus.key"),  # the job's root key: workers sign
        # with it as themselves (a worker key of their own: tests/workers/test_bus_trust.py)
        # a lease of 25 heartbeats: a loaded CI machine (2 cores, 2 busy loops) once stalled a
        # worker past a 2 s lease, and the lapse handed AA's work out twice
        "daemon.heartbeat_s": 0.2, "daemon.lease_s": 5.0, "memory.vectors.enabled": False,
        **more})


async def run_with_workers(tmp: Path, url: str, remote: tuple[bool, ...], *,
                           on_event: Callable[[JobEvent], None] | None = None,
                           worker: dict[str, Any] | None = None, **job: Any
                           ) -> tuple[Any, list[WorkerService], list[JobEvent]]:
    job_settings = settings_for(tmp, url, "data", **job)
    events: list[JobEvent] = []

    def seen(event: JobEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    services: list[WorkerService] = []
    async with anyio.create_task_group() as tg:
        for n, is_remote in enumerate(remote):
            # shared: the job's own data directory (its archive file is written directly)
            ws = settings_for(tmp, url, f"worker{n}" if is_remote else "data", **(worker or {}))
            ws.data_dir.mkdir(exist_ok=True)

            async def serve(ws: Settings = ws, is_remote: bool = is_remote, *,
                            task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
                name = f"w{len(services)}.0"
                async with Runtime.open(ws) as rt, open_bus(ws, worker=name) as bus:
                    service = WorkerService(ws, bus, rt, remote=is_remote, name=name)
                    services.append(service)
                    await service.serve(task_status=task_status)

            await tg.start(serve)
        with anyio.fail_after(60):
            handle = await run_job(load_task(tmp / "task.yaml"), job_settings,
                                   model=f"scripted:{tmp / 'replies.yaml'}",
                                   on_event=seen)
        tg.cancel_scope.cancel()
    return handle, services, events


@pytest.mark.heavy
@pytest.mark.parametrize("remote", [(False,), (True,), (True, False)],
                         ids=["shared-data-dir", "broker-only", "two-workers"])
def test_a_job_runs_on_workers(tmp_path: Path, broker: Mosquitto,
                               remote: tuple[bool, ...]) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    handle, services, events = anyio.run(run_with_workers, tmp_path, broker.url, remote)
    report = handle.report
    assert report.outcome == "success", report
    assert (tmp_path / "ws" / "hello.txt").read_text() == "Hello\n"
    assert sum(s.finished for s in services) == 4  # PA, DA, CA, AA: each answered once
    started = [e for e in events if e.event == "role.started"]
    assert [e.data["role"] for e in started] == ["PA", "DA", "CA", "AA"]
    # no worker has a shared blackboard endpoint, yet the job's process answers their
    # knowledge tools over the broker: nothing is withheld. (A worker sharing the job's data
    # directory here runs in the job's own process and holds the embedded board first: the job
    # then has none to answer from, and the events say so.)
    withheld = [e for e in events if e.event == "memory.withheld"]
    if remote == (True,):
        assert not withheld
    assert all("did not answer over the bus" in e.data["reason"] for e in withheld)
    with Archive.open(tmp_path / "data", report.job, create=False) as archive:
        items = archive.list()
        turns = [i.iri for i in items if i.kind == "turn"]
        results = [i for i in items if i.kind == "result"]
        assert len(turns) == len(set(turns)) == 6  # every turn once, in the job's archive
        assert len(archive.calls()) == 6  # one ledger row per model call, none twice
        assert results  # the tool results the workers' agents archived
    if remote == (True,):  # nothing of the job reached the worker's own data directory
        assert not (tmp_path / "worker0" / "jobs").exists()


RECALLING = REPLIES.replace(
    "DA:\n", "DA:\n  - recall: {query: write hello.txt}\n"
              "  - kg_search: {query: write hello.txt}\n")


@pytest.mark.heavy
def test_a_worker_without_an_endpoint_reaches_the_job_s_board_through_the_bus(
        tmp_path: Path, broker: Mosquitto) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(RECALLING)
    handle, _services, events = anyio.run(run_with_workers, tmp_path, broker.url, (True,))
    assert handle.report.outcome == "success", handle.report
    assert not [e for e in events if e.event == "memory.withheld"]
    step = f"gliding://job/{handle.report.job}/plan/1/step/1"
    with Archive.open(tmp_path / "data", handle.report.job, create=False) as archive:
        answers = {i.meta.get("tool"): archive.get(i.iri).text()
                   for i in archive.list(kind="result")}
    # both answers come from the job's board, which the worker cannot open itself
    assert "Long-term memory" in answers["recall"] and "write hello.txt" in answers["recall"]
    assert f"Step {step}: write hello.txt" in answers["kg_search"]


@pytest.mark.heavy
def test_workers_are_told_when_the_job_s_process_has_no_board_to_answer_from(
        tmp_path: Path, broker: Mosquitto) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    unreachable = {"memory.blackboard.url": "http://127.0.0.1:9"}  # the job: no board
    handle, _services, events = anyio.run(functools.partial(
        run_with_workers, tmp_path, broker.url, (True,), **unreachable))
    assert handle.report.outcome == "success", handle.report
    withheld = [e for e in events if e.event == "memory.withheld"]
    assert {e.data["role"] for e in withheld} >= {"PA", "DA", "CA"}
    assert all("did not answer over the bus" in e.data["reason"] for e in withheld)


def test_workers_without_a_broker_are_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    settings = load_settings(env={}, overrides={"data_dir": str(tmp_path / "data"),
                                                "daemon.agents": "workers"})
    with pytest.raises(UsageError, match="bus.url"):
        anyio.run(lambda: run_job(load_task(tmp_path / "task.yaml"), settings,
                                  model=f"scripted:{tmp_path / 'replies.yaml'}"))
    assert not (tmp_path / "data" / "jobs").exists()


async def _outage_then_resume(tmp: Path, url: str, provider: FakeProvider
                              ) -> tuple[ProviderUnavailable, Any, Any]:
    """A job on one worker whose model stops answering after PA's turn; resumed (same worker)
    once it answers again."""
    more = {"llm.api_base": provider.url, "llm.retry.max_attempts": 2,
            "llm.retry.initial_s": 0.01, "llm.retry.max_s": 0.05}
    job_settings = settings_for(tmp, url, "data", **more)
    ws = settings_for(tmp, url, "data", **more)
    async with anyio.create_task_group() as tg:
        async def serve(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            async with Runtime.open(ws) as rt, open_bus(ws, worker="w0.0") as bus:
                await WorkerService(ws, bus, rt, remote=False, name="w0.0").serve(
                    task_status=task_status)

        await tg.start(serve)
        with anyio.fail_after(60), pytest.raises(ProviderUnavailable) as stopped:
            await run_job(load_task(tmp / "task.yaml"), job_settings, model="openai/fake-model")
        with Archive.open(tmp / "data", stopped.value.job or "", create=False) as archive:
            status = archive.get_meta("status")
        provider.faults = None  # the provider is back
        with anyio.fail_after(60):
            resumed = await resume_job(stopped.value.job or "", job_settings)
        tg.cancel_scope.cancel()
    return stopped.value, status, resumed


@pytest.mark.heavy
def test_a_model_down_on_a_worker_interrupts_the_job_and_resume_finishes_it(
        tmp_path: Path, broker: Mosquitto, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    for key, value in {"OPENAI_API_KEY": "dummy", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                       "NO_PROXY": "127.0.0.1,localhost", "HTTP_PROXY": "",
                       "HTTPS_PROXY": ""}.items():
        monkeypatch.setenv(key, value)
    with FakeProvider(tmp_path / "replies.yaml",
                      faults=FaultPlan.down("503", start_after=1)) as fp:
        stopped, status, resumed = anyio.run(_outage_then_resume, tmp_path, broker.url, fp)
    assert "no model answered" in stopped.message and stopped.job
    assert status == "interrupted"  # not "error": resumable
    assert resumed.report.outcome == "success", resumed.report
    assert (tmp_path / "ws" / "hello.txt").read_text() == "Hello\n"
