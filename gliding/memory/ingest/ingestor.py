"""Ingestion: what a job produces becomes blackboard nodes, one named graph per job, and every
revision of a node is kept in L0.

Nodes written (vocabulary in docs/vocabulary.md; <path> and <name> percent-encoded):

    Job          gliding://job/<job>                         name = the goal
    Plan, Step   gliding://job/<job>/plan/<cycle>[/step/<id>] partOf the job / the plan; a step
                                                              dependsOn the steps it needs and,
                                                              once a step DA works on it,
                                                              doneBy that session's turns
    Artifact     gliding://job/<job>/artifact/<path>          produced by the job
    CheckReport  gliding://job/<job>/check/<cycle>.<attempt>/<i>  about the artifact it checks
    Decision     gliding://job/<job>/decision/<cycle>
    Turn         gliding://job/<job>/turn/<session>/<n>       the L0 turn; role, summary
    ToolResult   gliding://job/<job>/result/<call>            the L0 result; name = the tool,
                                                              status ok/error, summary (with
                                                              ids), derivedFrom the turn,
                                                              mentions its entities
    File         gliding://job/<job>/file/<path>              path
    Symbol       gliding://job/<job>/symbol/<path>#<name>     name, path, line; partOf the File
                 gliding://job/<job>/symbol/<name>            (file unknown)
    Error        gliding://job/<job>/error/<sha256(text)[:16]>  text

A plan's steps are the PlanSteps of its PlanMsg (plain strings: step ``<i>`` depending on step
``<i-1>``). A turn of a step session (``turn/DA.<cycle>.<step>/<n>``, ``core.iri``) adds itself
to that step's ``doneBy`` and makes the step ``doing``; the turn whose summary is that of an
accepted finish (``finish(...) → finished``, as the agent loop writes it) makes it ``done``.

Entities come from ``entities.extract``. One that does not validate is skipped (and logged),
never the result or the other entities. An entity seen again is merged with what was written
before (relations united, literals kept unless the new sighting gives them), so it stays one node.

A revision is archived as JSON-LD (with the inline @context) under
``gliding://job/<job>/node/<kind>/<name>/<revision>``; putting an unchanged node again writes
nothing new.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol
from urllib.parse import quote

import structlog

from gliding.bus.messages import PlanStep
from gliding.core.crashpoints import crash_point
from gliding.core.iri import hashed_segment, parse_iri, parse_step_session, record_iri
from gliding.core.text import one_line
from gliding.errors import GlidingError
from gliding.memory.archive.records import ArchivedItem
from gliding.memory.archive.store import Archive
from gliding.memory.board.blackboard import Blackboard, sparql_iri
from gliding.memory.board.vocabulary import (
    NS,
    PROPERTIES,
    VocabularyError,
    from_jsonld,
    to_jsonld,
    validate_node,
)
from gliding.memory.ingest.entities import Entities, extract

log = structlog.get_logger("gliding.memory")

SUMMARY_CHARS = 300
MAX_SEGMENT_CHARS = 200  # what core.iri.parse_iri (and so the archive) accepts in a segment
SUMMARY_IDS = 5


class ToolCall(Protocol):
    """One tool call as the agent loop records it (``agents.loop.ToolRecord``)."""

    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> Mapping[str, Any]: ...
    @property
    def ok(self) -> bool: ...
    @property
    def output(self) -> str: ...
    @property
    def iri(self) -> str: ...


class Verdict(Protocol):
    """One check verdict as the CA reports it (``bus.messages.CheckOutcome``)."""

    @property
    def check(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def evidence(self) -> str: ...
    @property
    def path(self) -> str | None: ...


class Ingestor:
    """Writes one job's nodes into the blackboard and their revisions into the job's archive."""

    def __init__(self, board: Blackboard, archive: Archive, job: str,
                 on_write: Callable[[str, str], object] | None = None,
                 writer: Callable[[str, str], int] | None = None) -> None:
        """``writer(iri, jsonld) -> revision``: write through the coherence directory instead
        (``coherence/nodes.py`` archives the revision and puts the node; the call returns once
        the write is acknowledged). Nodes of a type in ``INDEXED`` also update their type's
        index line when first written."""
        self.board = board
        self.writer = writer
        self.on_write = on_write  # e.g. Projector.invalidate: views that used a node go stale
        self.archive = archive
        self.job = job
        self.job_iri = f"gliding://job/{job}"
        self.graph = self.job_iri
        self._revisions: dict[str, tuple[int, str]] = {}  # node IRI -> (revision, sha256)
        self._entities: dict[str, dict[str, Any]] = {}  # entity IRI -> last node written
        self._queue: list[Mapping[str, Any]] | None = None  # inside batch(): board writes
        self._undo: dict[str, tuple[int, str] | None] = {}  # inside batch(): revisions before
        self._unwritten: set[str] = set()  # archived, not (yet) on the board
        self._steps: dict[str, dict[str, Any]] = {}  # step IRI -> its node as last put

    def put(self, node: Mapping[str, Any]) -> str:
        """Validate ``node``, archive its revision in L0 when its content changed, then write
        it to the blackboard (inside ``batch``: once the batch's revisions are committed).

        A node whose board write failed is written again by the next ``put`` of it, even
        unchanged (its revision is in L0 already). Raises VocabularyError, ArchiveError (nothing
        written) or BlackboardError (the revision is archived, the board write will be retried).
        """
        crash_point("ingest.write")
        text = to_jsonld(node)
        digest = hashlib.sha256(text.encode()).hexdigest()
        iri = str(node["@id"])
        if self.writer is not None:
            return self._put_coherent(node, iri, text, digest)
        revision, last = self._revisions.get(iri, (0, ""))
        if digest != last:
            revision += 1
            self.archive.put(self._revision_iri(iri, revision), text, kind="node",
                             media_type="application/ld+json", meta={"node": iri})
            if self._queue is not None:
                self._undo.setdefault(iri, self._revisions.get(iri))
            self._revisions[iri] = (revision, digest)
            self._unwritten.add(iri)
        elif iri not in self._unwritten:
            return iri
        if self._queue is not None:
            self._queue.append(node)
        else:
            self._write(node)
        return iri

    @contextmanager
    def batch(self) -> Iterator[Ingestor]:
        """Ingest a block of nodes at once: their revisions go to L0 in one transaction, and
        the nodes to the blackboard after it commits (L0 first, so the board never holds a
        node whose revision is not archived). If the block raises, nothing of it is written.
        After the commit every queued node is written even if one fails (the first failure is
        raised at the end; failed nodes are retried by their next put). Nested blocks join the
        outer one."""
        if self._queue is not None:
            yield self
            return
        if self.writer is not None:
            yield from self._batch_coherent()
            return
        self._queue, self._undo = [], {}
        entities, unwritten = dict(self._entities), set(self._unwritten)
        try:
            with self.archive.batch():
                yield self
        except BaseException:
            for iri, previous in self._undo.items():
                if previous is None:
                    self._revisions.pop(iri, None)
                else:
                    self._revisions[iri] = previous
            self._entities, self._unwritten = entities, unwritten
            self._queue = None
            raise
        queued, self._queue = self._queue, None
        _write_all(queued, self._write)

    def _put_coherent(self, node: Mapping[str, Any], iri: str, text: str, digest: str) -> str:
        """``put`` through ``writer``: the directory numbers the revision; nothing is written
        here, and an unchanged node is not written at all."""
        assert self.writer is not None
        known = self._revisions.get(iri)
        if known is not None and known[1] == digest:
            return iri
        if self._queue is not None:
            self._queue.append(node)
            return iri
        revision = self.writer(iri, text)
        kind = str(node.get("@type"))
        if known is None and kind in INDEXED and "partOf" in node:
            # the members as the board holds them now (this node, any resumed job's, any
            # whose index write failed before), so one failure is mended by the next member
            members = sorted({*index_members(self.board, self.graph, kind), iri})
            self.writer(index_iri(self.graph, kind), json.dumps(members))
        self._revisions[iri] = (revision, digest)  # after the index: a failure writes it again
        if self.on_write is not None:
            self.on_write(iri, kind)
        return iri

    def _batch_coherent(self) -> Iterator[Ingestor]:
        """``batch`` through ``writer``: the block's nodes are written after it, one by one (a
        block that raises writes nothing; the first failure is raised at the end)."""
        self._queue = []
        try:
            yield self
        except BaseException:
            self._queue = None
            raise
        queued, self._queue = self._queue, None
        _write_all(queued, self.put)

    def _write(self, node: Mapping[str, Any]) -> None:
        iri = str(node["@id"])
        self.board.put(node, graph=self.graph)
        self._unwritten.discard(iri)
        if self.on_write is not None:
            self.on_write(iri, str(node.get("@type")))

    def job_node(self, goal: str, status: str | None = None) -> str:
        node: dict[str, Any] = {"@id": self.job_iri, "@type": "Job", "name": goal}
        if status:
            node["status"] = status
        return self.put(node)

    def plan(self, cycle: int, steps: Sequence[str | PlanStep], turn_iri: str | None) -> str:
        """The Plan node of ``cycle`` and a Step node per step (a plain string: step ``<i>``,
        depending on the one before)."""
        plan_iri = f"{self.job_iri}/plan/{cycle}"
        node: dict[str, Any] = {"@id": plan_iri, "@type": "Plan", "partOf": self.job_iri}
        if turn_iri:
            node["derivedFrom"] = [turn_iri]
        self.put(node)
        for i, item in enumerate(steps, 1):
            if isinstance(item, str):
                sid, text, needs = str(i), item, [str(i - 1)] if i > 1 else []
            else:
                sid, text, needs = item.id, item.text, list(item.depends_on)
            step: dict[str, Any] = {"@id": _step_iri(plan_iri, sid), "@type": "Step",
                                    "text": text, "partOf": plan_iri, "status": "todo"}
            if needs:
                step["dependsOn"] = [_step_iri(plan_iri, d) for d in needs]
            self._steps[self.put(step)] = step
        return plan_iri

    def artifact(self, path: str, archived_iri: str) -> str:
        return self.put({"@id": archived_iri, "@type": "Artifact", "path": path,
                         "partOf": self.job_iri})

    def check_report(self, cycle: int, attempt: int, results: Sequence[Verdict]) -> list[str]:
        out = []
        for i, r in enumerate(results, 1):
            about = self.job_iri
            if isinstance(r.path, str):
                about = f"{self.job_iri}/artifact/{quote(r.path, safe='')}"
            out.append(self.put({
                "@id": f"{self.job_iri}/check/{cycle}.{attempt}/{i}", "@type": "CheckReport",
                "status": r.status, "about": [about], "text": r.check,
                "summary": r.evidence[:500], "partOf": self.job_iri}))
        return out

    def restore(self) -> int:
        """Take up what an earlier run of this job archived (a resumed job): each node's last
        revision, so an unchanged node is not archived again, and the entities as last
        written, so a later sighting merges with them; returns how many nodes it knew.

        Raises:
            ArchiveError: the archive cannot be read.
        """
        for node, (revision, item) in latest_revisions(self.archive).items():
            if revision >= self._revisions.get(node, (0, ""))[0]:
                self._revisions[node] = (revision, item.sha256)
            entity = any(f"{self.job_iri}/{kind}/" in node for kind in ("file", "symbol",
                                                                          "error"))
            step = node.startswith(f"{self.job_iri}/plan/") and "/step/" in node
            if entity or step:
                try:
                    last = from_jsonld(self.archive.get(item.iri).text())
                except VocabularyError:
                    continue  # a damaged revision: the next sighting starts the node afresh
                (self._entities if entity else self._steps)[node] = last
        return len(self._revisions)

    def decision(self, cycle: int, decision: str, report: str) -> str:
        return self.put({"@id": f"{self.job_iri}/decision/{cycle}", "@type": "Decision",
                         "status": decision, "text": report or decision,
                         "partOf": self.job_iri})

    def turn(self, role: str, n: int, iri: str, summary: str) -> str:
        """The Turn node of one LLM turn, at its L0 IRI; a step session's turn is also
        recorded on its step (``doneBy``, ``status``)."""
        self._own(iri)
        parts = parse_iri(iri).parts
        session = parse_step_session(parts[0]) if parts else None
        if session is not None:
            role = session[0]  # the role, whichever name the caller had for the session
        out = self.put({"@id": iri, "@type": "Turn", "role": role,
                        "summary": _one_line(summary, SUMMARY_CHARS) or f"{role} turn {n}",
                        "partOf": self.job_iri})
        if session is not None:
            self._step_turn(session[1], session[2], iri, summary)
        return out

    def _step_turn(self, cycle: int, step: str, iri: str, summary: str) -> None:
        step_iri = _step_iri(f"{self.job_iri}/plan/{cycle}", step)
        node = self._steps.get(step_iri)
        if node is None:  # the plan never reached the board: nothing to record it on
            log.debug("blackboard.step.unknown", job=self.job, step=step_iri)
            return
        finished = summary.startswith("finish(") and summary.endswith("→ finished")
        status = "done" if finished or node.get("status") == "done" else "doing"
        done_by = [*node.get("doneBy", ()), iri]
        node = {**node, "doneBy": list(dict.fromkeys(done_by)), "status": status}
        self.put(node)
        self._steps[step_iri] = node

    def tool_result(self, record: ToolCall, turn_iri: str | None = None) -> str:
        """The ToolResult node of one call, at its L0 IRI, and the entities it mentions."""
        self._own(record.iri)
        found = extract(record.name, record.arguments, record.output, record.ok)
        mentions = [iri for node in self._entity_nodes(found)
                    if (iri := self._put_entity(node)) is not None]
        node: dict[str, Any] = {"@id": record.iri, "@type": "ToolResult", "name": record.name,
                                "status": "ok" if record.ok else "error",
                                "summary": _result_summary(record, found),
                                "partOf": self.job_iri, "mentions": mentions}
        if turn_iri:
            node["derivedFrom"] = [turn_iri]
        return self.put(node)

    def _entity_nodes(self, found: Entities) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = []
        paths = dict.fromkeys([*found.files, *(s.path for s in found.symbols if s.path)])
        for path in paths:
            nodes.append({"@id": self._file_iri(path), "@type": "File", "path": path,
                          "partOf": self.job_iri})
        for sym in found.symbols:
            node: dict[str, Any] = {"@type": "Symbol", "name": sym.name}
            if sym.path:
                node.update({"@id": f"{self.job_iri}/symbol/{quote(sym.path, safe='')}#"
                                    f"{quote(sym.name, safe='')}",
                             "path": sym.path, "partOf": self._file_iri(sym.path)})
            else:
                node.update({"@id": f"{self.job_iri}/symbol/{quote(sym.name, safe='')}",
                             "partOf": self.job_iri})
            if sym.line is not None:
                node["line"] = sym.line
            nodes.append(node)
        for text in found.errors:
            digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
            nodes.append({"@id": f"{self.job_iri}/error/{digest}", "@type": "Error",
                          "text": text, "partOf": self.job_iri})
        return nodes

    def _put_entity(self, node: dict[str, Any]) -> str | None:
        """Merge ``node`` into what was written under its IRI and put it; None if skipped."""
        iri = str(node["@id"])
        old = self._entities.get(iri)
        if old is not None:
            merged = {**old, **node}
            for key in node.keys() & old.keys():
                prop = PROPERTIES.get(key)
                if prop is not None and prop.many:
                    merged[key] = [*old[key], *node[key]]
            node = merged
        try:
            normal = validate_node(node)
            self.put(normal)
        except GlidingError as exc:
            log.warning("blackboard.entity.skipped", job=self.job, iri=iri[:200],
                        error=exc.message[:300])
            return None
        self._entities[iri] = normal
        return iri

    def _file_iri(self, path: str) -> str:
        return f"{self.job_iri}/file/{quote(path, safe='')}"

    def _own(self, iri: str) -> None:
        if not isinstance(iri, str) or not iri.startswith(self.job_iri + "/"):
            raise VocabularyError(f"{iri!r} is not an IRI of job {self.job}")

    def _revision_iri(self, node_iri: str, revision: int) -> str:
        return revision_iri(self.job, node_iri, revision)


def revision_iri(job: str, node_iri: str, revision: int) -> str:
    """The L0 IRI of revision ``revision`` of the node ``node_iri`` of ``job``."""
    rest = node_iri[len(f"gliding://job/{job}"):].strip("/") or "job"
    kind, _, name = rest.partition("/")
    if len(quote(name, safe="")) > MAX_SEGMENT_CHARS:  # L0 IRI segments are bounded
        name = hashed_segment(name)
    return str(record_iri(job, "node", kind, name or "-", str(revision)))


def _write_all(nodes: Sequence[Mapping[str, Any]], write: Callable[[Mapping[str, Any]], object]
               ) -> None:
    """``write`` every node, even after one fails; then raise the first failure, if any."""
    failure: GlidingError | None = None
    for node in nodes:
        try:
            write(node)
        except GlidingError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


INDEXED = frozenset({"Plan", "Step", "Artifact", "CheckReport", "Decision"})
"""The node types whose members (those ``partOf`` something) an index line lists: what the
roles' briefings show (``projection.frame_types``)."""


