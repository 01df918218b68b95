"""Named crash points: the places where a job may be made to fail on purpose.

Production code calls ``crash_point("ingest.write")`` at each point listed in ``POINTS`` and
at each role's ``ROLE_POINTS`` (``every_point`` lists them all for the roles given). It
costs one context-variable lookup and does nothing unless a test (or a chaos run) armed that
point for the current context with ``armed``. A context is a job's task tree: tasks copy it
when they start, and anyio's worker threads run in a copy, so four jobs running side by side
in one process can each be armed at a different point.

A role's points carry the role: ``role.start:DA``; any role name (a word) is accepted there,
since the roles are the registry's (``gliding.config.roles``), above this layer. An armed
point raises ``InjectedCrash`` (an ordinary ``Exception``: it stands for a bug or a failing
store at that place, and takes the same paths a real one would) or, armed with
``kind=InjectedKill``, an exception no ``except Exception`` stops (it stands for the process
dying there, as the tests' stand-in for ``kill -9`` does: nothing gets to handle it, only
``finally`` blocks run).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

ROLE_POINTS = ("role.start", "role.end")  # each as <point>:<ROLE>
POINTS = (
    "ingest.write",  # a blackboard node written by ingestion (through the coherence directory)
    "archive.write",  # an item put into the job's L0 archive
    "coherence.ack",  # the directory acknowledging a write
    "journal.append",  # a supervisor transition journaled
    "teardown",  # the job closing its tools and bus after the supervisor ended
)


class InjectedCrash(Exception):  # noqa: N818 - it is the crash, not an error report about one
    """Raised at an armed crash point."""

    def __init__(self, point: str) -> None:
        super().__init__(f"injected crash at {point}")
        self.point = point


class InjectedKill(BaseException):
    """Raised at a crash point armed with ``kind=InjectedKill``: the process "dies" there."""

    def __init__(self, point: str) -> None:
        super().__init__(f"injected kill at {point}")
        self.point = point


Injected = type[InjectedCrash] | type[InjectedKill]


_ARMED: ContextVar[tuple[Mapping[str, int], Injected] | None] = ContextVar(
    "gliding_crash_points", default=None)
_HITS: ContextVar[dict[str, int] | None] = ContextVar("gliding_crash_hits", default=None)


def crash_point(name: str) -> None:
    """Raise ``InjectedCrash`` when ``name`` is armed in this context (on its n-th pass)."""
    armed = _ARMED.get()
    if armed is None or name not in armed[0]:
        return
    hits = _HITS.get()
    if hits is None:
        return
    hits[name] = hits.get(name, 0) + 1
    if hits[name] == armed[0][name]:
        raise armed[1](name)


def every_point(roles: Iterable[str]) -> tuple[str, ...]:
    """Every crash point of a job whose roles are ``roles``: theirs, then ``POINTS``."""
    return (*(f"{point}:{role}" for role in roles for point in ROLE_POINTS), *POINTS)


def _known(point: str) -> bool:
    name, _, role = point.partition(":")
    return point in POINTS or name in ROLE_POINTS and role.isidentifier()


@contextmanager
def armed(points: Mapping[str, int], *, kind: Injected = InjectedCrash
          ) -> Iterator[dict[str, int]]:
    """Arm ``points`` (name → the pass that crashes, 1 for the first) for this context and
    the tasks and threads it starts, to raise ``kind``; yields the passes counted so far, by
    name.

    Raises:
        ValueError: a name that is not one of ``POINTS`` nor a role's point.
    """
    unknown = [p for p in points if not _known(p)]
    if unknown:
        raise ValueError(f"unknown crash point(s) {unknown}; known: {', '.join(POINTS)}")
    hits: dict[str, int] = {}
    token, hits_token = _ARMED.set((dict(points), kind)), _HITS.set(hits)
    try:
        yield hits
    finally:
        _ARMED.reset(token)
        _HITS.reset(hits_token)
