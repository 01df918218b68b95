"""Gliding IRIs: how every archived item is addressed, e.g. ``gliding://job/<job>/turn/DA/3``.

Forms:
    gliding://job/<job>                         the job itself
    gliding://job/<job>/turn/<role>/<n>         one full LLM turn of one role
    gliding://job/<job>/result/<call>           one tool result
    gliding://job/<job>/artifact/<path>         a file a job produced (path inside the workspace)
    gliding://job/<job>/<kind>/<name>           any other archived record (plan, check, decision)

A role's turns are numbered per session. A role has one session per job (``DA``), except a DA
working on one plan step of the exploratory pipeline: its session is ``<ROLE>.<cycle>.<step>``
(``step_session``), so DAs running at the same time never share a turn or result IRI:
``gliding://job/<job>/turn/DA.1.s2/3`` and ``gliding://job/<job>/result/DA.1.s2-3-0``. A step
id has letters, digits, ``_`` and ``-`` only (``core.plan``), so the name reads back without
ambiguity (``parse_step_session``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from gliding.errors import IRIError

SCHEME = "gliding://"
_JOB_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
_KIND_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9_.~%-]{1,200}$")
_SESSION_RE = re.compile(r"^([A-Za-z]{1,16})\.([0-9]{1,6})\.([A-Za-z0-9_-]{1,32})$")


@dataclass(frozen=True)
class IRI:
    """A parsed Gliding IRI; ``str(iri)`` gives the canonical text back."""

    job: str
    kind: str | None = None
    parts: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"{SCHEME}job/{self.job}"
        if self.kind:
            text += "/" + self.kind + "".join("/" + quote(p, safe="") for p in self.parts)
        return text


def job_iri(job: str) -> IRI:
    return IRI(_check_job(job))


def turn_iri(job: str, role: str, n: int) -> IRI:
    return IRI(_check_job(job), "turn", (role, str(n)))


def step_session(role: str, cycle: int, step: str) -> str:
    """The session name of ``role`` working on plan step ``step`` of cycle ``cycle``."""
    name = f"{role}.{cycle}.{step}"
    if not _SESSION_RE.match(name):
        raise IRIError(f"bad step session {name!r}",
                       hint="step ids are letters, digits, '_' and '-' (at most 32)")
    return name


def parse_step_session(name: str) -> tuple[str, int, str] | None:
    """(role, cycle, step) of a step session name; None for a plain role name."""
    found = _SESSION_RE.match(name)
    if found is None:
        return None
    return found.group(1), int(found.group(2)), found.group(3)


def result_iri(job: str, call: str) -> IRI:
    return IRI(_check_job(job), "result", (call,))


def record_iri(job: str, kind: str, *names: str) -> IRI:
    if not _KIND_RE.match(kind):
        raise IRIError(f"bad IRI kind {kind!r}", hint="kinds are lower-case words")
    return IRI(_check_job(job), kind, tuple(names))


def hashed_segment(text: str) -> str:
    """``sha256-<32 hex digits>`` of ``text``: the stand-in for an IRI segment too long to keep
    (the node or entry keeps the whole text)."""
    return "sha256-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def parse_iri(text: str) -> IRI:
    """Parse ``text`` or raise IRIError saying what is wrong with it."""
    if not isinstance(text, str) or not text.startswith(SCHEME):
        raise IRIError(
            f"not a Gliding IRI: {text!r}",
            hint="IRIs look like gliding://job/<job>/result/<call>",
        )
    rest = text[len(SCHEME) :]
    segments = rest.split("/")
    if len(segments) < 2 or segments[0] != "job":
        raise IRIError(f"not a Gliding IRI: {text!r}", hint="expected gliding://job/<job>/...")
    try:
        job = _check_job(segments[1])
    except IRIError as exc:
        raise IRIError(f"{exc.message} in IRI {text!r}", hint=exc.hint) from None
    if len(segments) == 2:
        return IRI(job)
    kind = segments[2]
    if not _KIND_RE.match(kind):
        raise IRIError(f"bad kind {kind!r} in IRI {text!r}")
    parts = segments[3:]
    if not parts:
        raise IRIError(f"IRI {text!r} names a kind but no item")
    for part in parts:
        if not _SEGMENT_RE.match(part):
            raise IRIError(f"bad segment {part!r} in IRI {text!r}")
    return IRI(job, kind, tuple(unquote(p) for p in parts))


def _check_job(job: str) -> str:
    if not _JOB_RE.match(job):
        raise IRIError(
            f"bad job id {job!r}",
            hint="job ids are letters, digits, '.', '_' and '-' (at most 80)",
        )
    return job
