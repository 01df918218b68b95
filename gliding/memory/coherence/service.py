"""The coherence engine's async shell: the directory service and the per-agent caches, over the bus.

``protocol.py`` decides; this module only carries decisions out. ``Directory`` keeps one
``DirEntry`` per IRI of a *space* (a job's blackboard graph, or a benchmark's), applies
``directory_step`` to every message, sends what it says, and writes the store through a
``NodeStore``. ``Cache`` is one agent's (one process incarnation's) set of lines: ``read``,
``write`` and ``evict`` apply ``cache_step`` and wait for the directory's answer.

    cache ──CoherenceMsg on coherence/<space>/directory──► Directory ──► NodeStore (durable)
          ◄──CoherenceMsg on coherence/<space>/cache/<agent>──

When a write counts as acknowledged: when ``Cache.write`` returns its version. By then the
store confirmed that version (``NodeStore.save`` returned) and every other copy was invalidated
or its holder dropped at lease end, so killing any process afterwards, the writer's included,
loses nothing. A ``write`` that raises ``CoherenceTimeout`` has an unknown outcome: it may yet
take effect, once, or never.

The directory, message by message:

* One consumer applies every event in arrival order: bus messages, store confirmations, loads
  and clock ticks all go through one in-process stream, so per-IRI order is the bus's order. The
  subscription is drained into that stream without bound (the protocol bounds it: every cache
  has at most one request in flight per line), so a directory never blocks a cache that is
  blocked on it.
* An IRI's entry is loaded from the store on first use (``NodeStore.load``); its events wait
  meanwhile. Store calls run on worker threads, at most ``store_threads`` at once; one that
  fails is logged and tried again with backoff (a write is never acknowledged before it is
  durable, however long that takes).
* Recovery after a restart: for ``grace_s`` (default: one lease) after it starts, the directory
  answers nothing; requests are held, then served in order. Every line the previous directory
  granted was requested before it died, so its cache-side lease has run out by then, and entries
  rebuilt from the store cannot miss a sharer.
* ``depart(agent)`` (the ``depart`` message): an agent known to be dead is dropped from every
  entry at once (``Depart``), so writes need not wait for its lease.

The cache: one operation in flight per line (a per-line lock; others wait for it). Request
numbers come from one counter per cache, so an answer to an abandoned request can never be taken
for a later one even after its line was forgotten, and the directory drops a request whose
number it has seen from that agent for that IRI (a repeated delivery: MQTT QoS 1 is at least
once). A request unanswered after ``timeout_s`` is
abandoned; a read is then asked again (``tries`` in all), a write raises ``CoherenceTimeout``.
The cache trusts a line for ``lease_s - margin_s`` from its request (``margin_s`` covers clocks
that run at different rates). ``capacity`` bounds the lines holding a value; the least recently
used is evicted (a write-back notice for M/E). ``listen`` registers a callback told of every
line that was invalidated while valid (L3 views built from it are stale).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gliding.bus import topics
from gliding.bus.messages import CoherenceMsg
from gliding.bus.port import Bus
from gliding.bus.replies import Replies
from gliding.core.crashpoints import crash_point
from gliding.errors import BusError, GlidingError
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
    Retry,
    Send,
    SendTo,
    StoreWrite,
    StoreWritten,
    Tick,
    ToCache,
    ToDirectory,
    WriteAck,
    WriteBack,
    WriteDone,
    WriteRequest,
    cache_step,
    directory_step,
)

log = structlog.get_logger("gliding.memory")

DEFAULT_TIMEOUT_S = 3 * DEFAULT_LEASE_S  # a directory in its restart grace still answers in time
DEFAULT_MARGIN_S = 0.1
DEFAULT_CAPACITY = 4096
STORE_THREADS = 8
_ALL = "*"  # the ``iri`` of a depart message: every entry
T = TypeVar("T")


class DirectoryStep(Protocol):
    def __call__(self, entry: DirEntry, event: DirEvent, now: float, *,
                 lease: float) -> tuple[DirEntry, tuple[DirEffect, ...]]: ...


class CoherenceError(GlidingError):
    code = "coherence.error"


class CoherenceTimeout(CoherenceError):
    code = "coherence.timeout"


class BoardClosed(CoherenceError):
    """A write to a job's board that is closing: the job is ending (or crashed)."""

    code = "coherence.closed"


