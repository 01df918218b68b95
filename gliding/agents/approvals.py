"""Approvals: a tool call waits for a person's yes before it runs.

A policy (``approvals`` in the host's config and in the task file; docs/config.md,
"Approvals") says which calls ask: ``nothing`` (the default, so scripted jobs never stall),
``unmatched`` (every call no allow rule matches) or ``everything``. The task's policy can only
add asking to the host's: a call asks when either asks. The rules are a convenience, not a
security boundary: the sandbox is that.

L0 is both the inbox and the journal, as for steering. A call that asks is archived as
``gliding://job/<job>/approval/<session>-<turn>`` (the tool, its exact arguments, the reason,
and the wall-clock deadline) before the ``approval.requested`` event; ``gliding approve`` /
``gliding deny`` (the daemon's ``POST /v1/jobs/{job}/approvals/{id}``) archive the answer at
``.../answer``, bound to the request by the SHA-256 of the tool and arguments shown
(``digest``), and the waiting call polls for it. The archive refuses other bytes at an IRI it
holds, so of a person's answer and the timeout's, the first written stands. A job stopped
while waiting (``kill -9`` of the daemon, a worker lost) replays to the same call when it
resumes and waits again, until the same deadline; an answer given meanwhile is found at once.
An approved call runs with the arguments the person saw (the call the archived model reply
holds); a denial, or no answer by ``approvals.timeout_s``, fails the call with the reason and
the person's note, which the model reads. The time spent waiting is not charged to the job's
wall time budget (the loop moves the budget's start by it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from gliding.config.settings import ApprovalPolicy, ApprovalRule
from gliding.core import events
from gliding.core.iri import record_iri
from gliding.core.text import one_line
from gliding.errors import ArchiveError, JobStateError, NotFoundError, UsageError
from gliding.memory.archive.port import ArchivePort
from gliding.memory.archive.store import Archive

POLL_S = 0.5  # how often a waiting call looks for its answer
NOTE_CHARS = 2000  # a person's note, at most
SHOWN_CHARS = 600  # the arguments as an event shows them
# a command with one of these may run more than the pattern matched (; && | $( ` > ...)
_CHAINING = frozenset(";&|<>$`(){}\n\r")
_CHAIN_SPLIT = re.compile("([" + re.escape(";&|<>$`(){}") + "])")
MAX_MATCHED = 10_000  # a longer command or path matches no rule (and asks)


def approval_id(session: str, turn: int) -> str:
    return f"{session}-{turn}"


def request_iri(job: str, ident: str) -> str:
    return str(record_iri(job, "approval", ident))


def answer_iri(job: str, ident: str) -> str:
    return str(record_iri(job, "approval", ident, "answer"))


def digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """What an answer binds to: the SHA-256 of the tool and its arguments, canonical JSON."""
    text = json.dumps({"tool": tool, "arguments": arguments}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def asks(policies: Sequence[ApprovalPolicy], tool: str, arguments: Mapping[str, Any],
         workspace: Path) -> str | None:
    """Why the call must wait for a person's yes, or None when no policy asks."""
    for policy in policies:
        if policy.ask == "everything":
            return "every tool call waits for approval (approvals.ask: everything)"
        if policy.ask == "unmatched" and not any(
                matches(rule, tool, arguments, workspace) for rule in policy.allow):
            return "no approvals.allow rule matches this call"
    return None


def matches(rule: ApprovalRule, tool: str, arguments: Mapping[str, Any],
            workspace: Path) -> bool:
    """Whether ``rule`` allows the call: every field it gives matches."""
    if not glob(tool, rule.tool):
        return False
    if rule.command is not None:
        command = arguments.get("command")
        if not isinstance(command, str) or not command_matches(command, rule.command):
            return False
    if rule.path is not None:
        path = arguments.get("path")
        if not isinstance(path, str) or not _path_matches(path, rule.path, workspace):
            return False
    if rule.host is not None:
        url = arguments.get("url")
        try:
            host = urlsplit(url).hostname if isinstance(url, str) else None
        except ValueError:
            host = None
        if not host or not glob(host.lower(), rule.host.lower()):
            return False
    return True


