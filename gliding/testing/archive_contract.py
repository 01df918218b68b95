"""The contract every ``ArchivePort`` passes: subclass ``ArchivePortContract`` and give
``make_port``, a factory of async context managers that each open an empty port of job
``j1`` (and close it after):

    class TestMyArchive(ArchivePortContract):
        @pytest.fixture
        def make_port(self, tmp_path):
            @asynccontextmanager
            async def make():
                yield MyArchive(...)
            return make

``tests/memory/test_archive_port.py`` runs it against ``LocalArchive`` (SQLite on threads)
and ``InMemoryArchive``, ``tests/workers/test_bus_archive.py`` against ``BusArchive`` (the
same port over the bus, answered by an ``ArchiveServer``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
import pytest

from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive.port import ArchivePort
from gliding.memory.archive.records import CallRecord

J = "gliding://job/j1"
MakePort = Callable[[], AbstractAsyncContextManager[ArchivePort]]


def _run(make_port: MakePort, body: Callable[[ArchivePort], Awaitable[None]]) -> None:
    async def main() -> None:
        async with make_port() as port:
            await body(port)

    anyio.run(main)


class ArchivePortContract:
    """What an agent may rely on from the port it writes L0 through, whatever is behind it."""

    def test_an_item_reads_back_with_its_meta(self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            assert port.job == "j1"
            await port.put(f"{J}/result/DA-1-0", "out", kind="result", meta={"ok": True})
            item = await port.find(f"{J}/result/DA-1-0")
            assert item is not None and item.content == b"out" and item.meta == {"ok": True}
            assert item.kind == "result"
            assert await port.read_text(f"{J}/result/DA-1-0") == "out"
            assert await port.find(f"{J}/result/DA-9-0") is None

        _run(make_port, body)

    def test_bytes_come_back_exactly(self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            await port.put(f"{J}/result/DA-1-0", b"\x00\xffout", kind="result")
            item = await port.find(f"{J}/result/DA-1-0")
            assert item is not None and item.content == b"\x00\xffout"

        _run(make_port, body)

    def test_the_same_bytes_again_are_a_no_op_and_other_bytes_are_refused(
            self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            await port.put(f"{J}/result/DA-1-0", "out", kind="result")
            await port.put(f"{J}/result/DA-1-0", "out", kind="result")
            with pytest.raises(ArchiveError, match="different content"):
                await port.put(f"{J}/result/DA-1-0", "other", kind="result")
            with pytest.raises(ArchiveError):
                await port.put("gliding://job/j2/result/DA-1-0", "x", kind="result")

        _run(make_port, body)

    def test_a_turn_and_its_ledger_row_are_written_together(self, make_port: MakePort) -> None:
        call = CallRecord(job="j1", role="DA", turn=1, model="m", prompt_tokens=5,
                          turn_iri=f"{J}/turn/DA/1")

        async def body(port: ArchivePort) -> None:
            await port.put_turn(f"{J}/turn/DA/1", '{"reply": {}}', {"role": "DA", "turn": 1},
                                call)
            assert [(c.turn_iri, c.prompt_tokens) for c in await port.calls()] == [
                (f"{J}/turn/DA/1", 5)]
            assert (await port.find(f"{J}/turn/DA/1")) is not None
            with pytest.raises(ArchiveError):  # a different turn body under the same IRI
                await port.put_turn(f"{J}/turn/DA/1", '{"reply": 2}', {}, call)
            assert len(await port.calls()) == 1  # and no second ledger row

        _run(make_port, body)

    def test_a_turn_written_again_is_recorded_once(self, make_port: MakePort) -> None:
        call = CallRecord(job="j1", role="DA", turn=1, model="m", prompt_tokens=5,
                          turn_iri=f"{J}/turn/DA/1")

        async def body(port: ArchivePort) -> None:
            for _ in range(3):  # as a worker does whose acknowledgement got lost
                await port.put_turn(f"{J}/turn/DA/1", '{"t": 1}', {"role": "DA"}, call)
            assert len(await port.calls()) == 1

        _run(make_port, body)

    def test_a_node_iri_reads_its_latest_revision(self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            for n in (1, 2):
                await port.put(f"{J}/node/step/1/{n}", f"revision {n}", kind="node",
                               meta={"node": f"{J}/plan/1/step/1"})
            assert await port.read_text(f"{J}/plan/1/step/1") == "revision 2"

        _run(make_port, body)

    def test_missing_and_malformed_iris_are_clear_errors(self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            with pytest.raises(NotFoundError):
                await port.read_text(f"{J}/result/nothing")
            with pytest.raises(IRIError):
                await port.read_text("not an iri")

        _run(make_port, body)

    def test_warm_counts_what_it_newly_cached_and_a_second_warm_nothing(
            self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            await port.put(f"{J}/result/DA-1-0", "one", kind="result")
            await port.put(f"{J}/result/DA-2-0", "two", kind="result")
            iris = [f"{J}/result/DA-1-0", f"{J}/result/DA-2-0", f"{J}/result/DA-1-0"]
            assert await port.warm(iris) == 2
            assert await port.warm(iris) == 0
            assert await port.warm([]) == 0

        _run(make_port, body)

    def test_warm_skips_missing_malformed_node_and_other_jobs_iris(
            self, make_port: MakePort) -> None:
        async def body(port: ArchivePort) -> None:
            await port.put(f"{J}/node/step/1/1", "revision 1", kind="node",
                           meta={"node": f"{J}/plan/1/step/1"})
            skipped = [f"{J}/result/nothing", "not an iri", "gliding://job/j2/result/DA-1-0",
                       f"{J}/plan/1/step/1", J]
            assert await port.warm(skipped) == 0
            assert await port.read_text(f"{J}/plan/1/step/1") == "revision 1"

        _run(make_port, body)

    def test_a_warmed_item_reads_back_byte_identical(self, make_port: MakePort) -> None:
        text = "naïve café — ✓\n\ttabbed\r\nlast line without newline"

        async def body(port: ArchivePort) -> None:
            await port.put(f"{J}/result/DA-1-0", text, kind="result")
            assert await port.warm([f"{J}/result/DA-1-0"]) == 1
            for _ in range(2):
                assert (await port.read_text(f"{J}/result/DA-1-0")).encode() == text.encode()

        _run(make_port, body)

