"""The MESI protocol as two pure transition functions: one per cache line, one per directory entry.

This module owns the rules of coherence for blackboard nodes (keyed by IRI) and nothing else: no
I/O, no clock reads (``now`` is passed in), no bus. ``cache_step(line, event, agent=, now=)`` and
``directory_step(entry, event, now)`` return the new value and the effects a thin async shell
must carry out (send a message, write the store, hand a read result to the agent).

Design (the ack rule). Writes are *write-through and serialised by the directory*: every local
write goes to the directory, which gives it the next version of the IRI, asks the store to persist
it (``StoreWrite``) and invalidates every other holder. The writer gets ``WriteAck`` only once the
store confirmed the version (``StoreWritten``) *and* every other holder acknowledged the
invalidation or was dropped at lease expiry. So an acknowledged write is always in the store: a
Modified line holds data that is already durable, and killing the process that holds it loses
nothing acknowledged. M differs from E only in "this agent wrote the version it holds"; neither
ever writes silently. Guarantee: a cache never returns a value whose version is below the highest
version acknowledged before the read was issued.

Leases, so a silent agent cannot block writers or serve stale data. The directory waits at most
``lease`` for an answer to Invalidate/Downgrade, then drops the holder (effect ``Dropped``). The
cache side trusts a granted line only until ``requested_at + lease``, ``requested_at`` being when
it sent the request (the ``now`` it was given); after that the line counts as I and a read misses
again, which renews it. The grant came after the request and any transaction that could drop the
holder started after the grant, so the cache stops trusting the line before the directory can
drop it: a dropped agent, even one alive but slow, never serves a stale line (clocks are assumed
to agree within a margin the caller subtracts from the cache's lease).

Other assumptions the shell must keep: links are FIFO per (sender, receiver) pair and reliable.
Invalidate and Downgrade carry the entry's transaction number ``seq`` and the answers echo it, so
a late answer to an older transaction is never counted for a newer one. A cache line has at most
one local operation in flight; another one meanwhile comes back as ``Retry``. Each request of a
line carries the line's next request number ``rid`` and Fill / WriteAck echo it, so a shell that
gave up waiting (``Abandon``: the directory restarted, a message was lost) never takes a late
answer for the request that followed. An abandoned write's outcome is unknown to the agent (it
may yet become durable); an abandoned line is I.

Agents are addressed per process incarnation (a restarted process is a new agent with empty
lines), so nothing meant for a dead process reaches its successor. ``Depart(agent)`` drops an
agent known to be dead at once, instead of at its lease's end.

Cache line (``waiting`` = the local operation in flight, if any; a line whose lease ran out is
first treated as I)::

    state    event                  -> state  effects
    M/E/S    LocalRead              -> same   ReadDone(version, value)
    I        LocalRead(shared)      -> I      Send(ReadMiss(rid+1, shared)); waiting=read,
                                              requested_at=now
    any      LocalWrite(v)          -> same   Send(WriteRequest(v, rid+1)); waiting=write,
                                              requested_at=now
    any      Abandon while waiting  -> I      - (waiting cleared; a later answer is ignored)
    any      LocalRead/Write/Evict while waiting -> same  Retry
    M/E      Evict                  -> I      Send(WriteBack(version, value))   (a notice only)
    S/I      Evict                  -> I      -
    any      Invalidate(seq)        -> I      Send(InvAck(seq))                 (waiting kept)
    M/E/S    Downgrade(seq)         -> S      Send(DowngradeAck(seq, kept=True))
    I        Downgrade(seq)         -> I      Send(DowngradeAck(seq, kept=False))
    any      Fill(ver, val, g, rid) when waiting=read  -> g (S/E)  ReadDone(ver, val);
                                                                   valid_until=requested_at+lease
    any      WriteAck(ver, rid) when waiting=write     -> M        WriteDone(ver); valid_until
    any      Fill / WriteAck otherwise (or another rid) -> same    - (stale, ignored)

Directory entry (``pending`` = the one transaction in flight; ``queue`` = requests behind it)::

    pending  event                    -> effects / next
    busy     ReadMiss / WriteRequest  -> appended to queue (FIFO)
    none     ReadMiss(x), no owner    -> Fill(x, E) if no other sharer and not ``shared`` (owner=x)
                                         else Fill(x, S) (x joins sharers); the rid is echoed
    none     ReadMiss(x), owner y!=x  -> Downgrade(y, seq); pending=Read(x, {y}), deadline=now+lease
    Read     DowngradeAck(y, seq)     -> y kept: y becomes a sharer; owner cleared; then as ReadMiss
    none     WriteRequest(x, v)       -> StoreWrite(version+1, v); Invalidate(seq) to every other
                                         holder; pending=Write(x, version+1, {holders}), deadline
    Write    InvAck(y, seq)           -> y leaves the waiting set
    Write    StoreWritten(ver)        -> stored
    Write    stored and none waiting  -> version=ver, owner=x, sharers={}, WriteAck(x, ver);
                                         next queued request starts
    busy     Tick(now >= deadline)    -> every holder still waiting is dropped (Dropped(y)); a
                                         Write still waits for the store (durability has no lease)
    any      WriteBack(y)             -> y stops being owner (applied at once, never queued)
    any      Depart(y)                -> y leaves owner, sharers and the waiting set; y's queued
                                         requests are dropped
    any      answer with a stale seq, StoreWritten of another version -> ignored

Not here: store failures (a write whose store never confirms stays pending and unacknowledged),
rebuilding entries after a directory restart (from the store, ``directory.py``), and the async
service.

The module is past 600 lines on purpose: it is the protocol's specification, the two tables above
and the transition functions that implement them, read and property-tested together
(``tests/memory/test_coherence_protocol.py``). Split, a table row and its code would drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

__all__ = [
    "DEFAULT_LEASE_S",
    "Abandon",
    "CacheEffect",
    "CacheEvent",
    "CacheLine",
    "DirEffect",
    "DirEntry",
    "DirEvent",
    "Depart",
    "Downgrade",
    "DowngradeAck",
    "Dropped",
    "Evict",
    "Fill",
    "InvAck",
    "Invalidate",
    "LineState",
    "LocalRead",
    "LocalWrite",
    "ReadDone",
    "ReadMiss",
    "ReadTxn",
    "Retry",
    "Send",
    "SendTo",
    "StoreWrite",
    "StoreWritten",
    "Tick",
    "WriteAck",
    "WriteBack",
    "WriteDone",
    "WriteRequest",
    "WriteTxn",
    "cache_step",
    "directory_step",
]

DEFAULT_LEASE_S = 5.0
"""How long the directory waits for an invalidation or downgrade answer before dropping a holder."""

Value = str | None


class LineState(Enum):
    """MESI state of one cache line."""

    M = "modified"
    E = "exclusive"
    S = "shared"
    I = "invalid"  # noqa: E741 - the protocol's own letter


# --- messages: cache -> directory --------------------------------------------------------------


@dataclass(frozen=True)
class ReadMiss:
    """``sender`` has no valid copy of ``iri`` and wants one (request ``rid`` of its line);
    ``shared``: grant S even when nobody else holds it (a prefetch, not a use)."""

    iri: str
    sender: str
    rid: int = 0
    shared: bool = False


@dataclass(frozen=True)
class WriteRequest:
    """``sender`` wants ``value`` to become the next version of ``iri`` (upgrade or write miss),
    as request ``rid`` of its line."""

    iri: str
    sender: str
    value: Value
    rid: int = 0


@dataclass(frozen=True)
class InvAck:
    """``sender`` has invalidated its copy, answering the Invalidate of transaction ``seq``."""

    iri: str
    sender: str
    seq: int


@dataclass(frozen=True)
class DowngradeAck:
    """``sender`` answers Downgrade ``seq``; ``kept``: it still holds the line, now Shared."""

    iri: str
    sender: str
    seq: int
    kept: bool


@dataclass(frozen=True)
class WriteBack:
    """``sender`` evicted its M/E line: a notice only, write-through made the data durable."""

    iri: str
    sender: str
    version: int
    value: Value


# --- messages: directory -> cache --------------------------------------------------------------


@dataclass(frozen=True)
class Fill:
    """The data of ``iri`` at ``version``, granted in state ``grant`` (S or E), answering the
    read miss ``rid``."""

    iri: str
    version: int
    value: Value
    grant: LineState
    rid: int = 0


@dataclass(frozen=True)
class WriteAck:
    """The cache's write ``rid`` is durable as ``version`` and every other copy is gone: it now
    holds M."""

    iri: str
    version: int
    rid: int = 0


@dataclass(frozen=True)
class Invalidate:
    """Drop your copy of ``iri`` and answer InvAck(seq)."""

    iri: str
    seq: int


@dataclass(frozen=True)
class Downgrade:
    """A remote read: go from M/E to S and answer DowngradeAck(seq)."""

    iri: str
    seq: int


# --- local events and other inputs ------------------------------------------------------------


@dataclass(frozen=True)
class LocalRead:
    """The agent reads ``iri``; ``shared``: a prefetch that asks for S, never E."""

    iri: str
    shared: bool = False


@dataclass(frozen=True)
class LocalWrite:
    """The agent writes ``value`` to ``iri``."""

    iri: str
    value: Value


@dataclass(frozen=True)
class Evict:
    """The cache drops its line for ``iri`` (capacity, or the agent is done with it)."""

    iri: str


@dataclass(frozen=True)
class Abandon:
    """The shell gave up waiting for the answer to the line's operation in flight (timeout)."""

    iri: str


