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
    Fact         gliding://job/<job>/fact/<call>/<n>         a finding of the result (text,
                                                              source, lineStart/lineEnd that
                                                              read_result reads back); partOf
                                                              and derivedFrom the result; n 0:
                                                              what a ``note`` call states

A plan's steps are the PlanSteps of its PlanMsg (plain strings: step ``<i>`` depending on step
``<i-1>``). A turn of a step session (``turn/DA.<cycle>.<step>/<n>``, ``core.iri``) adds itself
to that step's ``doneBy`` and makes the step ``doing``; the turn whose summary is that of an
accepted finish (``finish(...) → finished``, as the agent loop writes it) makes it ``done``.

Entities come from ``entities.extract``. One that does not validate is skipped (and logged),
never the result or the other entities. An entity seen again is merged with what was written
before (relations united, literals kept unless the new sighting gives them), so it stays one node.

Every node goes through one ``BoardWriter`` (``board/nodes.py``): the job's coherence cache,
or the pass-through when coherence is off. The store behind it archives each revision as JSON-LD
(with the inline @context) under ``gliding://job/<job>/node/<kind>/<name>/<revision>``; putting
an unchanged node again writes nothing. Writes are awaited on the event loop; what blocks (entity
extraction, reading the board) runs on worker threads.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol
from urllib.parse import quote

import anyio
import structlog

from gliding.bus.messages import PlanStep
from gliding.core.crashpoints import crash_point
from gliding.core.iri import parse_iri, parse_step_session
from gliding.core.text import one_line
from gliding.errors import GlidingError
from gliding.memory.archive.store import Archive
from gliding.memory.board.blackboard import Blackboard
from gliding.memory.board.nodes import (
    INDEXED,
    BoardWriter,
    index_iri,
    index_members,
    latest_revisions,
)
from gliding.memory.board.vocabulary import (
    PROPERTIES,
    VocabularyError,
    check_iri,
    from_jsonld,
    to_jsonld,
    validate_node,
)
from gliding.memory.ingest.entities import PATH_ARGUMENTS, Entities, extract
from gliding.memory.ingest.findings import FACT_CHARS, findings
from gliding.tools.readback import MEMORY_READS

log = structlog.get_logger("gliding.memory")

