"""The job's blackboard through the coherence engine: ingestion writes through the directory
(revisions in L0, nodes on a real Oxigraph board), agents' views read through their caches."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from gliding.bus.inproc import InProcessBus
from gliding.config.settings import Settings
from gliding.daemon.board import worker_views
from gliding.memory.archive.store import Archive
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.nodes import JobNodeStore, index_iri, latest_revisions
from gliding.memory.board.projection import Projector
from gliding.memory.board.vocabulary import from_jsonld
from gliding.memory.coherence.cache import Cache
from gliding.memory.coherence.directory import Directory
from gliding.memory.coherence.service import CoherenceTimeout
from gliding.memory.coherence.views import CoherentViews
from gliding.memory.ingest.ingestor import Ingestor
from gliding.testing.coherence import MemoryNodeStore

pytestmark = pytest.mark.anyio
J = "gliding://job/j"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def words(text: str) -> int:
    return len(text.split())


@asynccontextmanager
async def job(tmp: Path, *, resumed: bool = False) -> AsyncIterator[
        tuple[Ingestor, CoherentViews, Cache, JobNodeStore]]:
    board = OxigraphBlackboard.open(tmp / "board")
    archive = Archive.open(tmp, "j")
    store = JobNodeStore(board, archive, "j")
    async with InProcessBus() as bus, anyio.create_task_group() as tg:
        await tg.start(Directory(bus, store, "j", lease_s=2.0, grace_s=0).serve)
        writer = Cache(bus, "j", "ingest")
        reader = Cache(bus, "j", "agents")
        await tg.start(writer.serve)
        await tg.start(reader.serve)
        ingestor = Ingestor(board, archive, "j", writer)
        if resumed:
            await anyio.to_thread.run_sync(ingestor.restore)
        yield ingestor, CoherentViews(reader, words), reader, store
        tg.cancel_scope.cancel()
    board.close()


async def test_writes_go_through_the_directory_and_views_see_only_changes(tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, reader, store):
        await ingestor.plan(1, ["write hello.py", "test it"], None)
        first = await views.update("CA-1", "CA", J, 2000)
        assert first.count("Step <") == 2 and first == await views.briefing("CA", J, 2000)
        assert await views.update("CA-1", "CA", J, 2000) == "", "nothing changed, nothing sent"
        await ingestor.artifact("hello.py", f"{J}/result/r1")
        assert views.stats.invalidated >= 1, "the index line's invalidation dropped the view"
        change = await views.update("CA-1", "CA", J, 2000)
        assert change.startswith("Artifact <") and "\n" not in change
        assert views.stats.sent_tokens < views.stats.full_tokens
        # the board and L0 hold what the directory acknowledged, as ingestion always wrote it
        revisions = latest_revisions(ingestor.archive)
        step = f"{J}/plan/1/step/1"
        assert revisions[step][0] == 1
        assert from_jsonld(ingestor.archive.get(revisions[step][1].iri).text())["@id"] == step
        assert ingestor.board.get(step, graph=J) is not None
        members = json.loads(store.load(index_iri(J, "Step"))[1] or "[]")
        assert members == [f"{J}/plan/1/step/1", f"{J}/plan/1/step/2"]


async def test_the_view_is_the_projectors_frame(tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, _, _):
        await ingestor.plan(1, ["a step"], None)
        await ingestor.artifact("x.txt", f"{J}/result/r1")
        mine = await views.briefing("CA", J, 2000)
        theirs = Projector(ingestor.board, words).briefing("CA", J, 2000)
        assert sorted(line.split(":")[0] for line in mine.splitlines()) == sorted(
            line.split(":")[0] for line in theirs.splitlines())


async def test_a_changed_node_is_re_sent_and_unchanged_ones_are_not(tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, _, _):
        await ingestor.plan(1, ["one", "two"], None)
        await views.update("s", "CA", J, 2000)
        await ingestor.put({
            "@id": f"{J}/plan/1/step/2", "@type": "Step", "text": "two", "status": "done",
            "partOf": f"{J}/plan/1"})
        change = await views.update("s", "CA", J, 2000)
        assert change.startswith(f"Step <{J}/plan/1/step/2>") and "status=done" in change


async def test_a_resumed_job_continues_the_revisions_and_the_index(tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, _, _, _):
        await ingestor.plan(1, ["one"], None)
    async with job(tmp_path, resumed=True) as (ingestor, views, _, store):
        await ingestor.plan(2, ["again"], None)
        view = await views.briefing("CA", J, 2000)
        assert f"{J}/plan/1/step/1" in view and f"{J}/plan/2/step/1" in view
        assert store.load(f"{J}/plan/1/step/1")[0] == 1


async def test_views_hold_their_lines_shared(tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, reader, _):
        await ingestor.plan(1, ["one"], None)
        await views.briefing("CA", J, 2000)
        states = {line.state.name for line in reader.lines.values()}
        assert states == {"S"}


def test_the_update_heading_is_what_scripted_teams_recognise() -> None:
    from gliding.daemon.board import UPDATE_HEADING
    from gliding.testing.latency import BOARD_UPDATE

    assert UPDATE_HEADING.startswith(BOARD_UPDATE)


async def test_an_invalidated_line_of_a_view_is_read_again_before_it_is_asked_for(
        tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, reader, _):
        async with anyio.create_task_group() as tg:
            await tg.start(views.serve)
            await ingestor.plan(1, ["one"], None)
            await views.update("s", "CA", J, 2000)
            misses = reader.stats.misses
            await ingestor.artifact("a.txt", f"{J}/result/r1")
            with anyio.fail_after(5):
                while views.stats.prefetched == 0:
                    await anyio.sleep(0.01)
            assert reader.peek(index_iri(J, "Artifact")) is not None, "warm again, as Shared"
            change = await views.update("s", "CA", J, 2000)
            assert change.startswith("Artifact <")
            assert reader.stats.misses - misses == views.stats.prefetched + 1, \
                "only the new member was a miss at the update; the index came prefetched"
            tg.cancel_scope.cancel()


async def test_a_session_is_sent_what_differs_from_its_briefing(tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, _, _):
        await ingestor.plan(1, ["one"], None)
        briefing = await views.briefing("CA", J, 2000)
        views.shown("s", f"Blackboard (what the team recorded so far):\n{briefing}")
        await ingestor.artifact("a.txt", f"{J}/result/r1")
        change = await views.update("s", "CA", J, 2000)  # its first look: only the news
        assert change.startswith("Artifact <") and "Step <" not in change


async def test_a_failed_index_write_is_mended_when_the_node_is_written_again(
        tmp_path: Path) -> None:
    async with job(tmp_path) as (ingestor, views, _, store):
        cache = ingestor.writer
        failures = [1]

        class Flaky:
            """The ingestion cache, its first index write unanswered."""

            async def write(self, iri: str, text: str | None) -> int:
                if "/index/" in iri and failures:
                    failures.pop()
                    raise CoherenceTimeout("no answer (a test said so)")
                return await cache.write(iri, text)

            async def write_many(self, items: Sequence[tuple[str, str]]) -> list[int]:
                return [await self.write(iri, text) for iri, text in items]

        ingestor.writer = Flaky()
        node = {"@id": f"{J}/artifact/a.txt", "@type": "Artifact", "path": "a.txt",
                "partOf": J}
        with pytest.raises(CoherenceTimeout):
            await ingestor.put(node)
        await ingestor.put(node)
        assert f"{J}/artifact/a.txt" in await views.briefing("CA", J, 2000)


async def test_a_workers_cache_departs_when_its_session_ends() -> None:
    settings = Settings()
    async with InProcessBus() as bus, anyio.create_task_group() as tg:
        directory = Directory(bus, MemoryNodeStore(), "j", lease_s=2.0, grace_s=0)
        await tg.start(directory.serve)
        async with worker_views(bus, "j", "w1.abcd", 2.0, settings, words) as board:
            assert board is not None
            await board.views.cache.read(f"{J}/plan/1")
            assert directory.entries[f"{J}/plan/1"].owner == "w1.abcd"
        with anyio.fail_after(2):
            while directory.stats.departed == 0:
                await anyio.sleep(0.01)
        assert directory.entries[f"{J}/plan/1"].owner is None
        tg.cancel_scope.cancel()
