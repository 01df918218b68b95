"""Awaited replies by key: the one place a request is matched with its answer on the bus.

    replies = Replies[str, ArchiveReply]()
    replies.expect(rid)                 # before the request goes out
    ...                                 # the listener: replies.deliver(reply.id, reply)
    reply = await replies.wait(rid, 10) # None when nothing came in time
    replies.forget(rid)                 # when the caller gives up or is done

Only the first answer to a key is kept (a duplicate is dropped); an answer to a key nobody
expects is refused (``deliver`` returns False), so the caller can treat it otherwise.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio

K = TypeVar("K")
V = TypeVar("V")


class Replies(Generic[K, V]):
    def __init__(self) -> None:
        self._slots: dict[K, tuple[anyio.Event, list[V]]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._slots

    def expect(self, key: K) -> None:
        """Wait for an answer to ``key`` from now on (again: no change)."""
        self._slots.setdefault(key, (anyio.Event(), []))

    def deliver(self, key: K, value: V) -> bool:
        """Hand ``value`` to whoever waits for ``key``; False when nobody expects it."""
        slot = self._slots.get(key)
        if slot is None:
            return False
        event, values = slot
        if not values:
            values.append(value)
            event.set()
        return True

    async def wait(self, key: K, timeout_s: float) -> V | None:
        """The answer to the expected ``key``, waiting at most ``timeout_s``; None if none."""
        event, values = self._slots[key]
        with anyio.move_on_after(timeout_s):
            await event.wait()
        return values[0] if values else None

    def forget(self, key: K) -> None:
        self._slots.pop(key, None)
