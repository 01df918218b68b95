"""How the MQTT bus hands deliveries to its local subscriptions, and what it refuses.

``Filter`` is one broker subscription and the local subscriptions made with it; ``hand``
waits for room in one subscription and ``hand_to_one`` gives a delivery to one member of a
``$share`` filter in turn (the back-pressure ``mqtt.MQTTBus`` relies on). ``Refusals`` counts
deliveries that are not taken (malformed, forged, replayed, too large) and rate-limits the
warnings about them. None of this touches the connection, which ``mqtt.MQTTBus`` owns.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import anyio
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from gliding.bus.auth import Forged
from gliding.bus.port import Delivery
from gliding.errors import BusError

log = structlog.get_logger("gliding.bus")

REFUSAL_LOG_S = 10.0  # refused deliveries: one warning per kind this often, with a count


@dataclass(eq=False)
class Filter:
    """One broker subscription and the local subscriptions (their send ends) made with it."""

    pattern: str
    ident: int
    shared: bool
    members: list[MemoryObjectSendStream[Delivery]] = field(default_factory=list)
    turn: int = 0
    unverified: bool = False  # takes signed messages this process cannot check (bus/auth.py)
    began: float = field(default_factory=time.time)  # what was stamped well before: a replay


class Refusals:
    """Deliveries refused (malformed, forged, replayed, too large): one warning per kind and
    topic pattern at most every ``REFUSAL_LOG_S``, with how many were refused since, so a flood
    of bad payloads costs a few lines, not one each."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.count = 0  # refused in all
        self._pending: dict[str, int] = {}
        self._logged: dict[str, float] = {}

    def note(self, topic: str, exc: BusError, size: int) -> None:
        self.count += 1
        kind = f"{getattr(exc, 'kind', exc.code)}:{topic.split('/', 1)[0]}"
        self._pending[kind] = self._pending.get(kind, 0) + 1
        now = time.monotonic()
        if now - self._logged.get(kind, -math.inf) < REFUSAL_LOG_S:
            return
        if len(self._logged) > 1000:
            self._logged.clear()
        self._logged[kind] = now
        event = "bus.forged" if isinstance(exc, Forged) else "bus.mqtt.bad_payload"
        log.warning(event, url=self.url, topic=topic[:200], error=exc.message[:300],
                    size=size, refused=self._pending.pop(kind))


async def hand(member: MemoryObjectSendStream[Delivery], delivery: Delivery) -> bool:
    """Wait for room in ``member`` and hand it ``delivery``; False if it left meanwhile."""
    try:
        await member.send(delivery)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False
    return True


async def hand_to_one(entry: Filter, delivery: Delivery) -> None:
    """Give ``delivery`` to one member of a shared filter: the next with room, in turn."""
    while members := entry.members:
        start = entry.turn % len(members)
        order = members[start:] + members[:start]
        for i, member in enumerate(order):
            try:
                member.send_nowait(delivery)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                continue
            entry.turn = start + i + 1
            return
        entry.turn = start + 1
        if await hand(order[0], delivery) or order[0] in entry.members:
            return  # handed over, or closed with the bus (a member that left is off the list)
