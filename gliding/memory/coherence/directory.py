"""The coherence directory of one space: applies ``directory_step`` to every message, sends what
it says, and writes the store through a ``NodeStore`` (the overview is in ``service.py``).

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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gliding.bus import topics
from gliding.bus.messages import CoherenceMsg
from gliding.bus.port import Bus
from gliding.core.crashpoints import crash_point
from gliding.errors import BusError, GlidingError
from gliding.memory.coherence.protocol import (
    DEFAULT_LEASE_S,
    Depart,
    DirEffect,
    DirEntry,
    DirEvent,
    Dropped,
    ReadMiss,
    SendTo,
    StoreWrite,
    StoreWritten,
    Tick,
    WriteAck,
    WriteRequest,
    directory_step,
)
from gliding.memory.coherence.service import ALL, NodeStore, for_directory, to_wire

log = structlog.get_logger("gliding.memory")

STORE_THREADS = 8
T = TypeVar("T")


class DirectoryStep(Protocol):
    def __call__(self, entry: DirEntry, event: DirEvent, now: float, *,
                 lease: float) -> tuple[DirEntry, tuple[DirEffect, ...]]: ...


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
            self._send.send_nowait(Depart(ALL, agent))

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
        if isinstance(event, Depart) and event.iri == ALL:
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