class NodeStore(Protocol):
    """Where the directory keeps what was written: versioned values by IRI. Blocking; called on
    worker threads, never for one IRI from two threads at once."""

    def load(self, iri: str) -> tuple[int, str | None]:
        """The durable version and value of ``iri``; ``(0, None)`` if it was never written.

        Raises:
            GlidingError: the store could not be read (the directory tries again).
        """
        ...

    def save(self, iri: str, version: int, value: str | None) -> None:
        """Make ``value`` durable as ``version`` of ``iri`` before returning.

        Raises:
            GlidingError: the store could not be written (the directory tries again).
        """
        ...


@dataclass(frozen=True)
class Versioned:
    """What a read returns: the value of a node at one version (0, None: never written)."""

    version: int
    value: str | None


# --- the wire form ------------------------------------------------------------------------------


def to_wire(message: ToDirectory | ToCache) -> CoherenceMsg:
    """The bus message carrying a protocol message."""
    match message:
        case ReadMiss(iri=iri, sender=sender, rid=rid, shared=shared):
            return CoherenceMsg(kind="read_miss", iri=iri, sender=sender, rid=rid, shared=shared)
        case WriteRequest(iri=iri, sender=sender, value=value, rid=rid):
            return CoherenceMsg(kind="write_request", iri=iri, sender=sender, value=value, rid=rid)
        case InvAck(iri=iri, sender=sender, seq=seq):
            return CoherenceMsg(kind="inv_ack", iri=iri, sender=sender, seq=seq)
        case DowngradeAck(iri=iri, sender=sender, seq=seq, kept=kept):
            return CoherenceMsg(kind="downgrade_ack", iri=iri, sender=sender, seq=seq, kept=kept)
        case WriteBack(iri=iri, sender=sender, version=version, value=value):
            return CoherenceMsg(kind="write_back", iri=iri, sender=sender, version=version,
                                value=value)
        case Fill(iri=iri, version=version, value=value, grant=grant, rid=rid):
            letter = "E" if grant is LineState.E else "S"
            return CoherenceMsg(kind="fill", iri=iri, version=version, value=value, grant=letter,
                                rid=rid)
        case WriteAck(iri=iri, version=version, rid=rid):
            return CoherenceMsg(kind="write_ack", iri=iri, version=version, rid=rid)
        case Invalidate(iri=iri, seq=seq):
            return CoherenceMsg(kind="invalidate", iri=iri, seq=seq)
        case Downgrade(iri=iri, seq=seq):
            return CoherenceMsg(kind="downgrade", iri=iri, seq=seq)
    raise TypeError(f"not a protocol message: {message!r}")


def for_directory(m: CoherenceMsg) -> ToDirectory | Depart:
    """The protocol message a directory received (``Depart`` with iri ``*``: every entry).

    Raises:
        ValueError: ``m`` is not a message for the directory, or has no sender.
    """
    if not m.sender:
        raise ValueError(f"a {m.kind} message without a sender")
    match m.kind:
        case "read_miss":
            return ReadMiss(m.iri, m.sender, m.rid, m.shared)
        case "write_request":
            return WriteRequest(m.iri, m.sender, m.value, m.rid)
        case "inv_ack":
            return InvAck(m.iri, m.sender, m.seq)
        case "downgrade_ack":
            return DowngradeAck(m.iri, m.sender, m.seq, m.kept)
        case "write_back":
            return WriteBack(m.iri, m.sender, m.version, m.value)
        case "depart":
            return Depart(m.iri, m.sender)
    raise ValueError(f"a {m.kind} message is not for the directory")


def for_cache(m: CoherenceMsg) -> ToCache:
    """The protocol message a cache received.

    Raises:
        ValueError: ``m`` is not a message for a cache (or a fill without its grant).
    """
    match m.kind:
        case "fill":
            if m.grant is None:
                raise ValueError("a fill without a grant")
            grant = LineState.E if m.grant == "E" else LineState.S
            return Fill(m.iri, m.version, m.value, grant, m.rid)
        case "write_ack":
            return WriteAck(m.iri, m.version, m.rid)
        case "invalidate":
            return Invalidate(m.iri, m.seq)
        case "downgrade":
            return Downgrade(m.iri, m.seq)
    raise ValueError(f"a {m.kind} message is not for a cache")


