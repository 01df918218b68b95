"""L3 views through a coherence cache: role briefings built from node lines, re-sent as changes.

``projection.Projector`` builds a role's view with one CONSTRUCT on the board. ``CoherentViews``
builds the same frame (``projection.frame_types``: the node types a role is shown, those ``partOf``
the job) from lines of a ``service.Cache``: the index lines of the frame's types
(``ingest.index_iri``) name the members, and each member is read as its own line. So a view is
current exactly while every line it used is valid in the cache: an invalidation from the
directory (a teammate's write, in any process) drops it at once (``Cache.listen``), and a line
whose lease ran out makes the next use rebuild it. Lines are read as Shared, never E, so
another view reading the same line costs no downgrade round trip.

Prefetch: ``serve`` (run it beside the cache) reads every line a view used again, as Shared,
as soon as the directory invalidates it, so the next ``view`` or ``update`` finds the new
version in the cache instead of waiting for it at the agent's next turn. A prefetch that fails
costs only itself.

``update(session, ...)`` is what an agent is shown between turns: the first call of a session
gives the whole view (the briefing), every later one only the lines that are new or changed
since that session last looked ("" when none). ``stats`` counts what those later calls sent
against what re-sending the whole view each time would have cost, in tokens.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream

from gliding.errors import GlidingError
from gliding.memory.board.nodes import index_iri
from gliding.memory.board.projection import frame_types
from gliding.memory.board.vocabulary import VocabularyError, from_jsonld
from gliding.memory.coherence.cache import Cache

log = structlog.get_logger("gliding.memory")



@dataclass
class ViewStats:
    rebuilt: int = 0
    reused: int = 0
    invalidated: int = 0
    prefetched: int = 0  # lines read again, as Shared, right after their invalidation
    updates: int = 0  # update() calls after a session's first look
    full_tokens: int = 0  # what re-sending the whole view at each of those would have cost
    sent_tokens: int = 0  # what they sent: the changed lines only


@dataclass(frozen=True)
class View:
    lines: Mapping[str, str]  # node IRI -> its line, in the order shown
    used: Mapping[str, int]  # every cache line it was built from (index lines too) -> version

    @property
    def text(self) -> str:
        return "\n".join(self.lines.values())


LINE = re.compile(r"^\w+ <([^>\s]+)>: ")
"""A view's line: ``Type <iri>: ...`` (``render_lines``)."""


@dataclass
class CoherentViews:
    """Views of one process's agents over its ``cache``; ``count`` measures tokens."""

    cache: Cache
    count: Callable[[str], int]
    stats: ViewStats = field(default_factory=ViewStats)
    _views: dict[tuple[str, str, int], View] = field(default_factory=dict)
    _shown: dict[str, dict[str, str]] = field(default_factory=dict)
    _again: MemoryObjectSendStream[str] | None = None

    def __post_init__(self) -> None:
        self.cache.listen(self._invalidate)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Prefetch invalidated lines of views until cancelled (see the module docstring)."""
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        self._again = send
        with send, receive:
            task_status.started()
            async for iri in receive:
                try:
                    await self.cache.read(iri, shared=True)
                except GlidingError as exc:
                    log.debug("coherence.prefetch.failed", iri=iri, error=exc.message)
                else:
                    self.stats.prefetched += 1

    async def view(self, role: str, graph: str, budget_tokens: int) -> View:
        """``role``'s view of the job graph ``graph``, cut to ``budget_tokens``.

        Raises:
            CoherenceTimeout: the directory did not answer.
            BusError: a request could not be sent.
        """
        key = (role, graph, budget_tokens)
        known = self._views.get(key)
        if known is not None and self._current(known):
            self.stats.reused += 1
            return known
        types = [t.removeprefix("gl:") for t in frame_types(role)]
        index = await self.cache.read_many([index_iri(graph, t) for t in types], shared=True)
        members = sorted({m for line in index.values() if line.value
                          for m in json.loads(line.value)})
        read = await self.cache.read_many(members, shared=True)
        nodes = {}
        for iri, line in read.items():
            if line.value is not None:
                try:
                    nodes[iri] = from_jsonld(line.value)
                except VocabularyError:
                    continue  # not a node: left out of the view, as a damaged triple would be
        used = {iri: line.version for iri, line in {**index, **read}.items()}
        view = View(render_lines(nodes, budget_tokens, self.count), used)
        self._views[key] = view
        self.stats.rebuilt += 1
        return view

    async def briefing(self, role: str, graph: str, budget_tokens: int) -> str:
        """The whole view as text (what ``Projector.briefing`` gives)."""
        return (await self.view(role, graph, budget_tokens)).text

    def shown(self, session: str, text: str) -> None:
        """``session`` was shown ``text`` (a briefing made of view lines): ``update`` sends
        what differs from it."""
        lines = {}
        for line in text.splitlines():
            if (match := LINE.match(line)) is not None:
                lines[match.group(1)] = line
        self._shown[session] = lines

    async def update(self, session: str, role: str, graph: str, budget_tokens: int) -> str:
        """The lines new or changed since what ``session`` was last shown (its ``shown`` text;
        the whole view on its first call when it has none)."""
        view = await self.view(role, graph, budget_tokens)
        shown = self._shown.get(session)
        if shown is None:
            self._shown[session] = dict(view.lines)
            return view.text
        changed = "\n".join(line for iri, line in view.lines.items() if shown.get(iri) != line)
        self.stats.updates += 1
        self.stats.full_tokens += self.count(view.text) if view.lines else 0
        self.stats.sent_tokens += self.count(changed) if changed else 0
        shown.update(view.lines)
        return changed

    def forget(self, session: str) -> None:
        """The session ended: what it was shown is no longer kept."""
        self._shown.pop(session, None)

    def _current(self, view: View) -> bool:
        """Every line the view used is valid in the cache at the version it was built from."""
        for iri, version in view.used.items():
            line = self.cache.peek(iri)
            if line is None or line.version != version:
                return False
        return True

    def _invalidate(self, iri: str) -> None:
        stale = [key for key, view in self._views.items() if iri in view.used]
        for key in stale:
            del self._views[key]
        self.stats.invalidated += len(stale)
        if stale and self._again is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._again.send_nowait(iri)


def render_lines(nodes: Mapping[str, Mapping[str, Any]], budget_tokens: int,
                 count: Callable[[str], int]) -> dict[str, str]:
    """One line per node, ``Type <iri>: key=value; ...`` (as ``projection.render``), in IRI
    order while the budget lasts."""
    lines: dict[str, str] = {}
    total = 0
    for iri in sorted(nodes):
        node = nodes[iri]
        props = {k: v for k, v in node.items() if k not in ("@id", "@type", "partOf")}
        body = "; ".join(f"{k}={' | '.join(_text(x) for x in _many(v))[:200]}"
                         for k, v in sorted(props.items()))
        line = f"{node.get('@type', '?')} <{iri}>: {body}"
        cost = count(line) + 1
        if total + cost > budget_tokens:
            break
        lines[iri] = line
        total += cost
    return lines


def _many(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