def glob(text: str, pattern: str) -> bool:
    """Whether all of ``text`` matches ``pattern``: ``*`` any run of characters, ``?`` any one,
    every other character itself (no ``[...]`` classes). Greedy with one backtracking point:
    at most len(text) * len(pattern) steps, never the exponential backtracking a regular
    expression of several stars can take on a long text that does not match."""
    t = p = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif p < len(pattern) and pattern[p] in ("?", text[t]):
            t, p = t + 1, p + 1
        elif star >= 0:  # the last star takes one more character
            mark += 1
            t, p = mark, star + 1
        else:
            return False
    return pattern[p:].strip("*") == ""


def command_matches(command: str, pattern: str) -> bool:
    """Whether the whole ``command`` (runs of blanks read as one space) matches ``pattern``,
    whose ``*`` and ``?`` never stand for ; & | < > $ ` ( ) { }: those match only where the
    pattern has them literally, in the same order. A command of several lines, or of over
    ``MAX_MATCHED`` characters, never matches."""
    if "\n" in command or "\r" in command or len(command) > MAX_MATCHED:
        return False
    text, wanted = _CHAIN_SPLIT.split(" ".join(command.split())), \
        _CHAIN_SPLIT.split(" ".join(pattern.split()))
    # [part, char, part, char, ...]: the chaining characters must be the pattern's own
    return len(text) == len(wanted) and all(
        glob(part, want) if n % 2 == 0 else part == want
        for n, (part, want) in enumerate(zip(text, wanted, strict=True)))


def _path_matches(path: str, pattern: str, workspace: Path) -> bool:
    """``path`` (as a tool reads it: relative to the workspace) against ``pattern``, as the
    tool will reach it (symlinks followed, blocking): relative patterns match real paths
    inside the workspace, relative to its real path; absolute ones the real path."""
    if "\0" in path or len(path) > MAX_MATCHED:
        return False
    root = os.path.realpath(workspace)
    full = os.path.realpath(os.path.join(root, path))
    if os.path.isabs(pattern):
        return glob(full, os.path.normpath(pattern))
    inside = os.path.relpath(full, root)
    if inside == ".." or inside.startswith("../") or os.path.isabs(inside):
        return False
    return glob(inside, pattern)


@dataclass(frozen=True)
class Verdict:
    """A person's answer (or the timeout's) to one call."""

    approved: bool
    note: str
    by: str  # "person", or "timeout"
    # the time to take off the wall time budget: when this was the last of the job's calls
    # waiting side by side, how long some call waited; else 0
    waited_s: float

    def outcome_text(self, timeout_s: float) -> str:
        """What the model reads: the refusal for a call not run, or what follows the output
        of an approved call ("" when the person said nothing)."""
        said = f": {self.note}" if self.note else ""
        if self.approved:
            return f"(a person approved this call{said})" if self.note else ""
        if self.by == "timeout":
            return (f"error: no one approved this call within {timeout_s:g}s "
                    "(approvals.timeout_s), so it was not run; try another way, or finish and "
                    "say what needs a person's approval")
        return f"error: a person denied this call{said}; it was not run"


