"""Process-lifetime resources, opened once and shared by every job the process runs.

    board      the blackboard (L2): ``memory.blackboard.url``'s SPARQL endpoint, else the data
               directory's embedded Oxigraph store; None when it cannot be opened
    knowledge  long-term memory over the board, with what earlier jobs wrote indexed (words and
               graph at once; the embedder and its vector cache load lazily, once, on the
               first recall of any job)
    projector  L3 briefings, with a view cache every job's writes invalidate
    counter    the cl100k token counter

``open_bus`` gives the bus of ``bus.url``: an MQTT 5 broker's, or one inside the process.

Opening (``Runtime.open``, an async context) loads the knowledge index on a worker thread;
leaving the context closes everything once (``close``, on a worker thread). This module and
``compose`` are the composition root: the only places that pick backends.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import anyio
import structlog

from gliding.bus.auth import (
    WORKER_PREFIX,
    BusAuth,
    auth_for,
    owner,
    read_key_file,
    root_auth,
)
from gliding.bus.inproc import InProcessBus
from gliding.bus.port import Bus
from gliding.config.roles import entry
from gliding.config.settings import Settings
from gliding.context.tokens import TokenCounter
from gliding.errors import GlidingError
from gliding.memory.archive.store import open_for_iri
from gliding.memory.board.blackboard import Blackboard
from gliding.memory.board.projection import Projector
from gliding.memory.recall.access import MemoryAccess
from gliding.memory.recall.access_log import ACCESS_FILE, AccessLog
from gliding.memory.recall.knowledge import (
    Embedder,
    KnowledgeMemory,
    VectorIndex,
    load_embedder,
)
from gliding.memory.recall.vector_cache import CACHE_FILE, CachedEmbedder

log = structlog.get_logger("gliding.daemon")

BOARD_HEADING = "Blackboard (what the team recorded so far):"
AROUND_HEADING = "Found so far (facts around your task; read_result reads a source back):"
REACH_TIMEOUT_S = 5.0  # a SPARQL endpoint that does not answer ASK {} in this is unreachable


@dataclass
class Runtime:
    settings: Settings
    counter: TokenCounter
    board: Blackboard | None = None
    knowledge: KnowledgeMemory | None = None
    projector: Projector | None = None

    @classmethod
    @asynccontextmanager
    async def open(cls, settings: Settings) -> AsyncIterator[Runtime]:
        """The resources of one process; closed when the context ends. A blackboard that
        cannot be opened or reached is logged and left out (nothing is raised for it).

        Raises:
            GlidingError: the token counter's encoding cannot be loaded.
        """
        # the first counter of a process loads tiktoken's encoding: ~0.2 s of CPU
        counter = await anyio.to_thread.run_sync(TokenCounter, settings.context.tokenizer)
        runtime = cls(settings, counter)
        board = await anyio.to_thread.run_sync(open_blackboard, settings)
        if board is not None:
            runtime.board = board
            runtime.knowledge = await anyio.to_thread.run_sync(
                open_knowledge, board, settings, counter.count)
            runtime.projector = Projector(board, counter.count)
        try:
            yield runtime
        finally:
            await anyio.to_thread.run_sync(runtime.close)

    def access(self) -> MemoryAccess | None:
        """Long-term memory as the tools use it (None without a blackboard)."""
        if self.knowledge is None:
            return None
        return MemoryAccess(self.knowledge, self.counter.count,
                            self.settings.memory.recall.budget_tokens)

    def briefing(self, role: str, job: str, goal: str, *, board: str | None = None,
                 focus: str = "") -> str:
        """The role's L3 view of the job's blackboard graph (``board`` when the caller built it
        already, through the coherence caches); the facts the job found around ``focus`` (the
        role's task: its goal and instructions), shaped by the role's frame; and for a plan
        role (PA) what earlier jobs recorded about the goal. "" when there is nothing (no
        board, nothing yet, or it failed). Blocking: call it on a worker thread."""
        budget = self.settings.memory.recall.briefing_tokens
        if self.projector is None or budget <= 0:
            return ""
        graph = f"gliding://job/{job}"
        parts = []
        try:
            text = board if board is not None else self.projector.briefing(role, graph, budget)
            if text:
                parts.append(f"{BOARD_HEADING}\n{text}")
        except GlidingError as exc:
            log.warning("blackboard.projection.failed", job=job, role=role, error=exc.message)
        try:
            found = self.projector.around(role, graph, focus or goal, budget // 2)
        except GlidingError as exc:
            log.warning("blackboard.around.failed", job=job, role=role, error=exc.message)
        else:
            if found:
                parts.append(f"{AROUND_HEADING}\n{found}")
        if entry(role).phase == "plan" and self.knowledge is not None:
            try:
                earlier = self.knowledge.brief(goal, budget // 2, exclude_graphs=[graph])
            except GlidingError as exc:
                log.warning("knowledge.brief.failed", job=job, error=exc.message)
            else:
                if earlier.text:
                    parts.append(f"Earlier jobs (long-term memory):\n{earlier.text}")
        return "\n\n".join(parts)

    def close(self) -> None:
        if self.knowledge is not None:
            self.knowledge.close()
            self.knowledge = None
        if self.board is not None:
            self.board.close()
            self.board = None
        self.projector = None


@asynccontextmanager
async def open_bus(settings: Settings, *, client_id: str | None = None,
                   worker: str | None = None) -> AsyncIterator[Bus]:
    """The bus ``bus.url`` names: an MQTT 5 broker's, else one in this process; closed when
    the context ends. On a broker with ``bus.auth``, it signs as the root (the job's or
    daemon's process: the root key is made when there is none) or, given ``worker`` (a
    worker's name, ``bus/auth.py``), as that worker.

    Raises:
        BusError: the broker cannot be reached within ``bus.connect_timeout_s`` (or, with
            ``mqtts://``, its certificate does not check against ``bus.ca_file``), the URL is
            not ``mqtt://host:port`` or ``mqtts://host:port``, or the bus key is missing (a
            worker), unreadable or readable by others.
    """
    if settings.bus.url is None:
        async with InProcessBus() as local:
            yield local
        return
    from gliding.bus.mqtt import MQTTBus

    auth = await anyio.to_thread.run_sync(bus_auth, settings, worker)
    async with MQTTBus.from_settings(settings.bus, client_id=client_id, auth=auth) as remote:
        yield remote


def bus_key_path(settings: Settings) -> Path:
    return settings.bus.key_file or settings.data_dir / "bus.key"


def bus_auth(settings: Settings, worker: str | None = None) -> BusAuth | None:
    """What a bus connection signs and checks with (None: ``bus.auth`` is off).

    Raises:
        BusError: a worker without a bus key, or a key file that is not one or that others
            can read.
    """
    if not settings.bus.auth:
        return None
    path = bus_key_path(settings)
    if worker is None:
        return root_auth(path)
    ring = read_key_file(path)
    ring.as_worker(owner(worker))  # a worker key signs only for its own name
    return auth_for(ring, WORKER_PREFIX + owner(worker))


def read_result(data_dir: Path, iri: str) -> str | None:
    """The archived text of a tool result of any job of ``data_dir`` (what recall reads answer
    lines from); None when it is not a result's.

    Raises:
        GlidingError: the IRI is not Gliding's, or the archive cannot be read.
    """
    archive, parsed = open_for_iri(data_dir, iri)
    with archive:
        if parsed.kind != "result":
            return None
        return archive.get(str(parsed)).text()


def blackboard_path(data_dir: Path) -> Path:
    """The embedded blackboard store every job of a data directory shares."""
    return data_dir / "blackboard"


def open_blackboard(settings: Settings) -> Blackboard | None:
    """The blackboard every job shares: the SPARQL endpoint of ``memory.blackboard.url``, else
    the data directory's embedded store; None (with a log line) when it cannot be opened or
    reached, e.g. because another process holds the embedded store or the endpoint does not
    answer: L2 is optional for a job, and a job without it is not offered the knowledge
    tools."""
    url = settings.memory.blackboard.url
    try:
        if url:
            from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard

            endpoint = SparqlEndpointBlackboard.for_oxigraph(url)
            try:
                endpoint.query("ASK { }", timeout_s=REACH_TIMEOUT_S)  # reachable at all?
            except GlidingError:
                endpoint.close()
                raise
            return endpoint
        from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard

        return OxigraphBlackboard.open(blackboard_path(settings.data_dir))
    except GlidingError as exc:
        log.warning("blackboard.unavailable", error=exc.message, url=url)
        return None


def open_knowledge(board: Blackboard, settings: Settings,
                   count: Callable[[str], int]) -> KnowledgeMemory:
    """Knowledge memory over ``board``, with what earlier jobs wrote already indexed (words and
    graph now; embeddings, per ``memory.vectors``, on the first recall)."""
    vectors = settings.memory.vectors
    embedder_factory = vector_index_factory = None
    if vectors.enabled:
        def embedder_factory() -> Embedder | None:
            embedder = load_embedder(precision=vectors.precision)
            if embedder is None:
                return None
            cache = CachedEmbedder(embedder, settings.data_dir / CACHE_FILE)
            return cast(Embedder, cache)  # the same encode/dim contract

        if vectors.url:
            def vector_index_factory(dim: int) -> VectorIndex | None:
                from gliding.memory.backends.qdrant_vectors import open_qdrant_index

                return open_qdrant_index(vectors.url, collection=vectors.collection, dim=dim)
    try:
        access_log: AccessLog | None = AccessLog(settings.data_dir / ACCESS_FILE)
    except GlidingError as exc:  # a ranking hint: recall works without it, counting in memory
        log.warning("recall.access.unavailable", error=exc.message)
        access_log = None
    knowledge = KnowledgeMemory(board, count, embedder_factory=embedder_factory,
                                vector_index_factory=vector_index_factory,
                                access_log=access_log,
                                sources=functools.partial(read_result, settings.data_dir))
    try:
        loaded = knowledge.load()
        used = knowledge.restore_access()
    except GlidingError as exc:
        log.warning("knowledge.load.failed", error=exc.message)
    else:
        log.debug("knowledge.loaded", items=loaded, with_use_counts=used)
    return knowledge
