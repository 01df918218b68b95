"""An async object driven from synchronous code, one event loop per call: for tests that
check a blackboard with blocking queries (which must not run on an event loop) between
ingestion calls (which are async). Not for production code: a job awaits its ingestor."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import anyio


class Blocking:
    """``inner`` with each coroutine method run to its end by ``anyio.run``; other attributes
    pass through. For objects that keep no event-loop state between calls (the ingestor on the
    pass-through writer)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            return anyio.run(functools.partial(value, *args, **kwargs))
        return call
