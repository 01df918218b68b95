"""The MESI transition table: one example per row, then a stateful simulation of a whole system.

The simulation wires one directory and 2-4 caches through a network this test controls (FIFO per
link, links delivered in any order), a store that confirms writes when the test says so, process
death and lease expiry, and checks single-writer/multiple-reader, read freshness, durability of
acknowledged writes and that everything settles. A directory that skips invalidations is caught.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from gliding.bench.coherence_procs import no_invalidate_step
from gliding.memory.coherence.protocol import (
    DEFAULT_LEASE_S,
    Abandon,
    CacheEffect,
    CacheEvent,
    CacheLine,
    Depart,
    DirEffect,
    DirEntry,
    DirEvent,
    Downgrade,
    DowngradeAck,
    Dropped,
    Evict,
    Fill,
    InvAck,
    Invalidate,
    LineState,
    LocalRead,
    LocalWrite,
    ReadDone,
    ReadMiss,
    ReadTxn,
    Retry,
    Send,
    SendTo,
    StoreWrite,
    StoreWritten,
    Tick,
    WriteAck,
    WriteBack,
    WriteDone,
    WriteRequest,
    WriteTxn,
    cache_step,
    directory_step,
)

IRI = "gliding://job/j/node/n"
M, E, S, I = LineState.M, LineState.E, LineState.S, LineState.I  # noqa: E741 - MESI letters


def line(state: LineState, version: int = 3, value: str | None = "v3", **kw: object) -> CacheLine:
    kw.setdefault("valid_until", 100.0)
    return CacheLine(IRI, state, version, value, **kw)  # type: ignore[arg-type]


def cstep(
    cached: CacheLine, event: CacheEvent, now: float = 0.0
) -> tuple[CacheLine, tuple[CacheEffect, ...]]:
    return cache_step(cached, event, agent="a", now=now, lease=5.0)


# --- cache side, one test per table row ---------------------------------------------------------


@pytest.mark.parametrize("state", [M, E, S])
def test_read_hit_returns_the_line(state: LineState) -> None:
    assert cstep(line(state), LocalRead(IRI)) == (
        line(state),
        (ReadDone(IRI, 3, "v3"),),
    )


def test_read_miss_asks_the_directory_and_waits() -> None:
    new, effects = cstep(line(I, 0, None), LocalRead(IRI), now=7.0)
    assert (new.waiting, new.requested_at, new.rid) == ("read", 7.0, 1)
    assert effects == (Send(ReadMiss(IRI, "a", rid=1)),)


@pytest.mark.parametrize("state", [M, E, S, I])
def test_every_write_goes_through_the_directory(state: LineState) -> None:
    new, effects = cstep(line(state), LocalWrite(IRI, "new"))
    assert (new.state, new.waiting, new.pending_value, new.rid) == (state, "write", "new", 1)
    assert effects == (Send(WriteRequest(IRI, "a", "new", rid=1)),)


@pytest.mark.parametrize("event", [LocalRead(IRI), LocalWrite(IRI, "x"), Evict(IRI)])
def test_local_operations_while_one_is_in_flight_are_refused(event: CacheEvent) -> None:
    busy = line(S, waiting="write", pending_value="p")
    assert cstep(busy, event) == (busy, (Retry(event),))  # type: ignore[arg-type]


@pytest.mark.parametrize("state", [M, E])
def test_evicting_an_owned_line_writes_back(state: LineState) -> None:
    new, effects = cstep(line(state), Evict(IRI))
    assert new.state is I
    assert effects == (Send(WriteBack(IRI, "a", 3, "v3")),)


@pytest.mark.parametrize("state", [S, I])
def test_evicting_a_shared_or_invalid_line_is_silent(state: LineState) -> None:
    new, effects = cstep(line(state), Evict(IRI))
    assert (new.state, effects) == (I, ())


@pytest.mark.parametrize("state", [M, E, S, I])
def test_invalidate_always_acks_and_keeps_the_waiting_operation(state: LineState) -> None:
    new, effects = cstep(line(state, waiting="read"), Invalidate(IRI, 7))
    assert (new.state, new.value, new.waiting) == (I, None, "read")
    assert effects == (Send(InvAck(IRI, "a", 7)),)


@pytest.mark.parametrize("state", [M, E, S])
def test_downgrade_of_a_held_line_keeps_it_shared(state: LineState) -> None:
    new, effects = cstep(line(state), Downgrade(IRI, 2))
    assert (new.state, new.version) == (S, 3)
    assert effects == (Send(DowngradeAck(IRI, "a", 2, kept=True)),)


def test_downgrade_of_an_invalid_line_says_not_kept() -> None:
    new, effects = cstep(line(I), Downgrade(IRI, 2))
    assert new.state is I
    assert effects == (Send(DowngradeAck(IRI, "a", 2, kept=False)),)


@pytest.mark.parametrize("grant", [S, E])
def test_fill_completes_a_read_miss(grant: LineState) -> None:
    new, effects = cstep(line(I, waiting="read", rid=2), Fill(IRI, 5, "v5", grant, rid=2))
    assert (new.state, new.version, new.value, new.waiting) == (grant, 5, "v5", None)
    assert effects == (ReadDone(IRI, 5, "v5"),)


def test_write_ack_makes_the_line_modified() -> None:
    waiting = line(S, waiting="write", pending_value="mine", requested_at=2.0, rid=3)
    new, effects = cstep(waiting, WriteAck(IRI, 4, rid=3), now=3.0)
    assert new == CacheLine(IRI, M, 4, "mine", valid_until=7.0, rid=3)
    assert effects == (WriteDone(IRI, 4),)


def test_a_fill_is_trusted_for_one_lease_from_the_request() -> None:
    asked, _ = cstep(line(I, 0, None), LocalRead(IRI), now=10.0)
    filled, _ = cstep(asked, Fill(IRI, 1, "v1", S, rid=1), now=12.0)
    assert filled.valid_until == 15.0
    assert cstep(filled, LocalRead(IRI), now=14.9)[1] == (ReadDone(IRI, 1, "v1"),)
    expired, effects = cstep(filled, LocalRead(IRI), now=15.0)
    assert (expired.state, expired.waiting) == (I, "read")
    assert effects == (Send(ReadMiss(IRI, "a", rid=2)),)


def test_an_expired_owner_answers_a_downgrade_as_invalid() -> None:
    new, effects = cstep(line(M, valid_until=1.0), Downgrade(IRI, 3), now=2.0)
    assert new.state is I
    assert effects == (Send(DowngradeAck(IRI, "a", 3, kept=False)),)


@pytest.mark.parametrize("event", [Fill(IRI, 9, "v9", S), WriteAck(IRI, 9)])
def test_unexpected_fill_or_ack_is_ignored(event: CacheEvent) -> None:
    assert cstep(line(S), event) == (line(S), ())


def test_a_prefetch_asks_for_a_shared_line() -> None:
    _, effects = cstep(line(I, 0, None), LocalRead(IRI, shared=True))
    assert effects == (Send(ReadMiss(IRI, "a", rid=1, shared=True)),)


@pytest.mark.parametrize(("waiting", "answer"), [("read", Fill(IRI, 9, "old", S, rid=1)),
                                                  ("write", WriteAck(IRI, 9, rid=1))])
def test_an_abandoned_request_never_takes_its_late_answer(
    waiting: str, answer: CacheEvent
) -> None:
    asked, _ = cstep(line(S), LocalRead(IRI) if waiting == "read" else LocalWrite(IRI, "w"))
    if waiting == "read":
        asked, _ = cstep(line(I, 0, None), LocalRead(IRI))
    given_up, effects = cstep(asked, Abandon(IRI))
    assert (given_up.state, given_up.waiting, effects) == (I, None, ())
    again, effects = cstep(given_up, LocalRead(IRI))
    assert effects == (Send(ReadMiss(IRI, "a", rid=2)),)
    assert cstep(again, answer) == (again, ()), "the answer to request 1 is not request 2's"
    done, effects = cstep(again, Fill(IRI, 10, "new", S, rid=2))
    assert (done.value, effects) == ("new", (ReadDone(IRI, 10, "new"),))


def test_abandon_without_an_operation_in_flight_changes_nothing() -> None:
    assert cstep(line(S), Abandon(IRI)) == (line(S), ())


# --- directory side -----------------------------------------------------------------------------


def step(
    entry: DirEntry, event: DirEvent, now: float = 0.0
) -> tuple[DirEntry, tuple[DirEffect, ...]]:
    return directory_step(entry, event, now, lease=5.0)


def test_read_miss_with_no_holder_grants_exclusive() -> None:
    entry, effects = step(DirEntry(IRI, version=2, value="v2"), ReadMiss(IRI, "a"))
    assert (entry.owner, entry.sharers, entry.pending) == ("a", frozenset(), None)
    assert effects == (SendTo("a", Fill(IRI, 2, "v2", E)),)


def test_a_shared_read_miss_is_granted_s_even_alone() -> None:
    entry, effects = step(DirEntry(IRI), ReadMiss(IRI, "a", rid=4, shared=True))
    assert (entry.owner, entry.sharers) == (None, frozenset({"a"}))
    assert effects == (SendTo("a", Fill(IRI, 0, None, S, rid=4)),)


def test_answers_echo_the_request_number() -> None:
    entry, _ = step(DirEntry(IRI, owner="b"), ReadMiss(IRI, "a", rid=7))
    _, effects = step(entry, DowngradeAck(IRI, "b", 1, kept=False))
    assert effects == (SendTo("a", Fill(IRI, 0, None, E, rid=7)),)
    entry, _ = step(DirEntry(IRI), WriteRequest(IRI, "a", "x", rid=8))
    _, effects = step(entry, StoreWritten(IRI, 1))
    assert effects == (SendTo("a", WriteAck(IRI, 1, rid=8)),)


def test_depart_drops_a_dead_agent_at_once() -> None:
    start = DirEntry(IRI, sharers=frozenset({"b", "c"}), queue=())
    entry, _ = step(start, WriteRequest(IRI, "a", "x"))
    entry, _ = step(entry, StoreWritten(IRI, 1))
    entry, _ = step(entry, ReadMiss(IRI, "b"))  # queued behind the write
    entry, effects = step(entry, Depart(IRI, "b"))
    assert effects == () and entry.queue == (), "b's queued read went with it"
    entry, effects = step(entry, InvAck(IRI, "c", 1))
    assert effects == (SendTo("a", WriteAck(IRI, 1)),)
    entry, effects = step(DirEntry(IRI, owner="d"), Depart(IRI, "d"))
    assert (entry.owner, effects) == (None, ())


def test_read_miss_with_sharers_grants_shared() -> None:
    entry, effects = step(DirEntry(IRI, sharers=frozenset({"b"})), ReadMiss(IRI, "a"))
    assert (entry.owner, entry.sharers) == (None, frozenset({"a", "b"}))
    assert effects == (SendTo("a", Fill(IRI, 0, None, S)),)


def test_read_miss_with_an_owner_downgrades_it_first() -> None:
    entry, effects = step(DirEntry(IRI, owner="b", version=1, value="v1"), ReadMiss(IRI, "a"), 10)
    assert entry.pending == ReadTxn("a", frozenset({"b"}))
    assert (entry.deadline, entry.seq) == (15.0, 1)
    assert effects == (SendTo("b", Downgrade(IRI, 1)),)
    entry, effects = step(entry, DowngradeAck(IRI, "b", 1, kept=True), 11)
    assert (entry.owner, entry.sharers, entry.pending) == (None, frozenset({"a", "b"}), None)
    assert effects == (SendTo("a", Fill(IRI, 1, "v1", S)),)


def test_downgrade_ack_not_kept_lets_the_reader_be_exclusive() -> None:
    entry, _ = step(DirEntry(IRI, owner="b"), ReadMiss(IRI, "a"))
    entry, effects = step(entry, DowngradeAck(IRI, "b", 1, kept=False))
    assert (entry.owner, entry.sharers) == ("a", frozenset())
    assert effects == (SendTo("a", Fill(IRI, 0, None, E)),)


def test_write_waits_for_the_store_and_every_invalidation() -> None:
    start = DirEntry(IRI, sharers=frozenset({"a", "b", "c"}), version=4, value="v4")
    entry, effects = step(start, WriteRequest(IRI, "a", "new"), 1)
    assert effects == (
        StoreWrite(IRI, 5, "new"),
        SendTo("b", Invalidate(IRI, 1)),
        SendTo("c", Invalidate(IRI, 1)),
    )
    assert entry.pending == WriteTxn("a", 5, "new", frozenset({"b", "c"}))
    entry, effects = step(entry, InvAck(IRI, "b", 1))
    entry, effects2 = step(entry, StoreWritten(IRI, 5))
    assert effects + effects2 == ()
    assert entry.version == 4, "nothing is acknowledged before the last InvAck"
    entry, effects = step(entry, InvAck(IRI, "c", 1))
    assert effects == (SendTo("a", WriteAck(IRI, 5)),)
    assert (entry.owner, entry.sharers, entry.version, entry.value) == ("a", frozenset(), 5, "new")
    assert entry.pending is None


def test_write_by_the_only_holder_needs_only_the_store() -> None:
    entry, effects = step(DirEntry(IRI, owner="a"), WriteRequest(IRI, "a", "x"))
    assert effects == (StoreWrite(IRI, 1, "x"),)
    entry, effects = step(entry, StoreWritten(IRI, 1))
    assert effects == (SendTo("a", WriteAck(IRI, 1)),)


def test_requests_behind_a_transaction_queue_in_order() -> None:
    entry, _ = step(DirEntry(IRI, owner="b"), WriteRequest(IRI, "a", "x"))
    entry, effects = step(entry, ReadMiss(IRI, "c"))
    entry, effects2 = step(entry, WriteRequest(IRI, "c", "y"))
    assert effects + effects2 == ()
    assert entry.queue == (ReadMiss(IRI, "c"), WriteRequest(IRI, "c", "y"))
    entry, _ = step(entry, InvAck(IRI, "b", 1))
    entry, effects = step(entry, StoreWritten(IRI, 1))
    # a's write acks, c's read is downgrading a, c's write still waits.
    assert effects == (SendTo("a", WriteAck(IRI, 1)), SendTo("a", Downgrade(IRI, 2)))
    assert entry.queue == (WriteRequest(IRI, "c", "y"),)


def test_stale_answers_are_ignored() -> None:
    entry, _ = step(DirEntry(IRI, sharers=frozenset({"b"}), seq=3), WriteRequest(IRI, "a", "x"))
    before = entry
    entry, effects = step(entry, InvAck(IRI, "b", 3))  # answers an older transaction
    entry, effects2 = step(entry, StoreWritten(IRI, 99))
    entry, effects3 = step(entry, DowngradeAck(IRI, "b", 4, kept=True))
    assert (entry, effects + effects2 + effects3) == (before, ())


def test_tick_past_the_lease_drops_the_silent_holder() -> None:
    entry, _ = step(DirEntry(IRI, sharers=frozenset({"b"})), WriteRequest(IRI, "a", "x"), 0)
    entry, _ = step(entry, StoreWritten(IRI, 1), 1)
    entry, effects = step(entry, Tick(IRI), 4.9)
    assert effects == () and entry.pending is not None
    entry, effects = step(entry, Tick(IRI), 5.0)
    assert effects == (Dropped(IRI, "b"), SendTo("a", WriteAck(IRI, 1)))
    assert (entry.owner, entry.sharers) == ("a", frozenset())


def test_tick_drops_a_dead_owner_and_serves_the_read() -> None:
    entry, _ = step(DirEntry(IRI, owner="b", version=2, value="v2"), ReadMiss(IRI, "a"), 0)
    entry, effects = step(entry, Tick(IRI), 6)
    assert effects == (Dropped(IRI, "b"), SendTo("a", Fill(IRI, 2, "v2", E)))


def test_lease_does_not_ack_a_write_the_store_has_not_confirmed() -> None:
    entry, _ = step(DirEntry(IRI, sharers=frozenset({"b"})), WriteRequest(IRI, "a", "x"), 0)
    entry, effects = step(entry, Tick(IRI), 60)
    assert effects == (Dropped(IRI, "b"),)
    assert isinstance(entry.pending, WriteTxn)
    entry, effects = step(entry, StoreWritten(IRI, 1), 61)
    assert effects == (SendTo("a", WriteAck(IRI, 1)),)


def test_write_back_clears_the_owner_at_once() -> None:
    entry, effects = step(DirEntry(IRI, owner="a", version=1), WriteBack(IRI, "a", 1, "v1"))
    assert (entry.owner, effects) == (None, ())
    busy, _ = step(DirEntry(IRI, owner="a", sharers=frozenset()), ReadMiss(IRI, "b"))
    entry, effects = step(busy, WriteBack(IRI, "a", 0, None))
    assert entry.owner is None and isinstance(entry.pending, ReadTxn) and effects == ()


# --- the whole system, simulated ----------------------------------------------------------------

DIR = "dir"
SUP = "supervisor"  # announces deaths it saw (Depart), like a parent that reaped a child
IRIS = ("gliding://n/x", "gliding://n/y")
Directory = Callable[[DirEntry, DirEvent, float], tuple[DirEntry, tuple[DirEffect, ...]]]


def correct_directory(
    entry: DirEntry, event: DirEvent, now: float
) -> tuple[DirEntry, tuple[DirEffect, ...]]:
    return directory_step(entry, event, now)


def ack_before_store_directory(
    entry: DirEntry, event: DirEvent, now: float
) -> tuple[DirEntry, tuple[DirEffect, ...]]:
    """A broken directory: it takes every StoreWrite as confirmed the moment it asks for it."""
    if isinstance(event, StoreWritten):
        return entry, ()
    entry, effects = directory_step(entry, event, now)
    for effect in effects:
        if isinstance(effect, StoreWrite):
            entry, more = directory_step(entry, StoreWritten(entry.iri, effect.version), now)
            effects += more
    return entry, effects


class CoherenceSystem(RuleBasedStateMachine):
    """One directory, N caches, a store, a network; the test is the scheduler of all of it."""

    directory: Directory = staticmethod(correct_directory)

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.agents: list[str] = []
        self.alive: set[str] = set()
        self.caches: dict[str, dict[str, CacheLine]] = {}
        self.entries = {iri: DirEntry(iri) for iri in IRIS}
        self.links: dict[tuple[str, str], deque[object]] = {}
        self.store: dict[str, int] = dict.fromkeys(IRIS, 0)
        self.history: dict[tuple[str, int], str | None] = {(iri, 0): None for iri in IRIS}
        self.store_queue: deque[StoreWrite] = deque()
        self.acked: dict[str, int] = dict.fromkeys(IRIS, 0)
        self.read_floor: dict[tuple[str, str], int] = {}
        self.writes = 0

    @initialize(n=st.integers(2, 4))
    def start(self, n: int) -> None:
        self.agents = [f"a{i}" for i in range(n)]
        self.alive = set(self.agents)
        self.caches = {a: {iri: CacheLine(iri) for iri in IRIS} for a in self.agents}
        for a in self.agents:
            self.links[(a, DIR)] = deque()
            self.links[(DIR, a)] = deque()
        self.links[(SUP, DIR)] = deque()

    # plumbing

    def _cache(self, agent: str, event: CacheEvent) -> None:
        iri = event.iri
        new, effects = cache_step(self.caches[agent][iri], event, agent=agent, now=self.now)
        self.caches[agent][iri] = new
        for effect in effects:
            match effect:
                case Send(message=message):
                    self.links[(agent, DIR)].append(message)
                case ReadDone(version=version, value=value):
                    floor = self.read_floor.pop((agent, iri))
                    assert version >= floor, f"{agent} read v{version} of {iri}, v{floor} acked"
                    assert value == self.history[(iri, version)]
                case WriteDone() | Retry():
                    pass

    def _directory(self, event: DirEvent) -> None:
        iri = event.iri
        new, effects = type(self).directory(self.entries[iri], event, self.now)
        self.entries[iri] = new
        for effect in effects:
            match effect:
                case SendTo(to=to, message=message):
                    if isinstance(message, WriteAck):
                        self.acked[iri] = max(self.acked[iri], message.version)
                    self.links[(DIR, to)].append(message)
                case StoreWrite():
                    self.history[(iri, effect.version)] = effect.value
                    self.store_queue.append(effect)
                case Dropped():
                    pass  # no fence: the cache-side lease has already run out

    def _deliver(self, link: tuple[str, str]) -> None:
        src, dst = link
        message = self.links[link].popleft()
        if dst == DIR:
            self._directory(message)  # type: ignore[arg-type]
        elif dst in self.alive:
            self._cache(dst, message)  # type: ignore[arg-type]

    def _busy_links(self) -> list[tuple[str, str]]:
        return sorted(link for link, queue in self.links.items() if queue)

    # client operations

    def _client(self, i: int, iri_i: int) -> tuple[str, str] | None:
        live = sorted(self.alive)
        if not live:
            return None
        return live[i % len(live)], IRIS[iri_i]

    @rule(i=st.integers(0, 3), iri_i=st.integers(0, 1))
    def read(self, i: int, iri_i: int) -> None:
        target = self._client(i, iri_i)
        if target is None or self.caches[target[0]][target[1]].waiting is not None:
            return
        agent, iri = target
        self.read_floor[(agent, iri)] = self.acked[iri]
        self._cache(agent, LocalRead(iri))

    @rule(i=st.integers(0, 3), iri_i=st.integers(0, 1))
    def write(self, i: int, iri_i: int) -> None:
        target = self._client(i, iri_i)
        if target is None:
            return
        self.writes += 1
        self._cache(target[0], LocalWrite(target[1], f"{target[0]}-{self.writes}"))

    @rule(i=st.integers(0, 3), iri_i=st.integers(0, 1))
    def evict(self, i: int, iri_i: int) -> None:
        target = self._client(i, iri_i)
        if target is not None:
            self._cache(target[0], Evict(target[1]))

    # the environment

    @precondition(lambda self: any(self.links.values()))
    @rule(pick=st.integers(0, 15))
    def deliver(self, pick: int) -> None:
        busy = self._busy_links()
        self._deliver(busy[pick % len(busy)])

    @precondition(lambda self: bool(self.store_queue))
    @rule()
    def store_confirms(self) -> None:
        write = self.store_queue.popleft()
        assert write.version > self.store[write.iri]
        self.store[write.iri] = write.version
        self._directory(StoreWritten(write.iri, write.version))

    @rule(i=st.integers(0, 3), iri_i=st.integers(0, 1))
    def abandon(self, i: int, iri_i: int) -> None:
        """The shell's timeout fires (at any moment: the model does not know its length)."""
        target = self._client(i, iri_i)
        if target is not None:
            self._cache(target[0], Abandon(target[1]))

    @precondition(lambda self: len(self.alive) > 1)
    @rule(i=st.integers(0, 3), announce=st.booleans())
    def kill(self, i: int, announce: bool) -> None:
        dead = sorted(self.alive)[i % len(self.alive)]
        self.alive.discard(dead)
        if announce:
            self.links[(SUP, DIR)].extend(Depart(iri, dead) for iri in IRIS)

    @rule(dt=st.sampled_from([0.5, 2.0, DEFAULT_LEASE_S + 0.1]))
    def tick(self, dt: float) -> None:
        self.now += dt
        for iri in IRIS:
            self._directory(Tick(iri))

    @rule()
    def settle(self) -> None:
        """Deliver everything, confirm the store, tick past the lease: nothing may stay pending."""
        for _ in range(200):
            if self._busy_links():
                self._deliver(self._busy_links()[0])
            elif self.store_queue:
                self.store_confirms()
            elif any(e.pending is not None for e in self.entries.values()):
                self.tick(DEFAULT_LEASE_S + 0.1)
            else:
                break
        for entry in self.entries.values():
            assert entry.pending is None and entry.queue == (), entry
        for agent in self.alive:
            for cached in self.caches[agent].values():
                assert cached.waiting is None, (agent, cached)

    # invariants

    @invariant()
    def single_writer_multiple_readers(self) -> None:
        for iri in IRIS:
            states = [self.caches[a][iri].state_at(self.now) for a in self.alive]
            owners = sum(s in (M, E) for s in states)
            assert owners <= 1, (iri, states)
            assert not (owners and S in states), (iri, states)

    @invariant()
    def acked_writes_are_durable(self) -> None:
        for iri in IRIS:
            assert self.store[iri] >= self.acked[iri], (
                f"{iri}: acked v{self.acked[iri]} not in store"
            )

    @invariant()
    def valid_lines_hold_what_the_store_wrote(self) -> None:
        for agent in self.alive:
            for iri, cached in self.caches[agent].items():
                if cached.state_at(self.now) is not I:
                    assert cached.value == self.history[(iri, cached.version)]


