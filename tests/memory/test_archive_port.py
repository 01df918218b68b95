"""The archive port's contract (``gliding.testing.archive_contract``), run against LocalArchive
(SQLite, on threads) and the in-memory fake; LocalArchive's read cache; and an agent session
that writes only through the port."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gliding.memory.archive.port import ArchivePort, CacheStats, LocalArchive, ReadCache
from gliding.memory.archive.store import Archive
from gliding.testing.archive import InMemoryArchive
from gliding.testing.archive_contract import ArchivePortContract, MakePort

J = "gliding://job/j1"


class TestLocalArchive(ArchivePortContract):
    @pytest.fixture
    def make_port(self, tmp_path: Path) -> MakePort:
        @asynccontextmanager
        async def make() -> AsyncIterator[ArchivePort]:
            archive = Archive.open(tmp_path / "data", "j1")
            try:
                yield LocalArchive(archive, tmp_path / "data")
            finally:
                archive.close()

        return make


class TestInMemoryArchive(ArchivePortContract):
    @pytest.fixture
    def make_port(self) -> MakePort:
        @asynccontextmanager
        async def make() -> AsyncIterator[ArchivePort]:
            yield InMemoryArchive("j1")

        return make


def _local(tmp_path: Path, cache_bytes: int = 1 << 20) -> LocalArchive:
    return LocalArchive(Archive.open(tmp_path / "data", "j1"), tmp_path / "data",
                        cache_bytes=cache_bytes)


def test_a_warmed_read_is_a_cache_hit_and_a_first_read_caches(tmp_path: Path) -> None:
    port = _local(tmp_path)

    async def main() -> None:
        await port.put(f"{J}/result/DA-1-0", "one", kind="result")
        await port.put(f"{J}/result/DA-2-0", "two", kind="result")
        assert await port.warm([f"{J}/result/DA-1-0"]) == 1
        assert await port.read_text(f"{J}/result/DA-1-0") == "one"
        assert port.cache_stats == CacheStats(hits=1, misses=0, warmed=1)
        await port.read_text(f"{J}/result/DA-2-0")  # a miss, read through into the cache
        await port.read_text(f"{J}/result/DA-2-0")
        assert port.cache_stats == CacheStats(hits=2, misses=1, warmed=1)
        assert await port.warm([f"{J}/result/DA-2-0"]) == 0  # cached by the read already

    anyio.run(main)
    port.archive.close()


def test_a_node_iri_is_never_cached_so_its_latest_revision_reads(tmp_path: Path) -> None:
    port = _local(tmp_path)
    node = f"{J}/plan/1/step/1"

    async def main() -> None:
        for n in (1, 2, 3):
            await port.put(f"{J}/node/step/1/{n}", f"revision {n}", kind="node",
                           meta={"node": node})
            assert await port.warm([node]) == 0
            assert await port.read_text(node) == f"revision {n}"
        assert node not in port.read_cache
        assert port.cache_stats == CacheStats(hits=0, misses=3, warmed=0)

    anyio.run(main)
    port.archive.close()


def test_another_jobs_item_is_read_but_not_cached(tmp_path: Path) -> None:
    with Archive.open(tmp_path / "data", "j2") as other:
        other.put("gliding://job/j2/result/DA-1-0", "earlier", kind="result")
    port = _local(tmp_path)

    async def main() -> None:
        for _ in range(2):
            assert await port.read_text("gliding://job/j2/result/DA-1-0") == "earlier"
        assert port.cache_stats == CacheStats(hits=0, misses=2, warmed=0)
        assert len(port.read_cache) == 0

    anyio.run(main)
    port.archive.close()


def test_the_least_recently_used_text_is_evicted_within_the_byte_bound(tmp_path: Path) -> None:
    port = _local(tmp_path, cache_bytes=10)
    a, b, c = (f"{J}/result/{x}" for x in "abc")

    async def main() -> None:
        for iri in (a, b, c):
            await port.put(iri, "four", kind="result")
        assert await port.warm([a, b]) == 2
        await port.read_text(a)  # b is now the least recently used
        assert await port.warm([c]) == 1
        assert (a in port.read_cache, b in port.read_cache, c in port.read_cache) == (
            True, False, True)
        assert port.read_cache.size == 8 <= port.read_cache.cap

    anyio.run(main)
    port.archive.close()


def test_a_text_over_the_cap_is_not_cached(tmp_path: Path) -> None:
    port = _local(tmp_path, cache_bytes=10)
    big = f"{J}/result/big"

    async def main() -> None:
        await port.put(big, "eleven byte", kind="result")
        assert await port.warm([big]) == 0
        for _ in range(2):
            assert await port.read_text(big) == "eleven byte"
        assert port.cache_stats == CacheStats(hits=0, misses=2, warmed=0)
        assert port.read_cache.size == 0

    anyio.run(main)
    port.archive.close()


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 12), st.booleans()),
                max_size=40))
def test_the_read_cache_is_an_lru_within_its_byte_bound(ops: list[tuple[str, int, bool]]) -> None:
    """Against a plain model of LRU: same keys, same bytes, never over the cap."""
    cache, model = ReadCache(20), OrderedDict[str, int]()
    for key, size, read in ops:
        if key in model:
            model.move_to_end(key)
        if read:
            assert cache.get(key) == (key * model[key] if key in model else None)
            continue
        fits = key not in model and size <= cache.cap
        if fits:
            while sum(model.values()) + size > cache.cap:
                model.popitem(last=False)
            model[key] = size
        assert cache.put(key, key * size, size) is fits
        assert {k for k in "abcdef" if k in cache} == set(model)
        assert cache.size == sum(model.values()) <= cache.cap


def test_an_agent_session_needs_nothing_but_the_port(tmp_path: Path) -> None:
    from gliding.agents.loop import AgentEnv, run_agent
    from gliding.agents.roles import load_role
    from gliding.bus.inproc import InProcessBus
    from gliding.config.settings import Settings
    from gliding.context.tokens import TokenCounter
    from gliding.core.budget import BudgetTracker, Limits
    from gliding.testing import ScriptedLLM, call
    from gliding.tools.base import ToolContext
    from gliding.tools.groups import job_groups

    fake = InMemoryArchive("j1")
    settings = Settings()
    spec = load_role("DA")
    llm = ScriptedLLM([call("write_file", path="a.txt", content="x"),
                       call("read_result", iri="result/DA-1-0"),
                       call("finish", summary="wrote a.txt")])
    env = AgentEnv(job="j1", role=spec, llm=llm,
                   toolset=job_groups(reader=fake, iri_base=f"{J}/").toolset(spec.tool_groups),
                   tool_ctx=ToolContext(tmp_path, settings.tools), archive=fake,
                   budget=BudgetTracker(Limits(), started_at=0.0), bus=InProcessBus(),
                   now=lambda: 0.0, max_turns=5, context=settings.context,
                   counter=TokenCounter())
    result = anyio.run(run_agent, env, "Goal: write a.txt")
    assert result.status == "finished"
    assert result.tools[1].output == "wrote 1 bytes to a.txt"  # read back through the port
    assert sorted(i for i in fake.items if "/turn/" in i) == [f"{J}/turn/DA/{n}"
                                                              for n in (1, 2, 3)]
    assert len(fake.ledger) == 3