def index_iri(graph: str, kind: str) -> str:
    """The coherence line listing the members of type ``kind`` in the job graph ``graph``."""
    return f"{graph}/index/{kind}"


def index_members(board: Blackboard, graph: str, kind: str) -> list[str]:
    """The nodes of type ``kind`` with a ``partOf`` in ``graph``, sorted (an index line's value).

    Raises:
        BlackboardError: the board could not be read.
    """
    if kind not in INDEXED:
        raise VocabularyError(f"{kind!r} has no index line")
    rows = board.query(
        f"PREFIX gl: <{NS}>\nSELECT ?s WHERE {{ GRAPH {sparql_iri(graph)} {{ ?s a gl:{kind} . "
        f"?s gl:partOf ?p }} }} ORDER BY ?s", isolated=False)
    return sorted({str(getattr(r["s"], "iri", r["s"])) for r in rows if "s" in r})


def _step_iri(plan_iri: str, step: str) -> str:
    return f"{plan_iri}/step/{quote(step, safe='')}"


def latest_revisions(archive: Archive) -> dict[str, tuple[int, ArchivedItem]]:
    """Each node with revisions in ``archive``: its newest revision's number and entry
    (listed, without content).

    Raises:
        ArchiveError: the archive cannot be read.
    """
    latest: dict[str, tuple[int, ArchivedItem]] = {}
    for item in archive.list(kind="node"):
        node = item.meta.get("node")
        if not isinstance(node, str):
            continue
        revision = int(item.iri.rsplit("/", 1)[-1])
        if revision >= latest.get(node, (0, item))[0]:
            latest[node] = (revision, item)
    return latest


def _result_summary(record: ToolCall, found: Entities) -> str:
    """One line: the tool, how it went, the first line of its output, its first error, ids."""
    first = next((ln for ln in (x.strip() for x in record.output[:4096].splitlines()) if ln),
                 "(no output)")
    text = f"{record.name} {'ok' if record.ok else 'error'}: {_one_line(first, 160)}"
    if found.errors and found.errors[0] != _one_line(first, 160):
        text += f"; {found.errors[0]}"
    if found.ids:
        text += "; ids " + ", ".join(found.ids[:SUMMARY_IDS])
    return _one_line(text, SUMMARY_CHARS)


def _one_line(text: str, width: int) -> str:
    """``one_line`` of ``text`` with lone surrogates replaced (a literal must be valid UTF-8)."""
    return one_line(str(text).encode("utf-8", "replace").decode("utf-8"), width)