@dataclass(frozen=True)
class Depart:
    """``agent`` is known to be dead (its process exited): drop it without waiting for a lease.

    Only for an agent that can no longer serve a line; a silent one that may be alive is left to
    the lease.
    """

    iri: str
    agent: str


@dataclass(frozen=True)
class StoreWritten:
    """The store confirmed that ``version`` of ``iri`` is durable."""

    iri: str
    version: int


@dataclass(frozen=True)
class Tick:
    """Time passed; the ``now`` given to ``directory_step`` is what counts."""

    iri: str


CacheEvent = LocalRead | LocalWrite | Evict | Abandon | Fill | WriteAck | Invalidate | Downgrade
DirEvent = (
    ReadMiss | WriteRequest | InvAck | DowngradeAck | WriteBack | StoreWritten | Tick | Depart
)
ToDirectory = ReadMiss | WriteRequest | InvAck | DowngradeAck | WriteBack
ToCache = Fill | WriteAck | Invalidate | Downgrade


# --- effects ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    """Cache effect: send ``message`` to the directory."""

    message: ToDirectory


@dataclass(frozen=True)
class ReadDone:
    """Cache effect: the agent's read of ``iri`` returns ``value`` at ``version``."""

    iri: str
    version: int
    value: Value


@dataclass(frozen=True)
class WriteDone:
    """Cache effect: the agent's write of ``iri`` is acknowledged as ``version`` (durable)."""

    iri: str
    version: int


