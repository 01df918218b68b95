"""Virtual time for tests: ``autojump`` runs an async function on a clock that jumps ahead
whenever every task is waiting, so a 10-minute wall-time budget or a 30 s timeout passes at
once, without real sleeps.

    result = autojump(runner.run, state, commands)      # trio's MockClock under anyio

``LoopClock`` is a ``core.clock.Clock`` that reads the event loop's (virtual) time, so code that
measures with an injected clock sees the same jumps. Only for code that waits on timers and
in-process streams: a thread or a subprocess keeps real time while the clock jumps past it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


class LoopClock:
    """Seconds of the running event loop; ``now`` is the wall clock shifted by the same."""

    def __init__(self, start: float | None = None) -> None:
        """``start``: what ``now`` says at this moment (default: the wall clock's time); a
        clock given one is made inside the event loop."""
        self._epoch = time.time() if start is None else start - anyio.current_time()

    def monotonic(self) -> float:
        return anyio.current_time()

    def now(self) -> float:
        return self._epoch + anyio.current_time()


def autojump(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``fn(*args)`` run to its end on a clock that skips every idle wait."""
    import trio.testing  # a test dependency, imported only where virtual time is asked for

    return anyio.run(fn, *args, backend="trio",
                     backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)})
