"""The coherence engine's async shell: what the directory and the per-agent caches share.

``protocol.py`` decides; this module, ``directory.py`` and ``cache.py`` only carry decisions
out. ``Directory`` keeps one ``DirEntry`` per IRI of a *space* (a job's blackboard graph, or a
benchmark's), applies ``directory_step`` to every message, sends what it says, and writes the
store through a ``NodeStore``. ``Cache`` is one agent's (one process incarnation's) set of
lines: ``read``, ``write`` and ``evict`` apply ``cache_step`` and wait for the directory's
answer.

    cache ──CoherenceMsg on coherence/<space>/directory──► Directory ──► NodeStore (durable)
          ◄──CoherenceMsg on coherence/<space>/cache/<agent>──

When a write counts as acknowledged: when ``Cache.write`` returns its version. By then the
store confirmed that version (``NodeStore.save`` returned) and every other copy was invalidated
or its holder dropped at lease end, so killing any process afterwards, the writer's included,
loses nothing. A ``write`` that raises ``CoherenceTimeout`` has an unknown outcome: it may yet
take effect, once, or never.

This module holds what both sides share: the errors, the ``NodeStore`` port, ``Versioned``, the
wire form of protocol messages and ``announce_departure``. ``directory.py`` holds the directory
and ``cache.py`` the caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gliding.bus import topics
from gliding.bus.messages import CoherenceMsg
from gliding.bus.port import Bus
from gliding.errors import GlidingError
from gliding.memory.coherence.protocol import (
    Depart,
    Downgrade,
    DowngradeAck,
    Fill,
    InvAck,
    Invalidate,
    LineState,
    ReadMiss,
    ToCache,
    ToDirectory,
    WriteAck,
    WriteBack,
    WriteRequest,
)

ALL = "*"  # the ``iri`` of a depart message: every entry


class CoherenceError(GlidingError):
    code = "coherence.error"


class CoherenceTimeout(CoherenceError):
    code = "coherence.timeout"


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
                      CoherenceMsg(kind="depart", iri=ALL, sender=agent))