TestCoherenceSystem = CoherenceSystem.TestCase
TestCoherenceSystem.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None, database=None
)


class BrokenCoherenceSystem(CoherenceSystem):
    directory: Directory = staticmethod(no_invalidate_step)  # the benchmark's broken one


class EarlyAckCoherenceSystem(CoherenceSystem):
    directory: Directory = staticmethod(ack_before_store_directory)


@pytest.mark.parametrize(
    ("machine", "symptom"),
    [
        (BrokenCoherenceSystem, "acked|invalid|exclusive|modified"),
        (EarlyAckCoherenceSystem, "store"),
    ],
)
def test_the_invariants_catch_a_broken_directory(
    machine: type[CoherenceSystem], symptom: str
) -> None:
    with pytest.raises(AssertionError, match=symptom):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=500,
                stateful_step_count=60,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            ),
        )


def test_skipped_invalidation_leaves_a_stale_reader_in_a_fixed_scenario() -> None:
    """a0 and a1 share x; a0 writes; without Invalidate a1 still reads the old version."""
    machine = BrokenCoherenceSystem()
    machine.start(2)
    x = IRIS[0]
    for agent in ("a0", "a1"):
        machine.read(int(agent[1]), 0)
        machine.settle()
    assert {machine.caches[a][x].state for a in ("a0", "a1")} == {S}
    machine.write(0, 0)
    machine.settle()
    assert machine.acked[x] == 1
    with pytest.raises(AssertionError, match="v1 acked"):
        machine.read(1, 0)  # a1 still holds version 0 in S
    with pytest.raises(AssertionError):
        machine.single_writer_multiple_readers()  # a0 holds M beside a1's S


def test_the_same_scenario_is_coherent_with_the_real_directory() -> None:
    machine = CoherenceSystem()
    machine.start(2)
    for i in (0, 1):
        machine.read(i, 0)
        machine.settle()
    machine.write(0, 0)
    machine.settle()
    machine.single_writer_multiple_readers()
    machine.read(1, 0)
    machine.settle()
    assert machine.caches["a1"][IRIS[0]].version == 1
