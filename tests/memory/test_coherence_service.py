"""The directory and the caches over a real bus: the in-process one here, mosquitto at the end.

Leases are short (tenths of a second) so that expiry and recovery run in test time; the caches'
clock is the real monotonic one, as the service uses it. Where a test says when the directory
drops a holder or ends its grace, the directory's clock is a ``HandClock``, set by the test: the
machine's load plays no part.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import anyio
import pytest

from gliding.bus import topics
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import CoherenceMsg
from gliding.bus.mqtt import MQTTBus
from gliding.bus.port import Bus
from gliding.errors import BusError
from gliding.memory.coherence.cache import Cache
from gliding.memory.coherence.directory import Directory
from gliding.memory.coherence.protocol import (
    Downgrade,
    DowngradeAck,
    Fill,
    InvAck,
    Invalidate,
    LineState,
    ReadMiss,
    WriteAck,
    WriteBack,
    WriteRequest,
)
from gliding.memory.coherence.service import (
    CoherenceTimeout,
    Versioned,
    for_cache,
    for_directory,
    to_wire,
)
from gliding.testing.coherence import MemoryNodeStore
from gliding.testing.servers import Mosquitto, mosquitto

pytestmark = pytest.mark.anyio
LEASE = 0.4
X, Y, Z = (f"gliding://job/j/node/{n}" for n in "xyz")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class HandClock:
    """The directory's clock, moved only by the test; counts how often the directory read it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    async def read_again(self, times: int = 5) -> None:
        """Wait until the directory has looked at the time ``times`` more times (its ticks)."""
        until = self.reads + times
        while self.reads < until:
            await anyio.sleep(0.005)


@asynccontextmanager
async def system(
    bus: Bus, store: MemoryNodeStore | None = None, *agents: str, grace: float = 0.0,
    clock: Callable[[], float] = time.monotonic, **cache_kw: object,
) -> AsyncIterator[tuple[Directory, list[Cache]]]:
    store = store if store is not None else MemoryNodeStore()
    directory = Directory(bus, store, "j", lease_s=LEASE, grace_s=grace, clock=clock)
    caches = [Cache(bus, "j", a, lease_s=LEASE, timeout_s=2.0, **cache_kw)  # type: ignore[arg-type]
              for a in agents or ("a", "b")]
    async with anyio.create_task_group() as tg:
        await tg.start(directory.serve)
        for cache in caches:
            await tg.start(cache.serve)
        yield directory, caches
        tg.cancel_scope.cancel()


def test_every_protocol_message_survives_the_wire() -> None:
    to_dir = [ReadMiss(X, "a", 3, True), WriteRequest(X, "a", "v", 4), InvAck(X, "a", 2),
              DowngradeAck(X, "a", 2, True), WriteBack(X, "a", 5, None)]
    to_cache = [Fill(X, 2, "v", LineState.E, 9), Fill(X, 2, None, LineState.S, 1),
                WriteAck(X, 3, 4), Invalidate(X, 7), Downgrade(X, 8)]
    for message in to_dir:
        wire = CoherenceMsg.model_validate_json(to_wire(message).to_json())
        assert for_directory(wire) == message
    for message in to_cache:
        assert for_cache(CoherenceMsg.model_validate_json(to_wire(message).to_json())) == message
    with pytest.raises(ValueError, match="not for a cache"):
        for_cache(to_wire(to_dir[0]))
    with pytest.raises(ValueError, match="sender"):
        for_directory(CoherenceMsg(kind="read_miss", iri=X))


async def test_a_write_is_seen_by_the_next_read_elsewhere_and_invalidates_copies() -> None:
    async with InProcessBus() as bus, system(bus) as (directory, (a, b)):
        assert await a.read(X) == Versioned(0, None)
        assert await b.read(X) == Versioned(0, None)
        told: list[str] = []
        a.listen(told.append)
        assert await b.write(X, "one") == 1
        assert told == [X], "a's copy was invalidated before b's write was acknowledged"
        assert a.peek(X) is None
        assert await a.read(X) == Versioned(1, "one")
        assert await a.read(X) == Versioned(1, "one")  # a hit
        assert a.stats.hits == 1 and a.stats.misses == 2
        assert directory.store.data[X] == (1, "one")  # type: ignore[attr-defined]


