"""A job's blackboard under the coherence engine: what the composition root starts for it.

With ``memory.coherence.enabled`` (the default) the job's process runs the job's coherence
directory (``memory/coherence/directory.py``) over the job's bus, storing through the job's
``board/nodes.JobNodeStore`` (L0 revisions, then the board), and two caches of its own: one
that ingestion writes through (its ``BoardWriter``, awaited on this event loop), one that this
process's agents read their views through (``coherence/views.CoherentViews``). So an agent's
briefing is built from lines that are current, and between turns an agent is shown what
teammates recorded since it last looked, changed nodes only (``BoardViews.updates``). A
``gliding worker`` running one of the job's sessions opens a cache of its own
(``worker_views``) and reads the same lines over the broker.

Agent ids carry a random suffix per process incarnation, so a restarted job never takes
messages meant for its predecessor; a resumed job's directory waits one lease before answering
(``Directory.grace_s``), so lines its predecessor granted have expired.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import structlog

from gliding.bus.port import Bus
from gliding.config.settings import Settings
from gliding.errors import GlidingError
from gliding.memory.board.nodes import JobNodeStore
from gliding.memory.coherence.cache import Cache
from gliding.memory.coherence.directory import Directory
from gliding.memory.coherence.views import CoherentViews

log = structlog.get_logger("gliding.daemon")

UPDATE_HEADING = "Blackboard update (recorded by the team since you last looked):"


@dataclass
class BoardViews:
    """A job's blackboard as this process's agents see it, through one cache."""

    job: str
    views: CoherentViews
    budget_tokens: int
    # the directory did not answer once: briefings come from the board from then on
    failed: bool = field(default=False, kw_only=True)

    @property
    def graph(self) -> str:
        return f"gliding://job/{self.job}"

    async def briefing(self, role: str) -> str | None:
        """The role's view through the cache; None when it cannot be built (the caller falls
        back to the board), and from then on without asking again."""
        if self.failed:
            return None
        try:
            return await self.views.briefing(role, self.graph, self.budget_tokens)
        except GlidingError as exc:
            self.failed = True
            log.warning("coherence.view.failed", job=self.job, role=role, error=exc.message)
            return None

    def updates(self, session: str, role: str, briefing: str) -> Callable[[], Awaitable[str]]:
        """What an agent session is shown between turns: "" when nothing changed since it last
        looked (``briefing``, its system prompt's board part, the first time), else the new
        and changed lines under ``UPDATE_HEADING``. After a failure (the directory did not
        answer) the session gets no more updates, so a lost directory costs it one wait."""
        self.views.shown(session, briefing)
        broken = False

        async def update() -> str:
            nonlocal broken
            if broken or self.failed or self.budget_tokens <= 0:
                return ""
            try:
                text = await self.views.update(session, role, self.graph, self.budget_tokens)
            except GlidingError as exc:
                broken = True
                log.warning("coherence.view.failed", job=self.job, role=role, error=exc.message)
                return ""
            return f"{UPDATE_HEADING}\n{text}" if text else ""

        return update

    def end(self, session: str) -> None:
        self.views.forget(session)


@dataclass
class JobBoard(BoardViews):
    """The job's process's side: its directory and the cache ingestion writes through."""

    directory: Directory
    writer: Cache


@asynccontextmanager
async def job_board(bus: Bus, store: JobNodeStore, settings: Settings,
                    count: Callable[[str], int], *,
                    resumed: bool) -> AsyncIterator[JobBoard | None]:
    """The directory of the job whose nodes ``store`` keeps and this process's caches while
    the context runs; None when ``memory.coherence.enabled`` is off."""
    config = settings.memory.coherence
    if not config.enabled:
        yield None
        return
    lease, job = config.lease_s, store.job
    directory = Directory(bus, store, job, lease_s=lease, grace_s=lease if resumed else 0.0)
    nonce = secrets.token_hex(4)
    # "@": no worker's name (bus/auth.py), so no worker can speak for the job's own caches
    writer = Cache(bus, job, f"@ingest.{nonce}", lease_s=lease, timeout_s=3 * lease)
    reader = Cache(bus, job, f"@agents.{nonce}", lease_s=lease, timeout_s=2 * lease, tries=1)
    async with anyio.create_task_group() as tg:
        await tg.start(directory.serve)
        await tg.start(writer.serve)
        await tg.start(reader.serve)
        views = CoherentViews(reader, count)
        await tg.start(views.serve)
        yield JobBoard(job, views, settings.memory.recall.briefing_tokens, directory, writer)
        tg.cancel_scope.cancel()


@asynccontextmanager
async def worker_views(bus: Bus, job: str, agent: str, lease_s: float, settings: Settings,
                       count: Callable[[str], int]) -> AsyncIterator[BoardViews | None]:
    """A worker's cache of ``job``'s board (the job's process serves the directory, whose lease
    is ``lease_s``), as ``agent`` (unique per worker process and session); None when coherence
    is off here. At the end the cache tells the directory it is gone (``depart``), so writes
    of the lines it held need not wait for its lease."""
    if not settings.memory.coherence.enabled:
        yield None
        return
    # one try, past the grace of a restarting directory: a lost job costs a session one wait
    cache = Cache(bus, job, agent, lease_s=lease_s, timeout_s=2 * lease_s, tries=1)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(cache.serve)
            views = CoherentViews(cache, count)
            await tg.start(views.serve)
            yield BoardViews(job, views, settings.memory.recall.briefing_tokens)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await cache.leave()
