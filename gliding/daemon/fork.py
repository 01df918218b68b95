"""``gliding fork JOB --at STEP``: a new job from a journaled step of an old one.

Snapshots. The job's own process keeps the workspace's content after each step
(``tools/workspace_history.py``): ``Snapshots.start`` when the job starts (or resumes), and
``Snapshots.after`` after each tool call that changed the workspace's mark, each archived in
L0 as ``gliding://job/<job>/snapshot/<name>`` (``start``, or ``<session>-<turn>``: the git
tree in the data directory's store, and every file's size and mtime). Agents on a
``gliding worker`` take none (their workspace is on another host): a fork from a step whose
workspace no snapshot holds is refused.

The fork. A STEP is a turn, ``DA/3`` (a session and its turn number) or its IRI. The new job's
archive gets every L0 entry of the old one up to that turn's tool result and its snapshot (or
the turn, when it made no call), in order, with the old job's id replaced by the new one's in
IRIs and content (same length: every byte else is kept), the ledger's calls up to then, and the
old job's metadata (its task with the new workspace). The workspace is restored into a new
directory from the newest snapshot whose mark is the one the step recorded, file mtimes
included. The fork is then a job stopped right after that step: the daemon queues it, it
resumes from the old job's journal, replays the archived turns up to the step (no model call
paid, no tool run again) and goes on live from the next one. A workspace no snapshot holds (a
step run on a worker, a workspace too large to keep, a job of a Gliding without snapshots) is
refused with the reason, and nothing is written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from gliding.core.iri import record_iri
from gliding.errors import NotFoundError, UsageError
from gliding.memory.archive.port import ArchivePort
from gliding.memory.archive.store import Archive
from gliding.tools import workspace_history
from gliding.tools.snapshot import fingerprint

_STEP = re.compile(r"^(?:gliding://job/([^/]+)/turn/)?([A-Za-z][\w.\-]*)/([0-9]{1,6})$")


@dataclass
class Snapshots:
    """The job's workspace snapshots, taken where its own process runs its agents."""

    port: ArchivePort
    job: str
    workspace: Path
    data_dir: Path
    job_dir: Path  # where the job's archive is: its git index lives there
    _mark: str = ""  # of the newest snapshot taken
    # sessions side by side share the job's git index: one snapshot at a time
    _one: anyio.Lock = field(default_factory=anyio.Lock)

    async def start(self) -> None:
        """Snapshot the workspace as the job (re)starts (a resume: as it is now)."""
        await self._take("start" if await self.port.find(self._iri("start")) is None else "")

    async def after(self, name: str, mark: str) -> None:
        """A tool call of step ``name`` left the workspace with ``mark``: snapshot it when
        it changed since the last snapshot."""
        if mark != self._mark:
            await self._take(name)

    def _iri(self, name: str) -> str:
        return str(record_iri(self.job, "snapshot", name))

    async def _take(self, name: str) -> None:
        async with self._one:
            await self._take_now(name)

    async def _take_now(self, name: str) -> None:
        try:
            taken = await anyio.to_thread.run_sync(
                workspace_history.record, self.data_dir / workspace_history.STORE,
                self.job_dir / workspace_history.INDEX, self.workspace, self.data_dir)
        except UsageError as exc:  # no git, or it failed: the job goes on without
            import structlog

            structlog.get_logger("gliding.daemon").warning(
                "workspace.snapshot.failed", job=self.job, error=exc.message)
            return
        if taken is None:
            return
        self._mark = fingerprint(taken.files)
        if name:
            await self.port.put(self._iri(name), json.dumps(
                {"tree": taken.tree, "files": taken.files}), kind="snapshot",
                meta={"tree": taken.tree, "mark": self._mark})


def step_name(at: str, job: str) -> tuple[str, int]:
    """``(session, turn)`` of a STEP of ``job`` (``DA/3``, ``DA.1.s2/4`` or a turn's IRI).

    Raises:
        UsageError: it names no turn, or a turn of another job.
    """
    m = _STEP.match(at.strip())
    if m is None:
        raise UsageError(f"--at {at!r} names no step",
                         hint="give a turn, e.g. DA/3 (gliding logs JOB shows them: "
                              "[DA turn 3])")
    if m.group(1) is not None and m.group(1) != job:
        raise UsageError(f"--at {at!r} is a step of job {m.group(1)}, not of {job}")
    return m.group(2), int(m.group(3))