async def test_reads_hit_until_the_lease_runs_out() -> None:
    async with InProcessBus() as bus, system(bus) as (_, (a, _b)):
        await a.read(X)
        assert a.peek(X) is not None and a.holds([X])
        await anyio.sleep(LEASE)
        assert a.peek(X) is None
        await a.read(X)
        assert a.stats.misses == 2


async def test_a_silent_holder_is_dropped_at_its_lease_and_a_dead_one_at_once() -> None:
    clock = HandClock()
    async with InProcessBus() as bus:
        store = MemoryNodeStore()
        async with system(bus, store, "a", "b", clock=clock) as (directory, (a, b)):
            await bus.publish(topics.coherence_directory("j"),
                              to_wire(ReadMiss(X, "mute", 1)))  # holds X, never answers
            await bus.publish(topics.coherence_directory("j"),
                              to_wire(ReadMiss(Y, "dead", 1)))
            read: list[Versioned] = []
            async with anyio.create_task_group() as tg:
                # mute holds it E: the downgrade is never answered
                tg.start_soon(_read_into, read, b, X)
                while (entry := directory.entries.get(X)) is None or entry.pending is None:
                    await anyio.sleep(0.005)
                assert entry.deadline == LEASE  # asked at 0: mute is waited for one lease
                clock.now = LEASE - 0.01
                await clock.read_again()
                assert read == [] and directory.stats.dropped == 0, "dropped before its lease"
                clock.now = LEASE
            assert read == [Versioned(0, None)] and directory.stats.dropped == 1
            assert await a.write(X, "after-lease") == 1
            directory.depart("dead")
            # the clock stands still: dead's lease never runs out, only its departure frees Y
            assert await a.write(Y, "at-once") == 1
            assert directory.stats.dropped == 1 and directory.stats.departed == 1


async def test_a_restarted_directory_rebuilds_from_the_store_and_waits_out_old_leases() -> None:
    store = MemoryNodeStore()
    async with InProcessBus() as bus:
        async with system(bus, store, "a") as (_, (a,)):
            assert await a.write(X, "kept") == 1
        clock = HandClock()
        async with system(bus, store, "b", grace=LEASE, clock=clock) as (_, (b,)):
            read: list[Versioned] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read_into, read, b, X)
                clock.now = LEASE - 0.01
                await clock.read_again()
                assert read == [], "nothing served in the grace"
                clock.now = LEASE
            assert read == [Versioned(1, "kept")]
            assert await b.write(X, "next") == 2


async def _read_into(into: list[Versioned], cache: Cache, iri: str) -> None:
    into.append(await cache.read(iri))


async def test_no_directory_is_a_timeout_and_an_unanswered_write_says_its_outcome_is_unknown(
) -> None:
    async with InProcessBus() as bus, anyio.create_task_group() as tg:
        cache = Cache(bus, "nobody", "a", lease_s=LEASE, timeout_s=0.1, tries=2)
        await tg.start(cache.serve)
        with pytest.raises(CoherenceTimeout, match="after 2 tries"):
            await cache.read(X)
        with pytest.raises(CoherenceTimeout, match="may or may not"):
            await cache.write(X, "lost?")
        assert cache.stats.abandoned == 3 and cache.lines == {}
        tg.cancel_scope.cancel()


async def test_store_failures_delay_the_ack_but_never_skip_it() -> None:
    store = MemoryNodeStore(fail_saves=2, fail_loads=1)
    async with InProcessBus() as bus, system(bus, store, "a") as (directory, (a,)):
        assert await a.write(X, "durable") == 1
        assert store.data[X] == (1, "durable")
        assert directory.stats.store_failures == 3