@dataclass(frozen=True)
class Retry:
    """Cache effect: ``event`` was refused (an operation is in flight on the line); try later."""

    event: LocalRead | LocalWrite | Evict


@dataclass(frozen=True)
class SendTo:
    """Directory effect: send ``message`` to the cache of agent ``to``."""

    to: str
    message: ToCache


@dataclass(frozen=True)
class StoreWrite:
    """Directory effect: persist ``value`` as ``version`` of ``iri``; answer with StoreWritten."""

    iri: str
    version: int
    value: Value


@dataclass(frozen=True)
class Dropped:
    """Directory effect: ``agent`` missed its lease on ``iri``; it must no longer serve the line."""

    iri: str
    agent: str


CacheEffect = Send | ReadDone | WriteDone | Retry
DirEffect = SendTo | StoreWrite | Dropped


# --- cache side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheLine:
    """One agent's copy of one node.

    ``waiting``: the local operation in flight, if any, sent at ``requested_at`` as request
    ``rid`` (numbered per line; answers to any other request are ignored). A valid line
    (not I) is only trusted before ``valid_until`` (its cache-side lease; see the module docstring);
    ``state_at(now)`` is the state that counts.
    """

    iri: str
    state: LineState = LineState.I
    version: int = 0
    value: Value = None
    waiting: Literal["read", "write"] | None = None
    pending_value: Value = None
    requested_at: float = 0.0
    valid_until: float = 0.0
    rid: int = 0

    def state_at(self, now: float) -> LineState:
        """The state at ``now``: I once the line's lease ran out."""
        return self.state if now < self.valid_until else LineState.I