SUMMARY_CHARS = 300
SUMMARY_IDS = 5
NOTE_TOOL = "note"  # the memory group's tool by which an agent states a finding
NOTE_CHARS = 500
SOURCE_CHARS = 80
SOURCE_ARGUMENTS = (*PATH_ARGUMENTS, "command", "cmd", "url", "query", "pattern", "input")


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
    """Writes one job's nodes through ``writer``; reads the board (index lines) and the
    archive (``restore``) directly."""

    def __init__(self, board: Blackboard, archive: Archive, job: str,
                 writer: BoardWriter) -> None:
        self.board = board
        self.writer = writer
        self.archive = archive
        self.job = job
        self.job_iri = f"gliding://job/{job}"
        self.graph = self.job_iri
        self._revisions: dict[str, tuple[int, str]] = {}  # node IRI -> (revision, sha256)
        self._entities: dict[str, dict[str, Any]] = {}  # entity IRI -> last node written
        self._queue: list[tuple[Mapping[str, Any], str, str]] | None = None  # inside batch()
        self._steps: dict[str, dict[str, Any]] = {}  # step IRI -> its node as last put

    async def put(self, node: Mapping[str, Any]) -> str:
        """Validate ``node`` and write it (inside ``batch``: when the batch ends); a node
        unchanged since its last acknowledged write is not written again. A node of a type in
        ``INDEXED`` also updates its type's index line when first written.

        Raises VocabularyError (nothing written) or what the writer raises (the next ``put``
        of the node writes it again, even unchanged).
        """
        crash_point("ingest.write")
        text = to_jsonld(node)
        digest = hashlib.sha256(text.encode()).hexdigest()
        iri = str(node["@id"])
        known = self._revisions.get(iri)
        if known is not None and known[1] == digest:
            return iri
        if self._queue is not None:
            self._queue.append((node, text, digest))
            return iri
        revision = await self.writer.write(iri, text)
        await self._index([node], new={iri} if known is None else set())
        self._revisions[iri] = (revision, digest)  # after the index: a failure writes it again
        return iri

    @asynccontextmanager
    async def batch(self) -> AsyncIterator[Ingestor]:
        """Ingest a block of nodes at once, through ``writer.write_many`` when the block ends
        (the pass-through archives their revisions in one L0 transaction before any reaches
        the board). If the block raises, nothing of it is written. Nested blocks join the
        outer one."""
        if self._queue is not None:
            yield self
            return
        self._queue = []
        entities, steps = dict(self._entities), dict(self._steps)
        try:
            yield self
        except BaseException:  # what the block saw is forgotten with what it would write
            self._queue, self._entities, self._steps = None, entities, steps
            raise
        queued, self._queue = self._queue, None
        if not queued:
            return
        revisions = await self.writer.write_many([(str(n["@id"]), text)
                                                  for n, text, _ in queued])
        new = {str(n["@id"]) for n, _, _ in queued if str(n["@id"]) not in self._revisions}
        await self._index([n for n, _, _ in queued], new=new)
        for (node, _, digest), revision in zip(queued, revisions, strict=True):
            self._revisions[str(node["@id"])] = (revision, digest)

    async def _index(self, nodes: Sequence[Mapping[str, Any]], *, new: set[str]) -> None:
        """Write the index line of each type in ``INDEXED`` that got a new member: the members
        as the board holds them now (this node, any resumed job's, any whose index write
        failed before), so one failure is mended by the next member."""
        kinds = {str(n.get("@type")) for n in nodes
                 if str(n["@id"]) in new and str(n.get("@type")) in INDEXED and "partOf" in n}
        for kind in sorted(kinds):
            members = await anyio.to_thread.run_sync(index_members, self.board, self.graph,
                                                     kind)
            added = {str(n["@id"]) for n in nodes
                     if str(n["@id"]) in new and n.get("@type") == kind}
            await self.writer.write(index_iri(self.graph, kind),
                                    json.dumps(sorted({*members, *added})))

    async def job_node(self, goal: str, status: str | None = None) -> str:
        node: dict[str, Any] = {"@id": self.job_iri, "@type": "Job", "name": goal}
        if status:
            node["status"] = status
        return await self.put(node)

    async def plan(self, cycle: int, steps: Sequence[str | PlanStep], turn_iri: str | None) -> str:
        """The Plan node of ``cycle`` and a Step node per step (a plain string: step ``<i>``,
        depending on the one before)."""
        plan_iri = f"{self.job_iri}/plan/{cycle}"
        node: dict[str, Any] = {"@id": plan_iri, "@type": "Plan", "partOf": self.job_iri}
        if turn_iri:
            node["derivedFrom"] = [turn_iri]
        await self.put(node)
        for i, item in enumerate(steps, 1):
            if isinstance(item, str):
                sid, text, needs = str(i), item, [str(i - 1)] if i > 1 else []
            else:
                sid, text, needs = item.id, item.text, list(item.depends_on)
            step: dict[str, Any] = {"@id": _step_iri(plan_iri, sid), "@type": "Step",
                                    "text": text, "partOf": plan_iri, "status": "todo"}
            if needs:
                step["dependsOn"] = [_step_iri(plan_iri, d) for d in needs]
            self._steps[await self.put(step)] = step
        return plan_iri

    async def artifact(self, path: str, archived_iri: str) -> str:
        return await self.put({"@id": archived_iri, "@type": "Artifact", "path": path,
                         "partOf": self.job_iri})

    async def check_report(self, cycle: int, attempt: int, results: Sequence[Verdict]) -> list[str]:
        out = []
        for i, r in enumerate(results, 1):
            about = self.job_iri
            if isinstance(r.path, str):
                about = f"{self.job_iri}/artifact/{quote(r.path, safe='')}"
            out.append(await self.put({
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

    async def decision(self, cycle: int, decision: str, report: str) -> str:
        return await self.put({"@id": f"{self.job_iri}/decision/{cycle}", "@type": "Decision",
                         "status": decision, "text": report or decision,
                         "partOf": self.job_iri})

    async def turn(self, role: str, n: int, iri: str, summary: str) -> str:
        """The Turn node of one LLM turn, at its L0 IRI; a step session's turn is also
        recorded on its step (``doneBy``, ``status``), and the finishing turn of a DA that
        worked the whole plan (one session, not a step's) marks every step of the newest
        plan done: the briefings of CA and AA show where the plan stands."""
        self._own(iri)
        parts = parse_iri(iri).parts
        session = parse_step_session(parts[0]) if parts else None
        if session is not None:
            role = session[0]  # the role, whichever name the caller had for the session
        out = await self.put({"@id": iri, "@type": "Turn", "role": role,
                        "summary": _one_line(summary, SUMMARY_CHARS) or f"{role} turn {n}",
                        "partOf": self.job_iri})
        if session is not None:
            await self._step_turn(session[1], session[2], iri, summary)
        elif role == "DA" and _finished(summary):
            await self._plan_done()
        return out

    async def _plan_done(self) -> None:
        """Every step of the newest plan that is not done yet: done. (No ``doneBy``: the whole
        plan's session did each, and the step's line in a briefing stays short.)"""
        cycles = {int(m.group(1)) for s in self._steps
                  if (m := re.match(re.escape(f"{self.job_iri}/plan/") + r"(\d+)/step/", s))}
        if not cycles:
            return  # no plan reached the board
        newest = f"{self.job_iri}/plan/{max(cycles)}/step/"
        for step_iri, node in list(self._steps.items()):
            if step_iri.startswith(newest) and node.get("status") != "done":
                node = {**node, "status": "done"}
                await self.put(node)
                self._steps[step_iri] = node

    async def _step_turn(self, cycle: int, step: str, iri: str, summary: str) -> None:
        step_iri = _step_iri(f"{self.job_iri}/plan/{cycle}", step)
        node = self._steps.get(step_iri)
        if node is None:  # the plan never reached the board: nothing to record it on
            log.debug("blackboard.step.unknown", job=self.job, step=step_iri)
            return
        status = "done" if _finished(summary) or node.get("status") == "done" else "doing"
        done_by = [*node.get("doneBy", ()), iri]
        node = {**node, "doneBy": list(dict.fromkeys(done_by)), "status": status}
        await self.put(node)
        self._steps[step_iri] = node

    async def tool_result(self, record: ToolCall, turn_iri: str | None = None) -> str:
        """The ToolResult node of one call, at its L0 IRI, the entities it mentions and a Fact
        per finding of its output (``findings.py``), or the one a ``note`` call states."""
        self._own(record.iri)
        found = await anyio.to_thread.run_sync(extract, record.name, record.arguments,
                                               record.output, record.ok)
        lines = (await anyio.to_thread.run_sync(findings, record.name, record.output)
                 if record.ok and record.name != NOTE_TOOL and record.name not in MEMORY_READS
                 else [])
        async with self.batch():
            mentions = [iri for node in self._entity_nodes(found)
                        if (iri := await self._put_entity(node)) is not None]
            source = _source(record.name, record.arguments)
            node: dict[str, Any] = {"@id": record.iri, "@type": "ToolResult",
                                    "name": record.name, "source": source,
                                    "status": "ok" if record.ok else "error",
                                    "summary": _result_summary(record, found),
                                    "partOf": self.job_iri, "mentions": mentions}
            if turn_iri:
                node["derivedFrom"] = [turn_iri]
            out = await self.put(node)
            for n, finding in enumerate(lines, 1):
                fact = {"@id": _fact_iri(record.iri, n), "@type": "Fact",
                        "text": _one_line(finding.text, FACT_CHARS), "partOf": record.iri,
                        "derivedFrom": [record.iri], "lineStart": finding.line_start,
                        "lineEnd": finding.line_end, "source": source}
                try:
                    await self.put(validate_node(fact))
                except VocabularyError as exc:  # one odd line never costs the result
                    log.warning("blackboard.fact.skipped", job=self.job, error=exc.message)
            if record.name == NOTE_TOOL and record.ok:
                await self._note(record, turn_iri)
        return out

    async def _note(self, record: ToolCall, turn_iri: str | None) -> None:
        """The Fact an agent stated with the ``note`` tool: its text, from its turn (and the
        ``source`` IRI it gave, when that is a valid IRI)."""
        text = _one_line(str(record.arguments.get("text") or ""), NOTE_CHARS)
        if not text:
            return
        origin = [turn_iri] if turn_iri else []
        given = record.arguments.get("source")
        if isinstance(given, str) and given.strip():
            source = given.strip().strip("<>").split("#", 1)[0]
            if "://" not in source:  # relative to the job, as the read-back tools take it
                source = f"{self.job_iri}/{source.lstrip('/')}"
            try:
                origin.insert(0, check_iri(source, "note source"))
            except VocabularyError:
                log.info("blackboard.note.source.skipped", job=self.job, source=given[:200])
        role = parse_iri(turn_iri).parts[0] if turn_iri else "agent"
        await self.put({"@id": _fact_iri(record.iri, 0), "@type": "Fact", "text": text,
                        "partOf": self.job_iri, "derivedFrom": origin or [record.iri],
                        "source": f"noted by {role}"})

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

    async def _put_entity(self, node: dict[str, Any]) -> str | None:
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
            await self.put(normal)
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


def _finished(summary: str) -> bool:
    """Whether a turn's summary says the role finished (``finish(...) → finished``)."""
    return summary.startswith("finish(") and summary.endswith("→ finished")


def _fact_iri(result_iri: str, n: int) -> str:
    """``gliding://job/<job>/fact/<call>/<n>`` for finding ``n`` of the result ``<call>``
    (0: what a note call states)."""
    head, _, call = result_iri.partition("/result/")
    return f"{head}/fact/{call}/{n}"


def _source(tool: str, arguments: Mapping[str, Any]) -> str:
    """What a fact was read from, on one short line: the tool and its main argument (a path,
    command, URL or query), else its first arguments as ``key=value``."""
    for key in SOURCE_ARGUMENTS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return _one_line(f"{tool} {value}", SOURCE_CHARS)
    pairs = [f"{k}={v}" for k, v in list(arguments.items())[:3]
             if isinstance(v, str | int | float) and not isinstance(v, bool)]
    return _one_line(" ".join([tool, *pairs]), SOURCE_CHARS)


def _step_iri(plan_iri: str, step: str) -> str:
    return f"{plan_iri}/step/{quote(step, safe='')}"


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
