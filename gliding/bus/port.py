"""The bus port: what every backend offers, and MQTT topic rules as pure functions.

Topics are ``/``-separated levels (``gliding/job/j1/agent/DA``). Subscriptions take MQTT topic
filters: ``+`` matches exactly one level, ``#`` (last level only) matches the parent level and
everything below it; topics starting with ``$`` are not matched by a filter starting with a
wildcard. The rules are those of MQTT 3.1.1 section 4.7, so the in-process and MQTT backends route
identically.

A filter ``$share/<group>/<filter>`` is a shared subscription (MQTT 5 section 4.8.2): it matches
what ``<filter>`` matches, but each matching message goes to one member of the group only (the
subscriptions made with that same filter string, on any bus connected to the same broker), so a
pool of workers splits the stream. Nobody publishes on a ``$share/`` topic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import NamedTuple, Protocol

from gliding.bus.messages import BusMessage
from gliding.errors import BusError

MAX_TOPIC_BYTES = 65535
SHARE_PREFIX = "$share/"


class Delivery(NamedTuple):
    """One received message and the topic it was published on; unpacks as ``topic, message``."""

    topic: str
    message: BusMessage


class Subscription(Protocol):
    """The receiving end of one subscription; valid inside its ``subscribe`` context.

    Iterating yields deliveries in publish order until the bus closes (buffered deliveries are
    still yielded first).
    """

    @property
    def pattern(self) -> str:
        """The topic filter this subscription was made with."""
        ...

    def __aiter__(self) -> AsyncIterator[Delivery]: ...

    async def __anext__(self) -> Delivery:
        """The next delivery.

        Raises:
            StopAsyncIteration: the bus was closed and every buffered delivery was taken.
            BusError: the subscription's context has been left (it was unsubscribed).
        """
        ...

    async def receive(self) -> Delivery:
        """Wait for the next delivery.

        Raises:
            BusError: the bus was closed and every buffered delivery was taken, or the
                subscription's context has been left (it was unsubscribed).
        """
        ...


class Bus(Protocol):
    """Typed messages on topics. Backends: ``inproc.InProcessBus`` and ``mqtt.MQTTBus``.

    Guarantees every backend keeps (checked by ``gliding.testing.bus_contract``):
        * a subscription receives every message published on a matching topic after its
          ``subscribe`` context was entered and before it was left, each exactly once;
        * messages from one publisher arrive in publish order: if ``publish(a)`` returned before
          ``publish(b)`` was called, every subscriber that receives both receives ``a`` first;
        * subscribers are isolated: each has its own buffer and gets its own copy of the stream;
        * a message arrives as the class it was sent as (``type`` discriminates it);
        * a message published when no subscription matches is dropped, not kept for later;
        * a shared subscription (``$share/<group>/<filter>``) group receives each matching
          message exactly once in all, at one of its members, while every other subscription
          of the same ``<filter>`` still receives it too.
    """

    async def publish(self, topic: str, message: BusMessage) -> None:
        """Send ``message`` to every subscription whose filter matches ``topic``.

        Raises:
            BusError: the bus is closed (or closed while this call waited); ``topic`` is empty,
                too long, contains a wildcard or starts with ``$share/``; ``message`` is not a
                bus message; a network backend could not reach its broker in time.
        """
        ...

    def subscribe(
        self, pattern: str, *, max_buffer: int = 100, unverified: bool = False
    ) -> AbstractAsyncContextManager[Subscription]:
        """Subscribe to the topic filter ``pattern`` for the duration of the context.

        ``unverified``: on a bus that signs its messages, also take signed messages this
        process cannot check (a worker: the root's offers to the whole pool, which it acts on
        only once a grant it can check names them); elsewhere it means nothing.

        ``max_buffer`` bounds the deliveries held for this subscriber; what happens when it is
        full is backend policy (the in-process bus makes publishers wait; the MQTT bus stops
        taking deliveries from the broker, which holds them back). A ``$share/<group>/...``
        pattern joins that shared group.

        Raises (on entering the context):
            BusError: the bus is closed; ``pattern`` is not a valid topic filter;
                ``max_buffer`` is below 1; a network backend could not reach its broker in
                time or the broker refused the filter.
        """
        ...

    async def aclose(self) -> None:
        """Close the bus: publishing fails from now on and subscriptions end after their
        buffered deliveries. Closing twice is harmless. Raises nothing."""
        ...

    @property
    def reconnects(self) -> int:
        """How often the bus lost its connection and got it back (always 0 in process).
        Messages in flight at such a moment may be lost; a publisher that must be heard (the
        runner's assignments) publishes them again when this grows."""
        ...


def check_topic(topic: str) -> str:
    """Return ``topic`` if messages may be published on it.

    Raises:
        BusError: it is empty, too long, contains NUL, ``+`` or ``#``, or starts with
            ``$share/``.
    """
    _check_common(topic, "topic")
    if "+" in topic or "#" in topic:
        raise BusError(
            f"cannot publish on {topic!r}: wildcards '+' and '#' are for subscriptions only",
            hint="publish on a concrete topic such as gliding/job/<job>/events",
        )
    if topic.startswith(SHARE_PREFIX):
        raise BusError(
            f"cannot publish on {topic!r}: '$share/' starts shared subscription filters",
            hint="publish on the plain topic; subscribers add $share/<group>/ themselves",
        )
    return topic


def check_pattern(pattern: str) -> str:
    """Return ``pattern`` if it is a valid topic filter.

    Raises:
        BusError: it is empty, too long, contains NUL, or uses ``+``/``#`` inside a level, or
            ``#`` anywhere but the last level; or it starts with ``$share/`` but has no group
            name, a group name with a wildcard, or no filter after the group.
    """
    _check_common(pattern, "topic filter")
    levels = split_shared(pattern)[1].split("/")
    for i, level in enumerate(levels):
        if level in ("+", "#"):
            if level == "#" and i != len(levels) - 1:
                raise BusError(
                    f"bad topic filter {pattern!r}: '#' must be the last level",
                    hint="e.g. gliding/job/+/events or gliding/job/j1/#",
                )
        elif "+" in level or "#" in level:
            raise BusError(
                f"bad topic filter {pattern!r}: a wildcard must fill a whole level",
                hint="write a/+/c, not a/b+/c",
            )
    return pattern


def topic_matches(pattern: str, topic: str) -> bool:
    """Whether the topic filter ``pattern`` matches the publish topic ``topic`` (MQTT rules).

    Raises:
        BusError: ``pattern`` is not a valid filter or ``topic`` not a valid publish topic.
    """
    filter_levels = split_shared(check_pattern(pattern))[1].split("/")
    topic_levels = check_topic(topic).split("/")
    if topic.startswith("$") and filter_levels[0] in ("+", "#"):
        return False
    for i, level in enumerate(filter_levels):
        if level == "#":
            return True
        if i >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[i]:
            return False
    return len(filter_levels) == len(topic_levels)


def split_shared(pattern: str) -> tuple[str | None, str]:
    """``(group, filter)`` of a ``$share/<group>/<filter>`` pattern, ``(None, pattern)`` of any
    other; ``filter`` is what decides which topics match.

    Raises:
        BusError: ``pattern`` starts with ``$share/`` but the group name is empty or holds a
            wildcard, or no filter follows it.
    """
    if not pattern.startswith(SHARE_PREFIX):
        return None, pattern
    group, sep, inner = pattern[len(SHARE_PREFIX):].partition("/")
    if not group or "+" in group or "#" in group or not sep or not inner:
        raise BusError(
            f"bad shared subscription {pattern!r}: it needs a group name and a filter",
            hint="write $share/<group>/<filter>, e.g. $share/workers/gliding/job/+/agent/DA",
        )
    return group, inner


def _check_common(text: str, what: str) -> None:
    if not isinstance(text, str) or not text:
        raise BusError(f"empty or non-text {what}: {text!r}")
    if "\x00" in text:
        raise BusError(f"{what} {text!r} contains a NUL character")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES:
        raise BusError(f"{what} is longer than {MAX_TOPIC_BYTES} bytes")