def cache_step(
    line: CacheLine,
    event: CacheEvent,
    *,
    agent: str,
    now: float,
    lease: float = DEFAULT_LEASE_S,
) -> tuple[CacheLine, tuple[CacheEffect, ...]]:
    """Apply ``event`` at ``now`` to ``line`` of ``agent``'s cache; see the module docstring table.

    ``lease`` must not exceed the directory's: a line granted for a request sent at ``t`` is
    trusted until ``t + lease``, which ends before the directory can drop this agent.
    """
    iri = line.iri
    if line.state is not LineState.I and line.state_at(now) is LineState.I:
        line = replace(line, state=LineState.I, value=None)  # the lease ran out
    match event:
        case Abandon():
            if line.waiting is None:
                return line, ()
            return replace(line, state=LineState.I, value=None, waiting=None,
                           pending_value=None), ()
        case LocalRead() | LocalWrite() | Evict() if line.waiting is not None:
            return line, (Retry(event),)
        case LocalRead(shared=shared):
            if line.state is LineState.I:
                rid = line.rid + 1
                new = replace(line, waiting="read", requested_at=now, rid=rid)
                return new, (Send(ReadMiss(iri, agent, rid, shared)),)
            return line, (ReadDone(iri, line.version, line.value),)
        case LocalWrite(value=value):
            rid = line.rid + 1
            new = replace(line, waiting="write", pending_value=value, requested_at=now, rid=rid)
            return new, (Send(WriteRequest(iri, agent, value, rid)),)
        case Evict():
            gone = replace(line, state=LineState.I, value=None)
            if line.state in (LineState.M, LineState.E):
                return gone, (Send(WriteBack(iri, agent, line.version, line.value)),)
            return gone, ()
        case Invalidate(seq=seq):
            return replace(line, state=LineState.I, value=None), (Send(InvAck(iri, agent, seq)),)
        case Downgrade(seq=seq):
            kept = line.state is not LineState.I
            new = replace(line, state=LineState.S) if kept else line
            return new, (Send(DowngradeAck(iri, agent, seq, kept)),)
        case Fill(version=version, value=value, grant=grant, rid=rid):
            if line.waiting != "read" or rid != line.rid:
                return line, ()
            until = line.requested_at + lease
            new = replace(
                line, state=grant, version=version, value=value, waiting=None, valid_until=until
            )
            return new, (ReadDone(iri, version, value),)
        case WriteAck(version=version, rid=rid):
            if line.waiting != "write" or rid != line.rid:
                return line, ()
            until = line.requested_at + lease
            new = CacheLine(iri, LineState.M, version, line.pending_value, valid_until=until,
                            rid=rid)
            return new, (WriteDone(iri, version),)


# --- directory side -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadTxn:
    """A read miss ``rid`` of ``requester`` waiting for the owner's DowngradeAck."""

    requester: str
    waiting: frozenset[str]
    rid: int = 0
    shared: bool = False


@dataclass(frozen=True)
class WriteTxn:
    """A write ``rid`` of ``writer`` as ``version``: waits for InvAcks (``waiting``) and the
    store."""

    writer: str
    version: int
    value: Value
    waiting: frozenset[str]
    stored: bool = False
    rid: int = 0


@dataclass(frozen=True)
class DirEntry:
    """What the directory knows of one IRI.

    ``version``/``value``: the last acknowledged (durable) write, served by fills. ``seq`` numbers
    the transactions that sent Invalidate/Downgrade. ``deadline``: when the holders ``pending``
    waits for are dropped. ``queue``: requests that arrived while ``pending`` was in flight.
    """

    iri: str
    owner: str | None = None
    sharers: frozenset[str] = frozenset()
    version: int = 0
    value: Value = None
    pending: ReadTxn | WriteTxn | None = None
    deadline: float | None = None
    seq: int = 0
    queue: tuple[ReadMiss | WriteRequest, ...] = ()


