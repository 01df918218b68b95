"""BusArchive against an ArchiveServer over the in-process bus, writing a real SQLite archive:
the ArchivePort contract (``gliding.testing.archive_contract``), the operations, exactly-once
writes when requests are sent again, errors that keep their kind, and a job process that does
not answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from gliding.bus import topics
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import ArchiveRequest
from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive.bus import ArchiveServer, BusArchive
from gliding.memory.archive.port import ArchivePort, LocalArchive
from gliding.memory.archive.records import CallRecord
from gliding.memory.archive.store import Archive
from gliding.testing.archive_contract import ArchivePortContract, MakePort

J = "gliding://job/j1"


@asynccontextmanager
async def served(tmp_path: Path, **kw: float) -> AsyncIterator[tuple[BusArchive, Archive,
                                                                     ArchiveServer]]:
    archive = Archive.open(tmp_path / "data", "j1")
    bus = InProcessBus()
    server = ArchiveServer(bus, LocalArchive(archive, tmp_path / "data"))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            async with BusArchive(bus, "j1", "w1", **kw) as port:  # type: ignore[arg-type]
                yield port, archive, server
            tg.cancel_scope.cancel()
    finally:
        await bus.aclose()
        archive.close()


class TestBusArchive(ArchivePortContract):
    """The port's contract holds over the bus as it does on the archive itself."""

    @pytest.fixture
    def make_port(self, tmp_path: Path) -> MakePort:
        @asynccontextmanager
        async def make() -> AsyncIterator[ArchivePort]:
            async with served(tmp_path) as (port, _archive, _server):
                yield port

        return make


def test_every_operation_goes_through_to_the_archive(tmp_path: Path) -> None:
    async def main() -> None:
        async with served(tmp_path) as (port, archive, _):
            assert port.job == "j1"
            await port.put(f"{J}/result/DA-1-0", b"\x00\xffout", kind="result",
                           meta={"ok": True})
            item = await port.find(f"{J}/result/DA-1-0")
            assert item is not None and item.content == b"\x00\xffout"
            assert item.meta == {"ok": True} and item.kind == "result"
            assert await port.find(f"{J}/result/DA-9-0") is None
            call = CallRecord(job="j1", role="DA", turn=1, model="m", prompt_tokens=5,
                              turn_iri=f"{J}/turn/DA/1")
            await port.put_turn(f"{J}/turn/DA/1", '{"t": 1}', {"role": "DA"}, call)
            assert [c.prompt_tokens for c in await port.calls()] == [5]
            assert archive.get(f"{J}/turn/DA/1").content == b'{"t": 1}'
            await port.put(f"{J}/result/DA-2-0", "text", kind="result")
            assert await port.warm([f"{J}/result/DA-2-0", "not an iri",
                                    "gliding://job/j2/result/DA-1-0"]) == 1
            assert await port.read_text(f"{J}/result/DA-2-0") == "text"
            assert port.cache_stats.hits == 1

    anyio.run(main)


def test_writes_sent_again_reach_the_archive_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with served(tmp_path) as (port, archive, server):
            call = CallRecord(job="j1", role="DA", turn=1, model="m", prompt_tokens=5,
                              turn_iri=f"{J}/turn/DA/1")
            for _ in range(3):  # as a worker does whose reply got lost
                await port.put_turn(f"{J}/turn/DA/1", '{"t": 1}', {"role": "DA"}, call)
                await port.put(f"{J}/result/DA-1-0", "out", kind="result")
            # the same request twice on the wire, concurrently (QoS 1 redelivery)
            request = ArchiveRequest(id="dup", job="j1", worker="w1", op="put_turn", args={
                "iri": f"{J}/turn/DA/2", "body": "{}", "meta": {},
                "call": {"job": "j1", "role": "DA", "turn": 2, "model": "m"}})
            async with anyio.create_task_group() as tg:
                for _ in range(2):
                    tg.start_soon(port.bus.publish, topics.archive_requests("j1"), request)
            with anyio.fail_after(5):
                while server.served < 8:
                    await anyio.sleep(0.01)
            assert len(archive.calls()) == 2
            assert [i.iri for i in archive.list()].count(f"{J}/result/DA-1-0") == 1

    anyio.run(main)


def test_errors_keep_their_kind(tmp_path: Path) -> None:
    async def main() -> None:
        async with served(tmp_path) as (port, _, _):
            await port.put(f"{J}/result/DA-1-0", "out", kind="result")
            with pytest.raises(ArchiveError, match="different content"):
                await port.put(f"{J}/result/DA-1-0", "other", kind="result")
            with pytest.raises(NotFoundError):
                await port.read_text(f"{J}/result/DA-7-0")
            with pytest.raises(IRIError):
                await port.read_text("gliding://job/j1/../../etc")

    anyio.run(main)


def test_a_job_process_that_does_not_answer_is_an_archive_error(tmp_path: Path) -> None:
    async def main() -> None:
        bus = InProcessBus()
        async with BusArchive(bus, "j1", "w1", timeout_s=0.05, tries=2) as port:
            with pytest.raises(ArchiveError, match="did not answer"):
                await port.calls()
        await bus.aclose()

    anyio.run(main)


def test_a_worker_reads_its_own_job_only(tmp_path: Path) -> None:
    other = Archive.open(tmp_path / "data", "j2")
    other.put("gliding://job/j2/result/DA-1-0", b"secret", kind="result")
    other.close()

    async def main() -> None:
        async with served(tmp_path) as (port, _, _):
            with pytest.raises(NotFoundError, match="not an item of job j1"):
                await port.read_text("gliding://job/j2/result/DA-1-0")
            with pytest.raises(NotFoundError):
                await port.find("gliding://job/j2/result/DA-1-0")

    anyio.run(main)
