"""One agent's coherence cache of one space: ``read``, ``write`` and ``evict`` apply ``cache_step``
and wait for the directory's answer (the overview is in ``service.py``).

One operation in flight per line (a per-line lock; others wait for it). Request numbers come
from one counter per cache, so an answer to an abandoned request can never be taken for a later
one even after its line was forgotten, and the directory drops a request whose number it has
seen from that agent for that IRI (a repeated delivery: MQTT QoS 1 is at least once). A request
unanswered after ``timeout_s`` is abandoned; a read is then asked again (``tries`` in all), a
write raises ``CoherenceTimeout``. The cache trusts a line for ``lease_s - margin_s`` from its
request (``margin_s`` covers clocks that run at different rates). ``capacity`` bounds the lines
holding a value; the least recently used is evicted (a write-back notice for M/E). ``listen``
registers a callback told of every line that was invalidated while valid (L3 views built from it
are stale).
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import anyio
import structlog
from anyio.abc import TaskStatus

from gliding.bus import topics
from gliding.bus.messages import CoherenceMsg
from gliding.bus.port import Bus
from gliding.bus.replies import Replies
from gliding.errors import BusError, GlidingError
from gliding.memory.coherence.protocol import (
    DEFAULT_LEASE_S,
    Abandon,
    CacheEffect,
    CacheEvent,
    CacheLine,
    Evict,
    Fill,
    Invalidate,
    LineState,
    LocalRead,
    LocalWrite,
    ReadDone,
    Retry,
    Send,
    ToCache,
    WriteAck,
    WriteDone,
    cache_step,
)
from gliding.memory.coherence.service import (
    CoherenceError,
    CoherenceTimeout,
    Versioned,
    announce_departure,
    for_cache,
    to_wire,
)

log = structlog.get_logger("gliding.memory")

DEFAULT_TIMEOUT_S = 3 * DEFAULT_LEASE_S  # a directory in its restart grace still answers in time
DEFAULT_MARGIN_S = 0.1
DEFAULT_CAPACITY = 4096


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

    async def write_many(self, items: Sequence[tuple[str, str]]) -> list[int]:
        """``write`` each ``(iri, value)`` in order, every one even after one fails; then the
        first failure is raised (a ``BoardWriter``'s batch: the directory orders each line's
        writes, so there is no transaction across lines to have).

        Raises:
            CoherenceTimeout, BusError: as ``write``.
        """
        versions: list[int] = []
        failure: GlidingError | None = None
        for iri, value in items:
            try:
                versions.append(await self.write(iri, value))
            except GlidingError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return versions

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