@dataclass
class Approvals:
    """One job's approvals where its agents run."""

    archive: ArchivePort
    job: str
    policies: tuple[ApprovalPolicy, ...]  # the host's, then the task's
    timeout_s: float
    workspace: Path
    publish: Callable[[events.Event], Awaitable[None]]
    monotonic: Callable[[], float]
    wall: Callable[[], float] = time.time  # deadlines outlive the process: wall clock
    poll_s: float = POLL_S
    _waits: int = 0  # calls of this job waiting here now
    _since: float = 0.0  # when the first of them began to wait

    def asks(self, tool: str, arguments: Mapping[str, Any]) -> str | None:
        return asks(self.policies, tool, arguments, self.workspace)

    async def decide(self, *, role: str, session: str, turn: int, tool: str,
                     arguments: Mapping[str, Any]) -> Verdict | None:
        """None when no policy asks about this call; else wait for the answer (or the
        deadline) and return it.

        Raises:
            ArchiveError: the archive cannot be read or written.
        """
        # off the loop: path rules read the file system, and many long rules take a while
        reason = await anyio.to_thread.run_sync(self.asks, tool, arguments)
        if reason is None:
            return None
        ident, bound = approval_id(session, turn), digest(tool, arguments)
        request = await self.archive.find(request_iri(self.job, ident))
        record: dict[str, Any]
        if request is None:
            record = {"tool": tool, "arguments": dict(arguments), "digest": bound,
                      "role": role, "session": session, "turn": turn, "reason": reason,
                      "asked_at": self.wall(), "deadline": self.wall() + self.timeout_s}
            await self.archive.put(request_iri(self.job, ident), json.dumps(record),
                                   kind="approval", meta={"session": session, "turn": turn,
                                                          "tool": tool, "digest": bound})
        else:  # asked before this run: the same deadline
            record = _json_object(request.content)
        deadline = record.get("deadline")
        if not isinstance(deadline, int | float):  # a damaged request: the timeout from now
            deadline = self.wall() + self.timeout_s
        answer = await self._answer(ident)
        held = 0.0
        if answer is None:
            await self.publish(events.ApprovalRequested(
                session=session, turn=turn, approval=ident, tool=tool,
                arguments=one_line(json.dumps(dict(arguments), ensure_ascii=False),
                                   SHOWN_CHARS),
                digest=bound, reason=reason, deadline=float(deadline)))
            if not self._waits:
                self._since = self.monotonic()
            self._waits += 1
            try:
                answer = await self._wait(ident, float(deadline), bound)
            finally:
                self._waits -= 1
                # the time some call of the job waited, credited once when the last wait ends
                # (waits side by side are not counted twice)
                held = 0.0 if self._waits else self.monotonic() - self._since
        approved = answer.get("approved") is True and answer.get("digest") == bound
        note = str(answer.get("note") or "")[:NOTE_CHARS]
        if answer.get("approved") is True and not approved:
            note = "the approval was given for other arguments than this call's"
        verdict = Verdict(approved, note, str(answer.get("by") or "person"), held)
        await self.publish(events.ApprovalAnswered(
            session=session, turn=turn, approval=ident, approved=verdict.approved,
            by=verdict.by, note=one_line(verdict.note, SHOWN_CHARS) or None))
        return verdict

    async def _answer(self, ident: str) -> dict[str, Any] | None:
        item = await self.archive.find(answer_iri(self.job, ident))
        return None if item is None else _json_object(item.content)

    async def _wait(self, ident: str, deadline: float, bound: str) -> dict[str, Any]:
        """The answer to ``ident``, polled until ``deadline`` (wall clock); then the timeout's
        denial, unless a person's answer was written first."""
        while self.wall() < deadline:
            await anyio.sleep(min(self.poll_s, max(0.0, deadline - self.wall())))
            answer = await self._answer(ident)
            if answer is not None:
                return answer
        timeout = {"approved": False, "digest": bound, "by": "timeout", "note": "",
                   "at": self.wall()}
        try:
            await self.archive.put(answer_iri(self.job, ident), json.dumps(timeout),
                                   kind="approval-answer", meta={"by": "timeout"})
        except ArchiveError:  # answered meanwhile, or the archive failed: which?
            answer = await self._answer(ident)
            if answer is None:
                raise
            return answer
        return timeout


