"""Reading a job's archive for a front door (the daemon's API, the MCP server): how the job
stands and what it cost, a queue entry as the API shows it, an archived item a page at a time,
and answers kept within a size.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from gliding.core.text import clip
from gliding.daemon.jobs import FINISHED as OUTCOMES
from gliding.daemon.jobs import job_info
from gliding.daemon.queue import QueuedJob
from gliding.errors import UsageError
from gliding.llm.port import free_backend
from gliding.memory.archive.records import CallRecord
from gliding.memory.archive.store import Archive, archive_path, open_for_iri


def archived_status(data_dir: Path, job: str) -> dict[str, Any] | None:
    """How the archive of ``job`` says it stands; None when it has none."""
    path = archive_path(data_dir, job)
    if not path.is_file():
        return None
    info = job_info(data_dir, job)
    with Archive.open(data_dir, job, create=False) as archive:
        turns = archive.list(kind="turn")
        calls = archive.calls()
    by_role: dict[str, int] = {}
    for item in turns:
        role = str(item.meta.get("role", "?"))
        by_role[role] = by_role.get(role, 0) + 1
    return {"job": job, "status": info.status,
            "outcome": info.status if info.status in OUTCOMES else None,
            "goal": info.goal, "model": info.model, "resumes": info.resumes,
            "turns": len(turns), "turns_by_role": by_role,
            "last_turn": turns[-1].iri if turns else None,
            "tokens": {"prompt": sum(c.prompt_tokens for c in calls),
                       "completion": sum(c.completion_tokens for c in calls),
                       **_ledger_cost(calls, info.model)},
            "archive": str(path)}


def _ledger_cost(calls: list[CallRecord], model: str | None) -> dict[str, Any]:
    """What the ledger says the calls cost: ``cost_usd`` null when some had no price (then
    ``cost_usd_at_least`` sums the others), the models without one, and ``cost_free``
    (``local`` or ``scripted``: the job's model costs nothing by nature)."""
    unpriced = [c for c in calls if not c.priced]
    at_least = round(sum(c.cost_usd for c in calls), 6)
    return {"cost_usd": None if unpriced else at_least, "cost_known": not unpriced,
            "cost_usd_at_least": at_least, "unpriced_calls": len(unpriced),
            "unpriced_models": sorted({c.model for c in unpriced}),
            "cost_free": free_backend(model or "")}


def read_page(data_dir: Path, iri: str, offset: int, limit: int) -> dict[str, Any]:
    """Bytes ``offset`` .. ``offset + limit`` of the archived item ``iri``: UTF-8 text (a
    page ends on a character boundary) or base64, and where the next page starts.

    Raises:
        IRIError, NotFoundError, ArchiveError: as ``open_for_iri`` and ``Archive.get``.
        UsageError: ``offset`` is past the item's end.
    """
    archive, parsed = open_for_iri(data_dir, iri)
    with archive:
        item = archive.get(str(parsed))
    content = item.content or b""
    if offset > len(content):
        raise UsageError(f"offset {offset} is past the end of {iri} ({len(content)} bytes)",
                         hint="read from offset 0, or a next_offset an earlier page gave")
    page = content[offset: offset + limit]
    text = utf8_page(page)
    if text is not None:
        page = text.encode("utf-8")
    end = offset + len(page)
    return {"iri": item.iri, "kind": item.kind, "media_type": item.media_type,
            "size": item.size, "sha256": item.sha256, "offset": offset, "length": len(page),
            "next_offset": end if end < len(content) else None,
            "encoding": "utf-8" if text is not None else "base64",
            "content": text if text is not None else base64.b64encode(page).decode("ascii"),
            "meta": bounded(item.meta, 2_000)}


def utf8_page(page: bytes) -> str | None:
    """``page`` as text, less the bytes of a character its end cuts in two (never all of it);
    None when it is not UTF-8 (e.g. it starts inside a character)."""
    if not page:
        return ""
    for cut in range(min(4, len(page))):
        try:
            return page[: len(page) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def bounded(data: Any, limit: int, string_chars: int = 600) -> Any:
    """``data`` if its JSON fits ``limit`` characters; else with its longest lists halved
    (``<key>_left_out`` counts what each lost), then its long strings clipped."""
    def size(value: Any) -> int:
        return len(json.dumps(value, ensure_ascii=False, default=str))

    if size(data) <= limit or not isinstance(data, dict):
        return data
    data = dict(data)
    for key in sorted((k for k, v in data.items() if isinstance(v, list)),
                      key=lambda k: -size(data[k])):
        full = len(data[key])
        while size(data) > limit and data[key]:
            data[key] = data[key][: len(data[key]) // 2]
            data[f"{key}_left_out"] = full - len(data[key])

    def clipped(value: Any) -> Any:
        if isinstance(value, str):
            return clip(value, string_chars)
        if isinstance(value, dict):
            return {k: clipped(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clipped(v) for v in value]
        return value

    return data if size(data) <= limit else clipped(data)


def job_record(entry: QueuedJob) -> dict[str, Any]:
    """A queue entry as the API shows it (the task text left out)."""
    return {"job": entry.job, "name": entry.name, "goal": entry.goal, "model": entry.model,
            "workspace": entry.workspace, "state": entry.state, "outcome": entry.outcome,
            "error": entry.error, "submitted": entry.submitted, "started": entry.started,
            "finished": entry.finished, "runs": entry.runs}
