"""Steering a running job: a person's message reaches the next model call of one of its
sessions, appended (so the provider's prompt cache still holds), and stays there on resume.

L0 is both the inbox and the journal. ``gliding steer JOB MSG`` (the daemon's
``POST /v1/jobs/{job}/steer``) archives the message as ``gliding://job/<job>/steer/<n>``,
numbered from 1, before it answers, so a steer survives a crash or a restart of the daemon.
Before each model call a session asks ``Steering.take`` for the steers no session has claimed
and appends them; once the model answered, it claims them by archiving
``.../steer/<n>/taken`` (``<session> <turn>``; the archive refuses other bytes at an IRI it
holds, so of sessions running side by side, which all see an unclaimed steer at their next
call, the first answered keeps it). A call that fails claims nothing: the next call sees the
steer again, so no steer is lost to a failed call. A resumed job replays its turns, and each
takes back the steers it claimed, at the same place. Agents on a
``gliding worker`` read and claim through the job's archive over the bus like any L0 entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gliding.core.iri import record_iri
from gliding.errors import ArchiveError, UsageError
from gliding.memory.archive.port import ArchivePort
from gliding.memory.archive.store import Archive

STEER_CHARS = 4000  # one steer message, at most
MAX_STEERS = 100  # steer messages one job takes, at most
PREFIX = "A person steering this job says:"  # how the model sees one


def steer_iri(job: str, n: int) -> str:
    return str(record_iri(job, "steer", str(n)))


def taken_iri(job: str, n: int) -> str:
    return str(record_iri(job, "steer", str(n), "taken"))


@dataclass
class Steering:
    """A job's steer messages as its sessions take them (L0 is the inbox and the journal)."""

    archive: ArchivePort
    job: str
    _known: dict[int, tuple[str, str]] = field(default_factory=dict)  # n -> (text, taker)

    async def take(self, session: str, turn: int) -> list[tuple[str, str, bool]]:
        """The steers for ``session``'s model call of turn ``turn``, in order, as
        ``(iri, text, new)``: those this turn was answered with before (a replay: ``new``
        False) and those no session has claimed yet (``new`` True; ``claim`` them once the
        model answered).

        Raises:
            ArchiveError: the archive cannot be read.
        """
        me = f"{session} {turn}"
        out: list[tuple[str, str, bool]] = []
        for n in range(1, MAX_STEERS + 1):
            known = self._known.get(n)
            if known is None:
                item = await self.archive.find(steer_iri(self.job, n))
                if item is None:
                    break
                text = (item.content or b"").decode("utf-8", errors="replace")
                taken = await self.archive.find(taken_iri(self.job, n))
                if taken is None:
                    out.append((steer_iri(self.job, n), text, True))
                    continue
                known = self._known[n] = (text, (taken.content or b"").decode())
            if known[1] == me:
                out.append((steer_iri(self.job, n), known[0], False))
        return out

    def text(self, iri: str) -> str:
        """A steer's text, once ``take`` or ``claim`` read it."""
        return self._known[int(iri.rsplit("/", 1)[1])][0]

    async def claim(self, session: str, turn: int, iris: list[str]) -> list[str]:
        """Record that ``session``'s model call of turn ``turn`` was answered with the steers
        ``iris`` in its prompt; the ones it claimed first (a session that claimed one meanwhile
        keeps it: both saw it).

        Raises:
            ArchiveError: the archive cannot be written, nor read back.
        """
        me, won = f"{session} {turn}", []
        for iri in iris:
            n = int(iri.rsplit("/", 1)[1])
            text = (await self.archive.read_text(iri)) if n not in self._known else \
                self._known[n][0]
            try:
                await self.archive.put(taken_iri(self.job, n), me, kind="steer-taken",
                                       meta={"session": session, "turn": turn})
            except ArchiveError:  # claimed meanwhile, or the archive failed: which?
                taken = await self.archive.find(taken_iri(self.job, n))
                if taken is None:
                    raise
                self._known[n] = (text, (taken.content or b"").decode())
                continue
            self._known[n] = (text, me)
            won.append(iri)
        return won

def post_steer(archive: Archive, text: str) -> str:
    """Archive ``text`` as the job's next steer message (what ``gliding steer`` does; blocking);
    its IRI.

    Raises:
        UsageError: the message is blank or longer than ``STEER_CHARS``, or the job took
            ``MAX_STEERS`` already. ArchiveError: the archive cannot be written.
    """
    if not text.strip():
        raise UsageError("a steer message must say something")
    if len(text) > STEER_CHARS:
        raise UsageError(f"a steer message may be at most {STEER_CHARS} characters, this one "
                         f"has {len(text)}", hint="say it shorter, or in two steers")
    for _ in range(MAX_STEERS):
        n = len(archive.list(kind="steer")) + 1
        if n > MAX_STEERS:
            break
        iri = steer_iri(archive.job, n)
        try:
            archive.put(iri, text, kind="steer")
        except ArchiveError:  # another steer took that number meanwhile: the next one
            if len(archive.list(kind="steer")) < n:
                raise
            continue
        return iri
    raise UsageError(f"job {archive.job} took {MAX_STEERS} steer messages already",
                     hint="cancel it and submit a new task")

