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
from gliding.bus.port import Delivery, check_pattern, check_topic, topic_matches
from gliding.errors import BusError


@dataclass(frozen=True)
class _Subscriber:
    pattern: str
    send: MemoryObjectSendStream[Delivery]


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
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

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
        for subscriber in targets:
            try:
                await subscriber.send.send(delivery)
            except anyio.BrokenResourceError:
                continue  # the subscriber left while we waited; it no longer wants messages
            except anyio.ClosedResourceError as exc:
                if self._closed:
                    raise BusError(
                        f"the bus was closed while publishing on {topic!r}",
                        hint="some subscribers may not have received the message",
                    ) from exc
                continue  # unsubscribed while we waited

    @asynccontextmanager
    async def subscribe(
        self, pattern: str, *, max_buffer: int = 100
    ) -> AsyncIterator[InProcessSubscription]:
        """See ``port.Bus.subscribe``; unsubscribes when the context is left."""
        self._require_open(f"subscribe to {pattern!r}")
        check_pattern(pattern)
        if not isinstance(max_buffer, int) or max_buffer < 1:
            raise BusError(
                f"max_buffer must be an int >= 1, got {max_buffer!r}",
                hint="the default of 100 suits most subscribers",
            )
        send, receive = anyio.create_memory_object_stream[Delivery](max_buffer)
        key = next(self._ids)
        self._subscribers[key] = _Subscriber(pattern, send)
        try:
            yield InProcessSubscription(pattern, receive)
        finally:
            del self._subscribers[key]
            send.close()
            receive.close()

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