def fork_archive(old: Archive, new: Archive, at: str, workspace: Path,
                 data_dir: Path) -> dict[str, Any]:
    """Copy ``old`` up to the step ``at`` into the empty archive ``new`` and restore the
    workspace there into ``workspace`` (blocking); what the fork holds (``step``, ``entries``,
    ``calls``, ``snapshot``).

    Raises:
        UsageError: ``at`` names no turn of the job, the job is not set up, or no snapshot
            holds the workspace of that step (nothing is written then), or ``workspace`` is
            not a new or empty directory. NotFoundError: no such turn. ArchiveError.
    """
    session, turn = step_name(at, old.job)
    old_id, new_id = old.job, new.job
    turn_key = f"gliding://job/{old_id}/turn/{session}/{turn}"
    items = old.list()
    seq_of = {item.iri: n for n, item in enumerate(items)}
    if turn_key not in seq_of:
        raise NotFoundError(f"job {old_id} has no step {session}/{turn}",
                            hint="gliding logs JOB shows its steps ([DA turn 3] is DA/3)")
    result_key = f"gliding://job/{old_id}/result/{session}-{turn}-0"
    snapshot_key = f"gliding://job/{old_id}/snapshot/{session}-{turn}"
    cut = max(seq_of[turn_key], seq_of.get(result_key, -1), seq_of.get(snapshot_key, -1))
    record = old.get_meta("task_record")
    if not record:
        raise UsageError(f"job {old_id} was stopped before it was set up: nothing to fork")
    kept = items[:cut + 1]
    mark = ""
    for item in kept:
        if item.kind in ("journal", "result") and isinstance(item.meta.get("workspace"), str):
            mark = item.meta["workspace"] or mark
    snap = None
    for item in reversed(kept):
        if item.kind == "snapshot" and (not mark or item.meta.get("mark") == mark):
            snap = item
            break
    if snap is None:
        raise UsageError(f"no snapshot of job {old_id}'s workspace holds it as step "
                         f"{session}/{turn} left it, so it cannot be restored",
                         hint="snapshots are taken where the job's own process runs its "
                              "agents (not on a gliding worker), for workspaces up to "
                              f"{workspace_history.MAX_BYTES >> 20} MiB")
    taken = json.loads(old.get(snap.iri).text())
    workspace_history.restore(data_dir / workspace_history.STORE, str(taken["tree"]),
                              {k: list(v) for k, v in taken["files"].items()}, workspace)
    last_at = kept[-1].created_at
    for item in kept:
        full = old.get(item.iri)
        content = (full.content or b"").replace(old_id.encode(), new_id.encode())
        meta = json.loads(json.dumps(full.meta).replace(old_id, new_id))
        new.put(item.iri.replace(old_id, new_id, 1), content, kind=item.kind,
                media_type=item.media_type, meta=meta)
    kept_iris = {item.iri for item in kept}
    calls = [c for c in old.calls() if c.turn_iri in kept_iris
             or (not c.turn_iri and (c.created_at or 0.0) <= last_at)]
    for call in calls:
        new.record_call(_moved(call, new_id, old_id))
    for key in ("goal", "model", "model_spec", "workspace_start", "pipeline", "started"):
        value = old.get_meta(key)
        if value is not None:
            new.set_meta(key, value)
    new.set_meta("task_record", {**record, "workspace": str(workspace)})
    new.set_meta("status", "interrupted")
    new.set_meta("stopped_by", f"forked from job {old_id} at {session}/{turn}")
    new.set_meta("forked_from", {"job": old_id, "step": f"{session}/{turn}"})
    return {"step": f"{session}/{turn}", "entries": len(kept), "calls": len(calls),
            "snapshot": snap.iri.replace(old_id, new_id, 1)}


def _moved(call: Any, new_id: str, old_id: str) -> Any:
    import dataclasses

    turn_iri = call.turn_iri.replace(old_id, new_id, 1) if call.turn_iri else call.turn_iri
    return dataclasses.replace(call, job=new_id, turn_iri=turn_iri)