def _json_object(content: bytes | None) -> dict[str, Any]:
    """An archived request or answer; {} when damaged (an answer then approves nothing)."""
    try:
        value = json.loads(content or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- the daemon's side: what `gliding approve` and `gliding deny` do (blocking) ---------------

def listed(archive: Archive) -> list[dict[str, Any]]:
    """The job's approval requests, oldest first, each with its ``answer`` (None: waiting).

    Raises:
        ArchiveError: the archive cannot be read.
    """
    out = []
    for item in archive.list(kind="approval"):
        ident = item.iri.rsplit("/", 1)[1]
        record = _json_object(archive.get(item.iri).content)
        try:
            answer: dict[str, Any] | None = _json_object(
                archive.get(answer_iri(archive.job, ident)).content)
        except NotFoundError:
            answer = None
        out.append({"approval": ident, "tool": str(record.get("tool", "")),
                    "arguments": record.get("arguments") or {},
                    "digest": str(record.get("digest", "")),
                    "role": str(record.get("role", "")), "session": str(record.get("session", "")),
                    "turn": record.get("turn"), "reason": str(record.get("reason", "")),
                    "asked_at": record.get("asked_at"), "deadline": record.get("deadline"),
                    "answer": None if answer is None else {
                        "approved": answer.get("approved") is True,
                        "by": str(answer.get("by", "person")),
                        "note": str(answer.get("note", "")), "at": answer.get("at")}})
    return out


def answer(archive: Archive, ident: str | None, *, approve: bool, note: str = "",
           bound: str | None = None, now: float | None = None) -> dict[str, Any]:
    """Archive a person's answer to the waiting request ``ident`` (None: the only one waiting);
    the request, as ``listed`` gives it, with its answer.

    Raises:
        UsageError: no ``ident`` while none or several wait, or the note is too long.
        NotFoundError: no such request. JobStateError: it was answered already, it is past
            its deadline (denied), or ``bound`` is not the digest of the call it asks about
            (the person saw another call).
        ArchiveError: the archive cannot be read or written.
    """
    if len(note) > NOTE_CHARS:
        raise UsageError(f"a note may be at most {NOTE_CHARS} characters, this one has "
                         f"{len(note)}")
    requests = listed(archive)
    waiting = [r for r in requests if r["answer"] is None]
    if ident is None:
        if len(waiting) != 1:
            ids = ", ".join(r["approval"] for r in waiting)
            raise UsageError(f"job {archive.job} has {len(waiting)} calls waiting for approval"
                             + (f" ({ids})" if ids else ""),
                             hint="name one with --id" if waiting else None)
        ident = waiting[0]["approval"]
    found = next((r for r in requests if r["approval"] == ident), None)
    if found is None:
        raise NotFoundError(f"job {archive.job} has no approval request {ident}",
                            hint="gliding status JOB lists the calls waiting for approval")
    if found["answer"] is not None:
        raise JobStateError(f"approval {ident} of job {archive.job} was answered already "
                            f"({'approved' if found['answer']['approved'] else 'denied'} by "
                            f"{found['answer']['by']})")
    at = time.time() if now is None else now
    deadline = found["deadline"]
    if isinstance(deadline, int | float) and at > deadline:
        raise JobStateError(f"approval {ident} of job {archive.job} is past its deadline "
                            "(approvals.timeout_s): the call is denied",
                            hint="the agent is told so when the job runs on")
    if bound is not None and bound != found["digest"]:
        raise JobStateError(f"approval {ident} asks about another call than the one you saw "
                            "(its digest differs)", hint="look at the request again")
    record = {"approved": approve, "digest": found["digest"], "by": "person", "note": note,
              "at": at}
    try:
        archive.put(answer_iri(archive.job, ident), json.dumps(record),
                    kind="approval-answer", meta={"by": "person"})
    except ArchiveError:
        if _answered(archive, ident):
            raise JobStateError(f"approval {ident} of job {archive.job} was answered "
                                "meanwhile") from None
        raise
    found["answer"] = {"approved": approve, "by": "person", "note": note, "at": record["at"]}
    return found


def _answered(archive: Archive, ident: str) -> bool:
    try:
        archive.get(answer_iri(archive.job, ident))
    except NotFoundError:
        return False
    return True
