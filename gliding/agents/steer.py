"""Steering a running job: a person's message reaches the next model call of one of its
sessions, appended (so the provider's prompt cache still holds), and stays there on resume.

L0 is both the inbox and the journal. ``gliding steer JOB MSG`` (the daemon's
``POST /v1/jobs/{job}/steer``) archives the message as ``gliding://job/<job>/steer/<n>``,
numbered from 1, before it answers, so a steer survives a crash or a restart of the daemon.
Before each model call a session asks ``Steering.take``: the steers no session has taken yet
are claimed by archiving ``.../steer/<n>/taken`` (``<session> <turn>``; the archive refuses
other bytes at an IRI it holds, so when two sessions race, one wins) and given to this call;
a resumed job replays the turns before the crash, and each turn takes back exactly the steers
it took the first time, so the replayed prompts are the prompts that were sent. Agents on a
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

    async def take(self, session: str, turn: int, *, claim: bool = True
                   ) -> list[tuple[str, str, bool]]:
        """The steers for ``session``'s model call of turn ``turn``, in order, as
        ``(iri, text, new)``: those this turn took before (a replay: ``new`` False) and, with
        ``claim`` (a turn being played, not replayed), those no session had taken, which it
        takes now (``new`` True).

        Raises:
            ArchiveError: the archive cannot be read or written.
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
                if taken is None and not claim:
                    break  # a replayed turn takes nothing new; a later turn will
                new = taken is None
                if new:
                    try:
                        await self.archive.put(taken_iri(self.job, n), me, kind="steer-taken",
                                               meta={"session": session, "turn": turn})
                    except ArchiveError:  # another session took it first
                        taken = await self.archive.find(taken_iri(self.job, n))
                        new = False
                taker = me if new else (taken.content or b"").decode() if taken else ""
                known = self._known[n] = (text, taker)
                if new:
                    out.append((steer_iri(self.job, n), text, True))
                    continue
            if known[1] == me:
                out.append((steer_iri(self.job, n), known[0], False))
        return out


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

