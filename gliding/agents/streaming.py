"""A turn's streamed reply as job events: the pieces a hosted model streams (``Delta``,
``llm.stream``) batched into ``model.delta`` events, and ``model.discarded`` when a call that
had streamed fails mid-way (its retry streams the reply again from the start).

    stream = TurnStream(publish, env.now, session="DA", turn=3)
    await stream.delta(Delta("Hello"))   # LLMRequest.on_delta
    await stream.discard("connection failed")  # before a retry, or when the call failed
    await stream.flush()                 # the call answered: what is held goes out

Batching keeps the bus, the daemon's event log and every follower (``gliding logs -f``, SSE,
the dashboard) at one event per batch, not one per token. A batch is published when it holds
FLUSH_CHARS characters, when FLUSH_S seconds have passed since the turn's last delta event,
when the text switches between the reply's content and a tool call's arguments, and when the
call ends. The check runs as pieces arrive (no timer task): the first piece after a quiet spell
goes out at once, and a model that pauses holds at most the few pieces it sent in the last
FLUSH_S until its next piece or the call's end. A streaming turn so makes about ten events a
second at most, whatever the model's speed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gliding.core.events import Event, ModelDelta, ModelDiscarded
from gliding.llm.port import Delta

FLUSH_S = 0.1  # a batch waits at most this long after the turn's last delta event
FLUSH_CHARS = 512  # a batch this long goes out at once


class TurnStream:
    """One turn's deltas, batched and published as events (see the module); ``now`` is the
    job's clock (seconds)."""

    def __init__(self, publish: Callable[[Event], Awaitable[None]], now: Callable[[], float], *,
                 session: str, turn: int) -> None:
        self._publish = publish
        self._now = now
        self.session = session
        self.turn = turn
        self.seq = 0  # delta events published, the turn's whole
        self.told = 0  # characters published since the last discard
        self._held: list[str] = []
        self._held_chars = 0
        self._tool: str | None = None
        self._last = float("-inf")

    async def delta(self, piece: Delta) -> None:
        """Hold ``piece``; publish what is held when a rule of the module says so."""
        if not piece.text:
            return
        if self._held and piece.tool != self._tool:
            await self.flush()
        self._tool = piece.tool
        self._held.append(piece.text)
        self._held_chars += len(piece.text)
        if self._held_chars >= FLUSH_CHARS or self._now() - self._last >= FLUSH_S:
            await self.flush()

    async def flush(self) -> None:
        """Publish what is held, as one ``model.delta``."""
        if not self._held:
            return
        text = "".join(self._held)
        self._held.clear()
        self._held_chars = 0
        self.seq += 1
        self.told += len(text)
        self._last = self._now()
        await self._publish(ModelDelta(session=self.session, turn=self.turn, seq=self.seq,
                                       text=text, tool=self._tool))

    async def discard(self, reason: str) -> None:
        """The call that streamed since the last discard failed: what it streamed is
        published (the deltas' sum stays what was shown) and declared void."""
        await self.flush()
        if self.told:
            chars, self.told = self.told, 0
            await self._publish(ModelDiscarded(session=self.session, turn=self.turn,
                                               reason=reason, chars=chars))