async def test_capacity_evicts_the_least_recently_used_line() -> None:
    async with InProcessBus() as bus, system(bus, None, "a", capacity=2) as (_, (a,)):
        for iri in (X, Y, Z):
            await a.read(iri)
        assert list(a.lines) == [Y, Z] and a.stats.evicted == 1


async def test_concurrent_operations_on_one_line_take_turns() -> None:
    async with InProcessBus() as bus, system(bus, None, "a", "b") as (_, (a, b)):
        versions: list[int] = []

        async def write(cache: Cache, value: str) -> None:
            versions.append(await cache.write(X, value))

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(write, (a, b)[i % 2], f"w{i}")
        assert sorted(versions) == list(range(1, 11))
        final = await a.read(X)
        assert final.version == 10


@pytest.fixture(scope="module")
def broker() -> Iterator[Mosquitto]:
    with mosquitto() as server:
        yield server


@pytest.mark.heavy
async def test_the_same_over_mosquitto(broker: Mosquitto) -> None:
    async with MQTTBus(broker.url) as one, MQTTBus(broker.url) as two:
        async with anyio.create_task_group() as tg:
            store = MemoryNodeStore()
            directory = Directory(one, store, "j", lease_s=LEASE, grace_s=0)
            await tg.start(directory.serve)
            a = Cache(one, "j", "a", lease_s=LEASE)
            b = Cache(two, "j", "b", lease_s=LEASE)
            await tg.start(a.serve)
            await tg.start(b.serve)
            await a.read(X)
            assert await b.write(X, "over mqtt") == 1
            assert await a.read(X) == Versioned(1, "over mqtt")
            assert a.stats.invalidated == 1
            tg.cancel_scope.cancel()


async def test_a_repeated_request_is_served_once() -> None:
    async with InProcessBus() as bus, system(bus, None, "a") as (directory, (a,)):
        assert await a.write(X, "once") == 1
        rid = max(r for (iri, agent), r in directory._rids.items() if iri == X)
        await bus.publish(topics.coherence_directory("j"),
                          to_wire(WriteRequest(X, "a", "once", rid)))  # QoS 1 delivered it again
        assert await a.write(X, "twice") == 2, "the repeat made no version of its own"
        assert directory.stats.repeated == 1


async def test_a_request_that_cannot_be_sent_leaves_the_line_free() -> None:
    bus = InProcessBus()
    async with bus:
        cache = Cache(bus, "j", "a", lease_s=LEASE, timeout_s=0.2)
    with pytest.raises(BusError):
        await cache.read(X)
    assert cache.lines == {}


async def test_read_many_raises_the_first_error_itself_after_every_read_ran() -> None:
    async with InProcessBus() as bus, anyio.create_task_group() as tg:
        cache = Cache(bus, "nobody", "a", lease_s=LEASE, timeout_s=0.1, tries=1)
        await tg.start(cache.serve)
        with pytest.raises(CoherenceTimeout):  # not an ExceptionGroup
            await cache.read_many([X, Y, Z])
        assert cache.stats.abandoned == 3 and cache.lines == {}
        tg.cancel_scope.cancel()


async def test_a_cancelled_operation_leaves_its_line_free_for_the_next() -> None:
    async with InProcessBus() as bus, system(bus, None, "a") as (_, (a,)):
        a.timeout_s = 5.0
        other = Cache(bus, "nobody", "a2", lease_s=LEASE, timeout_s=5.0)
        with anyio.move_on_after(0.05):
            await other.read(X)  # nobody answers; cancelled while it waits
        assert other.lines == {}, "nothing waits on the line any more"
        async with anyio.create_task_group() as tg:
            await tg.start(other.serve)
            with pytest.raises(CoherenceTimeout):  # asks again at once, not after a Retry
                other.timeout_s, other.tries = 0.1, 1
                await other.read(X)
            tg.cancel_scope.cancel()
        assert await a.write(X, "after") == 1