async def announce_departure(bus: Bus, space: str, agent: str) -> None:
    """Tell the directory of ``space`` that ``agent`` is gone for good (``Depart`` on every
    entry): only for an agent that will never serve a line again (dead, or done).

    Raises:
        BusError: the message could not be sent (the directory falls back on the lease).
    """
    await bus.publish(topics.coherence_directory(space),
                      CoherenceMsg(kind="depart", iri=_ALL, sender=agent))


# --- the directory ------------------------------------------------------------------------------


@dataclass
class DirectoryStats:
    received: int = 0
    sent: int = 0
    store_loads: int = 0
    store_saves: int = 0
    store_failures: int = 0
    dropped: int = 0
    departed: int = 0
    refused: int = 0
    repeated: int = 0


@dataclass(frozen=True)
class _Loaded:
    iri: str
    version: int
    value: str | None


@dataclass(frozen=True)
class _Clock:
    pass


_Item = DirEvent | _Loaded | _Clock


class Directory:
    """The directory of one space; ``serve`` runs it until cancelled."""

    def __init__(
        self, bus: Bus, store: NodeStore, space: str, *, lease_s: float = DEFAULT_LEASE_S,
        grace_s: float | None = None, tick_s: float | None = None,
        clock: Callable[[], float] = time.monotonic, store_threads: int = STORE_THREADS,
        step: DirectoryStep = directory_step,
    ) -> None:
        """``step`` is the transition function (``protocol.directory_step``; a test passes a
        deliberately broken one to show the checks catch it)."""
        self.bus, self.store, self.space = bus, store, space
        self.step = step
        self.lease_s = lease_s
        self.grace_s = lease_s if grace_s is None else grace_s
        self.tick_s = tick_s if tick_s is not None else max(0.01, lease_s / 10)
        self.clock = clock
        self.stats = DirectoryStats()
        self.entries: dict[str, DirEntry] = {}
        self._limiter = anyio.CapacityLimiter(store_threads)
        self._loading: dict[str, list[DirEvent]] = {}
        self._rids: dict[tuple[str, str], int] = {}  # (iri, agent) -> its last request number
        self._held: list[DirEvent] | None = []
        self._ready_at = math.inf
        self._send: MemoryObjectSendStream[_Item] | None = None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe, then answer until cancelled; ``task_status.started()`` once subscribed.

        Raises:
            BusError: the bus closed or could not subscribe.
        """
        send, receive = anyio.create_memory_object_stream[_Item](math.inf)
        self._send = send
        with send, receive:
            await self._serve(send, receive, task_status)

    async def _serve(self, send: MemoryObjectSendStream[_Item],
                     receive: MemoryObjectReceiveStream[_Item],
                     task_status: TaskStatus[None]) -> None:
        topic = topics.coherence_directory(self.space)
        async with self.bus.subscribe(topic, max_buffer=10_000) as sub, \
                anyio.create_task_group() as tg:
            self._ready_at = self.clock() + self.grace_s
            if self.grace_s <= 0:
                self._held = None
            tg.start_soon(self._tick)
            tg.start_soon(self._consume, receive, tg)
            log.debug("coherence.directory.started", space=self.space, lease_s=self.lease_s,
                     grace_s=self.grace_s)
            task_status.started()
            async for _, message in sub:
                if not isinstance(message, CoherenceMsg):
                    continue
                self.stats.received += 1
                try:
                    event = for_directory(message)
                except ValueError as exc:
                    self.stats.refused += 1
                    log.warning("coherence.message.refused", space=self.space, error=str(exc))
                    continue
                send.send_nowait(event)
            tg.cancel_scope.cancel()

    def depart(self, agent: str) -> None:
        """Drop ``agent`` (known dead) from every entry, as a ``depart`` message would."""
        if self._send is not None:
            self._send.send_nowait(Depart(_ALL, agent))

    async def _tick(self) -> None:
        assert self._send is not None
        while True:
            await anyio.sleep(self.tick_s)
            self._send.send_nowait(_Clock())

    async def _consume(self, receive: MemoryObjectReceiveStream[_Item], tg: TaskGroup) -> None:
        async for item in receive:
            match item:
                case _Clock():
                    await self._on_clock(tg)
                case _Loaded(iri=iri, version=version, value=value):
                    self.entries[iri] = DirEntry(iri, version=version, value=value)
                    for event in self._loading.pop(iri, []):
                        await self._step(event, tg)
                case StoreWritten():
                    await self._step(item, tg)
                case _ if self._held is not None:
                    self._held.append(item)
                case _:
                    await self._feed(item, tg)

    async def _on_clock(self, tg: TaskGroup) -> None:
        now = self.clock()
        if self._held is not None and now >= self._ready_at:
            held, self._held = self._held, None
            log.debug("coherence.directory.ready", space=self.space, held=len(held))
            for event in held:
                await self._feed(event, tg)
        for iri, entry in list(self.entries.items()):
            if entry.pending is not None and entry.deadline is not None and now >= entry.deadline:
                await self._step(Tick(iri), tg)

    async def _feed(self, event: DirEvent, tg: TaskGroup) -> None:
        if isinstance(event, Depart) and event.iri == _ALL:
            self.stats.departed += 1
            self._rids = {k: v for k, v in self._rids.items() if k[1] != event.agent}
            for iri in list(self.entries):
                await self._step(Depart(iri, event.agent), tg)
            for queued in self._loading.values():
                queued.append(Depart(queued[0].iri, event.agent))
            return
        iri = event.iri
        if isinstance(event, ReadMiss | WriteRequest):
            seen = self._rids.get((iri, event.sender), 0)
            if event.rid <= seen:  # a repeated delivery (MQTT is at least once): done already
                self.stats.repeated += 1
                return
            self._rids[(iri, event.sender)] = event.rid
        if iri in self.entries:
            await self._step(event, tg)
        elif iri in self._loading:
            self._loading[iri].append(event)
        else:
            self._loading[iri] = [event]
            tg.start_soon(self._load, iri)

    async def _step(self, event: DirEvent, tg: TaskGroup) -> None:
        entry, effects = self.step(self.entries[event.iri], event, self.clock(),
                                   lease=self.lease_s)
        self.entries[event.iri] = entry
        for effect in effects:
            match effect:
                case SendTo(to=to, message=message):
                    self.stats.sent += 1
                    if isinstance(message, WriteAck):
                        crash_point("coherence.ack")
                    try:
                        await self.bus.publish(topics.coherence_cache(self.space, to),
                                               to_wire(message))
                    except BusError as exc:  # the cache times out and asks again
                        log.warning("coherence.send.failed", space=self.space, to=to,
                                    error=exc.message)
                case StoreWrite():
                    tg.start_soon(self._save, effect)
                case Dropped(iri=iri, agent=agent):
                    self.stats.dropped += 1
                    log.info("coherence.holder.dropped", space=self.space, iri=iri, agent=agent)

    async def _load(self, iri: str) -> None:
        version, value = await self._retrying("load", iri, lambda: self.store.load(iri))
        self.stats.store_loads += 1
        assert self._send is not None
        self._send.send_nowait(_Loaded(iri, version, value))

    async def _save(self, write: StoreWrite) -> None:
        await self._retrying("save", write.iri,
                             lambda: self.store.save(write.iri, write.version, write.value))
        self.stats.store_saves += 1
        assert self._send is not None
        self._send.send_nowait(StoreWritten(write.iri, write.version))

    async def _retrying(self, what: str, iri: str, call: Callable[[], T]) -> T:
        delay = 0.05
        while True:
            try:
                async with self._limiter:
                    return await anyio.to_thread.run_sync(call)
            except GlidingError as exc:
                self.stats.store_failures += 1
                log.error(f"coherence.store.{what}_failed", space=self.space, iri=iri,
                          error=exc.message, retry_in_s=delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)


# --- the cache ----------------------------------------------------------------------------------


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    sent: int = 0
    received: int = 0
    invalidated: int = 0
    evicted: int = 0
    abandoned: int = 0


@dataclass
class Cache:
    """One agent incarnation's lines of one space; ``serve`` must run for answers to arrive."""

    bus: Bus
    space: str
    agent: str
    lease_s: float = DEFAULT_LEASE_S
    margin_s: float = DEFAULT_MARGIN_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    tries: int = 3
    capacity: int = DEFAULT_CAPACITY
    clock: Callable[[], float] = time.monotonic
    stats: CacheStats = field(default_factory=CacheStats)
    lines: OrderedDict[str, CacheLine] = field(default_factory=OrderedDict)
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    _replies: Replies[tuple[str, int], Versioned] = field(default_factory=Replies)
    _rids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _listeners: list[Callable[[str], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 0 <= self.margin_s < self.lease_s:
            raise ValueError("margin_s must be at least 0 and below lease_s")

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe to this agent's topic and apply what the directory sends, until cancelled.

        Raises:
            BusError: the bus closed or could not subscribe.
        """
        topic = topics.coherence_cache(self.space, self.agent)
        async with self.bus.subscribe(topic, max_buffer=1000) as sub:
            task_status.started()
            async for _, message in sub:
                if not isinstance(message, CoherenceMsg):
                    continue
                self.stats.received += 1
                try:
                    event = for_cache(message)
                except ValueError as exc:
                    log.warning("coherence.message.refused", agent=self.agent, error=str(exc))
                    continue
                await self._on_message(event)

    def listen(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(iri)`` whenever a valid line is invalidated; returns the remover."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def peek(self, iri: str) -> Versioned | None:
        """The line's value if it is valid now, without any message; None otherwise."""
        line = self.lines.get(iri)
        if line is None or line.waiting is not None:
            return None
        if line.state_at(self.clock()) is LineState.I:
            return None
        return Versioned(line.version, line.value)

    def holds(self, iris: Iterable[str]) -> bool:
        """Whether every line of ``iris`` is valid now (a view built from them is current)."""
        return all(self.peek(iri) is not None for iri in iris)

    async def read(self, iri: str, *, shared: bool = False) -> Versioned:
        """The node ``iri`` at a version no older than the last write acknowledged before this
        call; ``shared``: a prefetch, asking for S rather than E.

        Raises:
            CoherenceTimeout: the directory did not answer ``tries`` requests in time.
            BusError: the request could not be sent.
        """
        async with self._lock(iri):
            for _ in range(self.tries):
                answer = await self._op(LocalRead(iri, shared))
                if answer is not None:
                    return answer
        raise CoherenceTimeout(
            f"no answer from the coherence directory of {self.space!r} for {iri} after "
            f"{self.tries} tries of {self.timeout_s:g}s",
            hint="is the job's process (the directory) running and the bus connected?")

    async def read_many(self, iris: Iterable[str], *, shared: bool = False) -> dict[str, Versioned]:
        """``read`` of several IRIs at once (their misses travel together); every read runs to
        its end, then the first error, if any, is raised as ``read`` would.

        Raises:
            CoherenceTimeout, BusError: as ``read``.
        """
        out: dict[str, Versioned] = {}
        errors: list[GlidingError] = []

        async def one(iri: str) -> None:
            try:
                out[iri] = await self.read(iri, shared=shared)
            except GlidingError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for iri in dict.fromkeys(iris):
                tg.start_soon(one, iri)
        if errors:
            raise errors[0]
        return out

    async def write(self, iri: str, value: str | None) -> int:
        """Make ``value`` the next version of ``iri``; returns the version, once acknowledged
        (durable in the store, every other copy gone).

        Raises:
            CoherenceTimeout: no acknowledgement within ``timeout_s``; the write may or may not
                take effect.
            BusError: the request could not be sent (the write did not happen).
        """
        async with self._lock(iri):
            self.stats.writes += 1
            answer = await self._op(LocalWrite(iri, value))
        if answer is None:
            raise CoherenceTimeout(
                f"the write of {iri} was not acknowledged within {self.timeout_s:g}s: it may or "
                "may not have taken effect", hint="read the node again before relying on it")
        return answer.version

    async def leave(self) -> None:
        """This cache is done: the directory drops it from every entry at once, so writers of
        the lines it held need not wait out its lease. Use no operation of it afterwards.
        A message that cannot be sent is logged (the lease covers it)."""
        try:
            await announce_departure(self.bus, self.space, self.agent)
        except BusError as exc:
            log.warning("coherence.leave.failed", agent=self.agent, error=exc.message)
        self.lines.clear()

    async def evict(self, iri: str) -> None:
        """Drop the line (a write-back notice when it was M/E).

        Raises:
            BusError: the notice could not be sent (the directory will simply ask this cache
                for a line it no longer holds).
        """
        async with self._lock(iri):
            await self._apply(iri, Evict(iri))

    async def _op(self, event: LocalRead | LocalWrite) -> Versioned | None:
        """One local operation on a locked line: the answer, or None once abandoned."""
        iri = event.iri
        line = self.lines.get(iri) or CacheLine(iri)
        line = replace(line, rid=next(self._rids) - 1)  # a request it sends: a fresh number
        self.lines[iri] = line
        self.lines.move_to_end(iri)
        key = (iri, line.rid + 1)
        self._replies.expect(key)
        try:
            done = await self._apply(iri, event)
            if done is not None:
                self.stats.hits += 1
                return done
            self.stats.misses += isinstance(event, LocalRead)
            answer = await self._replies.wait(key, self.timeout_s)
        except BaseException:  # not sent, or cancelled: the line must not wait for an answer
            self._abandon(iri)
            raise
        finally:
            self._replies.forget(key)
        if answer is None:
            self.stats.abandoned += 1
            self._abandon(iri)
            log.warning("coherence.request.abandoned", agent=self.agent, iri=iri,
                        kind=type(event).__name__, timeout_s=self.timeout_s)
        return answer

    def _abandon(self, iri: str) -> None:
        """Stop waiting on the line (``Abandon`` has no effects: nothing to send or await)."""
        line = self.lines.get(iri)
        if line is None or line.waiting is None:
            return
        new, _ = cache_step(line, Abandon(iri), agent=self.agent, now=self.clock())
        self.lines.pop(iri, None)
        assert new.state is LineState.I and new.waiting is None

    async def _on_message(self, event: ToCache) -> None:
        iri = event.iri
        line = self.lines.get(iri)
        was_valid = line is not None and line.state_at(self.clock()) is not LineState.I
        rid = line.rid if line is not None else -1
        try:
            await self._apply(iri, event, rid=rid)
        except BusError as exc:  # an answer lost: the directory's lease covers it
            log.warning("coherence.send.failed", agent=self.agent, iri=iri, error=exc.message)
        if isinstance(event, Invalidate) and was_valid:
            self.stats.invalidated += 1
            for callback in list(self._listeners):
                callback(iri)
        if isinstance(event, Fill | WriteAck):
            try:
                await self._evict_over_capacity()
            except BusError as exc:  # a write-back notice is only a notice
                log.warning("coherence.send.failed", agent=self.agent, iri=iri,
                            error=exc.message)

    async def _apply(self, iri: str, event: CacheEvent, *, rid: int = -1) -> Versioned | None:
        line = self.lines.get(iri) or CacheLine(iri)
        new, effects = cache_step(line, event, agent=self.agent, now=self.clock(),
                                  lease=self.lease_s - self.margin_s)
        if new.state is LineState.I and new.waiting is None:
            self.lines.pop(iri, None)  # nothing to keep: request numbers are never reused
        else:
            self.lines[iri] = new
        return await self._carry_out(iri, effects, rid if rid >= 0 else new.rid)

    async def _carry_out(self, iri: str, effects: tuple[CacheEffect, ...],
                         rid: int) -> Versioned | None:
        result = None
        for effect in effects:
            match effect:
                case Send(message=message):
                    self.stats.sent += 1
                    await self.bus.publish(topics.coherence_directory(self.space),
                                           to_wire(message))
                case ReadDone(version=version, value=value):
                    result = Versioned(version, value)
                    self._replies.deliver((iri, rid), result)
                case WriteDone(version=version):
                    line = self.lines.get(iri)
                    result = Versioned(version, line.value if line else None)
                    self._replies.deliver((iri, rid), result)
                case Retry():  # the per-line lock makes this impossible
                    raise CoherenceError(f"{iri}: an operation was refused while another was "
                                         "in flight on its line", hint="a bug: please report it")
        return result

    async def _evict_over_capacity(self) -> None:
        """Evict least recently used lines (not in use) while more than ``capacity`` are kept."""
        excess = len(self.lines) - self.capacity
        if excess <= 0:
            return
        victims = []
        for iri, line in self.lines.items():
            lock = self._locks.get(iri)
            if line.waiting is None and (lock is None or not lock.locked()):
                victims.append(iri)
                if len(victims) == excess:
                    break
        for iri in victims:
            self.stats.evicted += 1
            await self._apply(iri, Evict(iri))

    def _lock(self, iri: str) -> _LineLock:
        return _LineLock(self, iri)


@dataclass
class _LineLock:
    """The per-line lock of a cache, dropped from its table when nobody holds or waits for it."""

    cache: Cache
    iri: str

    async def __aenter__(self) -> None:
        lock = self.cache._locks.setdefault(self.iri, anyio.Lock())
        await lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        lock = self.cache._locks[self.iri]
        lock.release()
        if not lock.locked() and lock.statistics().tasks_waiting == 0:
            self.cache._locks.pop(self.iri, None)
