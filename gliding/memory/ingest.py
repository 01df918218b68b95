"""Ingestion: what a job produces becomes blackboard nodes, one named graph per job, and every
revision of a node is kept in L0.

Nodes written (vocabulary in docs/vocabulary.md):

    Job          gliding://job/<job>                         name = the goal
    Plan, Step   gliding://job/<job>/plan/<cycle>[/step/<i>]  partOf the job / the plan
    Artifact     gliding://job/<job>/artifact/<path>          produced by the job
    CheckReport  gliding://job/<job>/check/<cycle>.<attempt>/<i>  about the artifact it checks
    Decision     gliding://job/<job>/decision/<cycle>

A revision is archived as JSON-LD (with the inline @context) under
``gliding://job/<job>/node/<kind>/<name>/<revision>``; putting an unchanged node again writes
nothing new.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from gliding.core.checks import CheckResult
from gliding.core.iri import record_iri
from gliding.memory.archive import Archive
from gliding.memory.blackboard import Blackboard
from gliding.memory.vocabulary import to_jsonld


class Ingestor:
    """Writes one job's nodes into the blackboard and their revisions into the job's archive."""

    def __init__(self, board: Blackboard, archive: Archive, job: str,
                 on_write: Callable[[str, str], object] | None = None) -> None:
        self.board = board
        self.on_write = on_write  # e.g. Projector.invalidate: views that used a node go stale
        self.archive = archive
        self.job = job
        self.job_iri = f"gliding://job/{job}"
        self.graph = self.job_iri
        self._revisions: dict[str, tuple[int, str]] = {}  # node IRI -> (revision, sha256)

    def put(self, node: Mapping[str, Any]) -> str:
        """Validate and write ``node``; archive the revision when its content changed."""
        text = to_jsonld(node)
        digest = hashlib.sha256(text.encode()).hexdigest()
        iri = str(node["@id"])
        revision, last = self._revisions.get(iri, (0, ""))
        if digest == last:
            return iri
        self.board.put(node, graph=self.graph)
        if self.on_write is not None:
            self.on_write(iri, str(node.get("@type")))
        revision += 1
        self.archive.put(self._revision_iri(iri, revision), text, kind="node",
                         media_type="application/ld+json", meta={"node": iri})
        self._revisions[iri] = (revision, digest)
        return iri

    def job_node(self, goal: str, status: str | None = None) -> str:
        node: dict[str, Any] = {"@id": self.job_iri, "@type": "Job", "name": goal}
        if status:
            node["status"] = status
        return self.put(node)

    def plan(self, cycle: int, steps: Sequence[str], turn_iri: str | None) -> str:
        plan_iri = f"{self.job_iri}/plan/{cycle}"
        node: dict[str, Any] = {"@id": plan_iri, "@type": "Plan", "partOf": self.job_iri}
        if turn_iri:
            node["derivedFrom"] = [turn_iri]
        self.put(node)
        previous = None
        for i, text in enumerate(steps, 1):
            step: dict[str, Any] = {"@id": f"{plan_iri}/step/{i}", "@type": "Step",
                                    "text": text, "partOf": plan_iri, "status": "todo"}
            if previous:
                step["dependsOn"] = [previous]
            previous = self.put(step)
        return plan_iri

    def artifact(self, path: str, archived_iri: str) -> str:
        return self.put({"@id": archived_iri, "@type": "Artifact", "path": path,
                         "partOf": self.job_iri})

    def check_report(self, cycle: int, attempt: int, results: Sequence[CheckResult]) -> list[str]:
        out = []
        for i, r in enumerate(results, 1):
            about = self.job_iri
            path = getattr(r.check, "path", None)
            if isinstance(path, str):
                about = f"{self.job_iri}/artifact/{quote(path, safe='')}"
            out.append(self.put({
                "@id": f"{self.job_iri}/check/{cycle}.{attempt}/{i}", "@type": "CheckReport",
                "status": r.status, "about": [about], "text": r.check.describe(),
                "summary": r.evidence[:500], "partOf": self.job_iri}))
        return out

    def decision(self, cycle: int, decision: str, report: str) -> str:
        return self.put({"@id": f"{self.job_iri}/decision/{cycle}", "@type": "Decision",
                         "status": decision, "text": report or decision,
                         "partOf": self.job_iri})

    def _revision_iri(self, node_iri: str, revision: int) -> str:
        rest = node_iri[len(self.job_iri):].strip("/") or "job"
        kind, _, name = rest.partition("/")
        return str(record_iri(self.job, "node", kind, name or "-", str(revision)))
