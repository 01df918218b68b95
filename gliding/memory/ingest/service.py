"""Ingestion as a bus subscriber: what a job's agents say and archive becomes blackboard nodes.

``IngestService.serve`` listens to ``job/<job>/#`` and hands each message to the job's
``Ingestor``, one message at a time, in order (its writes are awaited on the event loop; what
blocks runs on worker threads):

    JobEvent job.started / job.finished   the Job node (with its outcome at the end)
    Assignment                            nothing; ``caught_up`` waits for it to be reached,
                                          so a role's briefing shows what came before
    PlanMsg                               Plan and Step nodes
    ArtifactMsg                           an Artifact node per file DA wrote, when it wrote it
    CheckReportMsg                        a CheckReport node per verdict
    DecisionMsg                           the Decision node
    ArchivedMsg                           the Turn or ToolResult node (content read from L0),
                                          with the files, symbols and errors it names

An ingestion failure is logged and never stops the job. ``catch_up`` (a resumed job) writes
to the board what an earlier run archived but did not get there: every node's latest revision
(``JobNodeStore.mend``), and a node for each archived turn and result that has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from gliding.bus import topics
from gliding.bus.messages import (
    ArchivedMsg,
    ArtifactMsg,
    Assignment,
    BusMessage,
    CheckReportMsg,
    DecisionMsg,
    JobEvent,
    PlanMsg,
)
from gliding.bus.port import Bus
from gliding.core.iri import record_iri
from gliding.core.text import one_line
from gliding.errors import GlidingError
from gliding.memory.archive.records import ArchivedItem
from gliding.memory.archive.store import Archive
from gliding.memory.board.nodes import JobNodeStore, latest_revisions
from gliding.memory.ingest.ingestor import Ingestor

log = structlog.get_logger("gliding.memory")


@dataclass(frozen=True)
class _Result:
    """A tool result as ``Ingestor.tool_result`` reads it, rebuilt from L0."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    output: str
    iri: str


class IngestService:
    """Feeds one job's bus traffic into its blackboard graph."""

    def __init__(self, ingestor: Ingestor, archive: Archive, goal: str) -> None:
        self.ingestor, self.archive, self.goal = ingestor, archive, goal
        self.ingested = 0
        self.failed = 0
        self.done = anyio.Event()
        self._assignments: dict[tuple[str, int, int, int], anyio.Event] = {}

    async def serve(self, bus: Bus, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe, report ready, then ingest every message of the job in order; return
        after the job's ``job.finished`` event (the last thing a job says), setting
        ``done``."""
        job = self.ingestor.job
        async with bus.subscribe(topics.everything(job), max_buffer=10_000) as inbox:
            task_status.started()
            while True:
                _topic, message = await inbox.receive()
                await self.handle(message)
                if isinstance(message, Assignment):
                    self._reached(message).set()
                if isinstance(message, JobEvent) and message.event == "job.finished":
                    self.done.set()
                    return

    def _reached(self, a: Assignment) -> anyio.Event:
        return self._assignments.setdefault((a.role, a.cycle, a.attempt, a.turn_base),
                                            anyio.Event())

    async def caught_up(self, assignment: Assignment, timeout_s: float = 10.0) -> bool:
        """Wait until everything published before ``assignment`` is on the board (ingestion
        is in order, so having reached the assignment means that); False on timeout."""
        with anyio.move_on_after(timeout_s):
            await self._reached(assignment).wait()
            return True
        log.warning("blackboard.ingest.behind", job=self.ingestor.job, role=assignment.role)
        return False

    async def handle(self, message: BusMessage) -> None:
        """Ingest one message; failures are logged, never raised."""
        try:
            await self._ingest(message)
        except GlidingError as exc:
            self.failed += 1
            log.warning("blackboard.ingest.failed", job=self.ingestor.job, what=message.type,
                        error=exc.message)
        else:
            self.ingested += 1

    async def _ingest(self, m: BusMessage) -> None:
        ing = self.ingestor
        if isinstance(m, JobEvent):
            if m.event == "job.started":
                await ing.job_node(self.goal)
            elif m.event == "job.finished":
                await ing.job_node(self.goal, str(m.data.get("outcome") or "") or None)
        elif isinstance(m, PlanMsg):
            await ing.plan(m.cycle, m.steps, m.turn_iri)
        elif isinstance(m, ArtifactMsg):
            for path in m.written:
                await ing.artifact(path, str(record_iri(ing.job, "artifact", path)))
        elif isinstance(m, CheckReportMsg):
            await ing.check_report(m.cycle, m.attempt, m.results)
        elif isinstance(m, DecisionMsg):
            await ing.decision(m.cycle, m.decision, m.report)
        elif isinstance(m, ArchivedMsg):
            if m.kind == "turn":
                await ing.turn(m.role, m.turn, m.iri, m.summary)
            else:
                result = await anyio.to_thread.run_sync(self._result, m.iri)
                await ing.tool_result(result, m.turn_iri or None)

    def _result(self, iri: str) -> _Result:
        item = self.archive.get(iri)
        meta = item.meta
        args = meta.get("arguments")
        return _Result(str(meta.get("tool", "?")), args if isinstance(args, dict) else {},
                       bool(meta.get("ok")), item.text(), iri)

    async def catch_up(self, store: JobNodeStore) -> tuple[int, int]:
        """Write what an earlier run of the job archived but may not have put on the board:
        ``store`` (the job's) puts every node's newest revision again, then each archived turn
        and result without a node gets one. Returns (nodes put again, turns and results
        ingested). Failures are logged.

        Raises:
            ArchiveError: the archive cannot be read.
        """
        ing = self.ingestor
        await anyio.to_thread.run_sync(ing.restore)
        rewritten = await anyio.to_thread.run_sync(store.mend)
        latest = await anyio.to_thread.run_sync(latest_revisions, self.archive)
        listed = await anyio.to_thread.run_sync(self._archived)
        added = 0
        for item in listed:
            if item.iri in latest:
                continue
            try:
                if item.kind == "turn":
                    role, n = str(item.meta.get("role", "?")), int(item.meta.get("turn", 0))
                    body = await anyio.to_thread.run_sync(self._text, item.iri)
                    await ing.turn(role, n, item.iri, _turn_line(body))
                else:
                    turn = f"gliding://job/{ing.job}/turn/{item.meta.get('role')}/" \
                           f"{item.meta.get('turn')}"
                    result = await anyio.to_thread.run_sync(self._result, item.iri)
                    await ing.tool_result(result, turn)
                added += 1
            except (GlidingError, ValueError) as exc:
                log.warning("blackboard.catch_up.failed", job=ing.job, iri=item.iri,
                            error=str(exc))
        log.info("blackboard.caught_up", job=ing.job, nodes=rewritten, items=added)
        return rewritten, added

    def _archived(self) -> list[ArchivedItem]:
        return [*self.archive.list(kind="turn"), *self.archive.list(kind="result")]

    def _text(self, iri: str) -> str:
        return self.archive.get(iri).text()


def _turn_line(body: str) -> str:
    """One line for an archived turn: its tool call, or the start of its text."""
    reply = (json.loads(body).get("reply") or {}) if body else {}
    for c in reply.get("tool_calls") or ():
        return one_line(f"{c['function']['name']}({c['function'].get('arguments', '')})", 160)
    return one_line(str(reply.get("content") or "(empty)"), 160)
