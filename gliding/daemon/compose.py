"""Wire one job: pick the model backend, open the job's L0 archive, start an in-process bus,
load the roles and tool groups, run the supervisor, and stream progress events to a callback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import structlog

from gliding.agents.roles import load_roles
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import JobEvent
from gliding.config.settings import Settings
from gliding.config.task import Task
from gliding.context.tokens import TokenCounter
from gliding.core.budget import Limits
from gliding.core.clock import Clock, SystemClock
from gliding.core.ids import new_job_id
from gliding.errors import GlidingError, UsageError
from gliding.llm.port import LLM, backend_kind
from gliding.memory.archive import Archive, archive_path
from gliding.memory.blackboard import Blackboard
from gliding.memory.ingest import Ingestor
from gliding.memory.knowledge import KnowledgeMemory
from gliding.memory.projection import Projector
from gliding.memory.vector_cache import CACHE_FILE, CachedEmbedder
from gliding.memory.vectors import Embedder, VectorIndex, load_embedder
from gliding.scheduler.runner import JobReport, JobRunner, JobSpec
from gliding.tools.base import ToolGroupManager, builtin_groups

log = structlog.get_logger("gliding.daemon")


def build_llm(model: str, settings: Settings) -> LLM:
    """The backend a model string names: ``local``, ``local:<gguf>`` or a litellm string."""
    kind = backend_kind(model)
    if kind == "local":
        from gliding.llm.local import LocalLLM

        path = Path(model.split(":", 1)[1]).expanduser() if ":" in model else None
        return LocalLLM(settings.llm.local, path)
    if kind == "scripted":
        raise UsageError("the scripted model exists for tests only",
                         hint="pass a ScriptedLLM to run_job(llm=...)")
    from gliding.llm.hosted import HostedLLM

    return HostedLLM(model, timeout_s=settings.llm.timeout_s)


@dataclass(frozen=True)
class JobHandle:
    report: JobReport
    archive: Path
    model: str


async def run_job(task: Task, settings: Settings, *, model: str | None = None,
                  llm: LLM | None = None, on_event: Callable[[JobEvent], None] | None = None,
                  clock: Clock | None = None, job_id: str | None = None) -> JobHandle:
    """Run ``task`` to its outcome. Model precedence: ``llm`` > ``model`` > task > settings."""
    chosen = model or task.model or settings.llm.model
    backend = llm or build_llm(chosen, settings)
    roles = load_roles()
    clock = clock or SystemClock()
    job = job_id or new_job_id(clock.now())
    spec = JobSpec(job=job, goal=task.goal, workspace=task.workspace.resolve(),
                   checks=tuple(task.checks), pipeline=task.pipeline,
                   limits=Limits(turns=dict(task.turns), prompt_tokens=task.prompt_tokens,
                                 cost_usd=task.cost_usd, wall_time_s=task.wall_time_s))
    bus = InProcessBus()
    with Archive.open(settings.data_dir, job) as archive:  # first: a bad data dir writes nothing
        try:
            task.workspace.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create workspace {task.workspace}: {exc}") from exc
        archive.set_meta("task", str(task.source))
        archive.set_meta("model", backend.name)
        board = open_blackboard(settings)
        projector = ingestor = knowledge = None
        if board is not None:
            counter = TokenCounter(settings.context.tokenizer)
            knowledge = open_knowledge(board, settings, counter.count)
            projector = Projector(board, counter.count)
            ingestor = Ingestor(knowledge.board, archive, job, on_write=projector.invalidate)
        runner = JobRunner(spec, settings=settings, llm=backend, archive=archive, bus=bus,
                           roles=roles, tools=ToolGroupManager(builtin_groups()), clock=clock,
                           ingestor=ingestor, projector=projector, knowledge=knowledge)
        async with bus.subscribe(f"job/{job}/events", max_buffer=1000) as events:
            async with anyio.create_task_group() as tg:
                if on_event is not None:
                    tg.start_soon(_forward, events, on_event)
                try:
                    report = await runner.run()
                finally:
                    tg.cancel_scope.cancel()
                    if knowledge is not None:
                        knowledge.close()
                    if board is not None:
                        board.close()
    await bus.aclose()
    return JobHandle(report, archive_path(settings.data_dir, job), backend.name)


def blackboard_path(data_dir: Path) -> Path:
    """The embedded blackboard store every job of a data directory shares."""
    return data_dir / "blackboard"


def open_blackboard(settings: Settings) -> Blackboard | None:
    """The blackboard every job shares: the SPARQL endpoint of ``memory.blackboard.url``, else
    the data directory's embedded store; None (with a log line) when it cannot be opened, e.g.
    because another running job holds the embedded store: L2 is optional for a job."""
    url = settings.memory.blackboard.url
    try:
        if url:
            from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard

            return SparqlEndpointBlackboard.for_oxigraph(url)
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
    knowledge = KnowledgeMemory(board, count, embedder_factory=embedder_factory,
                                vector_index_factory=vector_index_factory)
    try:
        loaded = knowledge.load()
    except GlidingError as exc:
        log.warning("knowledge.load.failed", error=exc.message)
    else:
        log.debug("knowledge.loaded", items=loaded)
    return knowledge


async def _forward(events: Any, on_event: Callable[[JobEvent], None]) -> None:
    while True:
        _topic, event = await events.receive()
        on_event(event)