def directory_step(
    entry: DirEntry, event: DirEvent, now: float, *, lease: float = DEFAULT_LEASE_S
) -> tuple[DirEntry, tuple[DirEffect, ...]]:
    """Apply ``event`` to ``entry`` at time ``now``; see the table in the module docstring."""
    effects: list[DirEffect] = []
    match event:
        case ReadMiss() | WriteRequest():
            if entry.pending is not None or entry.queue:
                return replace(entry, queue=(*entry.queue, event)), ()
            entry = _start(entry, event, now, lease, effects)
        case DowngradeAck(sender=sender, seq=seq, kept=kept):
            txn = entry.pending
            if isinstance(txn, ReadTxn) and seq == entry.seq and sender in txn.waiting:
                sharers = entry.sharers | {sender} if kept else entry.sharers - {sender}
                owner = None if entry.owner == sender else entry.owner
                txn = replace(txn, waiting=txn.waiting - {sender})
                entry = replace(entry, owner=owner, sharers=sharers, pending=txn)
        case InvAck(sender=sender, seq=seq):
            txn = entry.pending
            if isinstance(txn, WriteTxn) and seq == entry.seq and sender in txn.waiting:
                entry = replace(entry, pending=replace(txn, waiting=txn.waiting - {sender}))
        case StoreWritten(version=version):
            txn = entry.pending
            if isinstance(txn, WriteTxn) and version == txn.version:
                entry = replace(entry, pending=replace(txn, stored=True))
        case WriteBack(sender=sender):
            if entry.owner == sender:
                entry = replace(entry, owner=None)
        case Depart(agent=agent):
            owner = None if entry.owner == agent else entry.owner
            queue = tuple(r for r in entry.queue if r.sender != agent)
            entry = replace(entry, owner=owner, sharers=entry.sharers - {agent}, queue=queue)
            txn = entry.pending
            if txn is not None and agent in txn.waiting:
                entry = replace(entry, pending=replace(txn, waiting=txn.waiting - {agent}))
        case Tick():
            txn = entry.pending
            if txn is not None and entry.deadline is not None and now >= entry.deadline:
                for agent in sorted(txn.waiting):
                    effects.append(Dropped(entry.iri, agent))
                dropped = txn.waiting
                owner = None if entry.owner in dropped else entry.owner
                entry = replace(
                    entry,
                    owner=owner,
                    sharers=entry.sharers - dropped,
                    pending=replace(txn, waiting=frozenset()),
                    deadline=None,
                )
    entry = _advance(entry, now, lease, effects)
    return entry, tuple(effects)


def _start(
    entry: DirEntry,
    request: ReadMiss | WriteRequest,
    now: float,
    lease: float,
    effects: list[DirEffect],
) -> DirEntry:
    """Begin ``request`` on an idle entry (it may complete at once)."""
    match request:
        case ReadMiss(sender=reader, rid=rid, shared=shared):
            if entry.owner is not None and entry.owner != reader:
                seq = entry.seq + 1
                effects.append(SendTo(entry.owner, Downgrade(entry.iri, seq)))
                read = ReadTxn(reader, frozenset({entry.owner}), rid, shared)
                return replace(entry, pending=read, deadline=now + lease, seq=seq)
            return _fill(entry, reader, rid, shared, effects)
        case WriteRequest(sender=writer, value=value, rid=rid):
            holders = entry.sharers | ({entry.owner} if entry.owner else set())
            others = frozenset(holders - {writer})
            version = entry.version + 1
            effects.append(StoreWrite(entry.iri, version, value))
            seq = entry.seq + 1 if others else entry.seq
            effects.extend(SendTo(agent, Invalidate(entry.iri, seq)) for agent in sorted(others))
            write = WriteTxn(writer, version, value, others, rid=rid)
            deadline = now + lease if others else None
            return replace(entry, pending=write, deadline=deadline, seq=seq)


def _fill(
    entry: DirEntry, reader: str, rid: int, shared: bool, effects: list[DirEffect]
) -> DirEntry:
    """Serve ``reader`` from the entry (no other owner): E when nobody else holds it and the
    read did not ask for S, else S."""
    alone = not shared and not (entry.sharers - {reader}) and entry.owner in (None, reader)
    grant = LineState.E if alone else LineState.S
    effects.append(SendTo(reader, Fill(entry.iri, entry.version, entry.value, grant, rid)))
    if alone:
        return replace(entry, owner=reader, sharers=frozenset(), pending=None, deadline=None)
    return replace(entry, sharers=entry.sharers | {reader}, pending=None, deadline=None)


def _advance(entry: DirEntry, now: float, lease: float, effects: list[DirEffect]) -> DirEntry:
    """Complete the pending transaction if it has all it waits for, then start queued requests."""
    while True:
        txn: ReadTxn | WriteTxn | None = entry.pending
        if isinstance(txn, ReadTxn) and not txn.waiting:
            entry = _fill(replace(entry, owner=None), txn.requester, txn.rid, txn.shared, effects)
        elif isinstance(txn, WriteTxn) and not txn.waiting and txn.stored:
            effects.append(SendTo(txn.writer, WriteAck(entry.iri, txn.version, txn.rid)))
            entry = replace(
                entry,
                owner=txn.writer,
                sharers=frozenset(),
                version=txn.version,
                value=txn.value,
                pending=None,
                deadline=None,
            )
        elif txn is None and entry.queue:
            head, *rest = entry.queue
            entry = _start(replace(entry, queue=tuple(rest)), head, now, lease, effects)
        else:
            return entry
