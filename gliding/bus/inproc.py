"""InProcessBus: the default bus backend, on bounded anyio memory object streams.

Behaviour beyond the ``port.Bus`` contract:
    * Backpressure. Each subscription has a buffer of ``max_buffer`` deliveries. When it is full,
      ``publish`` waits until that subscriber takes one; a slow subscriber therefore slows its
      publishers down instead of growing memory without bound. A subscriber that publishes to a
      topic its own filter matches must keep receiving, or it can wait on itself forever.
    * Order. ``publish`` hands the message to the matching subscriptions one after another, in
      the order they subscribed, and returns when every one holds it; sequential publishes thus
      arrive in publish order at every subscriber. A publish cancelled part-way may have reached
      only some subscribers.
    * Shared groups. The subscriptions made with one ``$share/<group>/<filter>`` pattern take
      turns (round robin, in subscribe order): each matching message goes to the next member
      whose buffer has room, or, when every member's buffer is full, waits for the member
      whose turn it is. A member that leaves while the message waits for it hands it on.
    * No retention. A message published when no subscription matches is dropped; a later
      subscription never sees it.
    * No copies. Subscribers receive the very message object that was published (frozen models
      whose dict and list fields must not be mutated).
    * Closing. ``aclose`` makes publishing fail, wakes publishers waiting on a full buffer with
      BusError, and lets each subscription drain its buffer before its iteration ends.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType

import anyio
from anyio.lowlevel import checkpoint
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gliding.bus.messages import BusMessage, is_message
from gliding.bus.port import Delivery, check_pattern, check_topic, split_shared, topic_matches
from gliding.errors import BusError


@dataclass(frozen=True)
class _Subscriber:
    pattern: str
    send: MemoryObjectSendStream[Delivery]
    shared: bool  # a member of the $share group named by its pattern


class InProcessSubscription:
    """The receiving end of one in-process subscription (see ``port.Subscription``)."""

    def __init__(self, pattern: str, receive: MemoryObjectReceiveStream[Delivery]) -> None:
        self._pattern = pattern
        self._receive = receive

    @property
    def pattern(self) -> str:
        return self._pattern

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        except anyio.ClosedResourceError as exc:
            raise self._left() from exc

    async def receive(self) -> Delivery:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream as exc:
            raise BusError(
                f"the bus was closed; subscription {self._pattern!r} has nothing more to receive",
                hint="stop receiving when the bus closes (async for ends by itself)",
            ) from exc
        except anyio.ClosedResourceError as exc:
            raise self._left() from exc

    def _left(self) -> BusError:
        return BusError(
            f"subscription {self._pattern!r} was used after its context was left",
            hint="receive only inside `async with bus.subscribe(...)`",
        )


class InProcessBus:
    """A bus for the tasks of one process; implements ``port.Bus``."""

    def __init__(self) -> None:
        self._subscribers: dict[int, _Subscriber] = {}
        self._ids = itertools.count()
        self._turns: dict[str, int] = {}  # shared pattern -> whose turn it is (a counter)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def reconnects(self) -> int:
        """Never: nothing is between publisher and subscriber."""
        return 0

    async def publish(self, topic: str, message: BusMessage) -> None:
        """See ``port.Bus.publish``; waits while a matching subscriber's buffer is full."""
        self._require_open(f"publish on {topic!r}")
        check_topic(topic)
        if not is_message(message):
            raise BusError(
                f"cannot publish {type(message).__name__} on {topic!r}: not a bus message",
                hint="send one of gliding.bus.messages.MESSAGE_TYPES",
            )
        delivery = Delivery(topic, message)
        targets = [s for s in self._subscribers.values() if topic_matches(s.pattern, topic)]
        if not targets:
            await checkpoint()
            return
        groups_done: set[str] = set()
        for subscriber in targets:
            if not subscriber.shared:
                await self._deliver(subscriber, delivery)
            elif subscriber.pattern not in groups_done:
                groups_done.add(subscriber.pattern)
                await self._deliver_to_group(subscriber.pattern, delivery)

    async def _deliver(self, subscriber: _Subscriber, delivery: Delivery) -> bool:
        """Hand ``delivery`` to ``subscriber``, waiting for room; False if it left meanwhile."""
        try:
            await subscriber.send.send(delivery)
        except anyio.BrokenResourceError:
            return False  # the subscriber left while we waited; it no longer wants messages
        except anyio.ClosedResourceError as exc:
            if self._closed:
                raise BusError(
                    f"the bus was closed while publishing on {delivery.topic!r}",
                    hint="some subscribers may not have received the message",
                ) from exc
            return False  # unsubscribed while we waited
        return True

    async def _deliver_to_group(self, pattern: str, delivery: Delivery) -> None:
        """Hand ``delivery`` to one member of the shared group ``pattern`` (round robin)."""
        while members := [s for s in self._subscribers.values() if s.pattern == pattern]:
            start = self._turns.get(pattern, 0) % len(members)
            order = members[start:] + members[:start]
            for i, member in enumerate(order):
                try:
                    member.send.send_nowait(delivery)
                except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    continue  # full (or just left): the next member's turn
                self._turns[pattern] = start + i + 1
                return
            self._turns[pattern] = start + 1
            if await self._deliver(order[0], delivery):
                return
            # the member whose turn it was left while we waited: ask the group again

    @asynccontextmanager
    async def subscribe(
        self, pattern: str, *, max_buffer: int = 100, unverified: bool = False
    ) -> AsyncIterator[InProcessSubscription]:
        """See ``port.Bus.subscribe``; unsubscribes when the context is left. ``unverified``
        means nothing here: one process, nothing to check."""
        self._require_open(f"subscribe to {pattern!r}")
        check_pattern(pattern)
        if not isinstance(max_buffer, int) or max_buffer < 1:
            raise BusError(
                f"max_buffer must be an int >= 1, got {max_buffer!r}",
                hint="the default of 100 suits most subscribers",
            )
        send, receive = anyio.create_memory_object_stream[Delivery](max_buffer)
        key = next(self._ids)
        shared = split_shared(pattern)[0] is not None
        self._subscribers[key] = _Subscriber(pattern, send, shared)
        try:
            yield InProcessSubscription(pattern, receive)
        finally:
            del self._subscribers[key]
            send.close()
            receive.close()
            if shared and not any(s.pattern == pattern for s in self._subscribers.values()):
                self._turns.pop(pattern, None)

    async def aclose(self) -> None:
        """See ``port.Bus.aclose``."""
        self._closed = True
        for subscriber in list(self._subscribers.values()):
            subscriber.send.close()

    async def __aenter__(self) -> InProcessBus:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _require_open(self, what: str) -> None:
        if self._closed:
            raise BusError(f"cannot {what}: the bus is closed", hint="open a new bus")
