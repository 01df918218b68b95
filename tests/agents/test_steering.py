"""Steering's inbox and journal in L0: a steer is taken once (two sessions racing: one wins),
and a resumed job's replayed turns take back exactly what they took, and nothing new."""

from __future__ import annotations

from pathlib import Path

import anyio

from gliding.agents.steer import Steering, post_steer, steer_iri
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive

JOB = "job-steer"


def test_a_steer_is_taken_once_and_replayed_where_it_was_taken(tmp_path: Path) -> None:
    async def main() -> None:
        with Archive.open(tmp_path, JOB) as archive:
            port = LocalArchive(archive, tmp_path)
            first, second = Steering(port, JOB), Steering(port, JOB)
            assert await first.take("DA.1.a", 1) == []
            post_steer(archive, "use the staging database")
            # both step DAs ask before their next call: one of them gets it
            got = [await first.take("DA.1.a", 2), await second.take("DA.1.b", 4)]
            assert sorted(map(len, got)) == [0, 1]
            winner = "DA.1.a" if got[0] else "DA.1.b"
            turn = 2 if got[0] else 4
            assert got[0 if got[0] else 1] == [(steer_iri(JOB, 1), "use the staging database",
                                                True)]
            post_steer(archive, "and then stop")
            # a resumed job: a new process replays its turns
            resumed = Steering(port, JOB)
            assert await resumed.take(winner, turn - 1, claim=False) == []
            assert await resumed.take(winner, turn, claim=False) == [
                (steer_iri(JOB, 1), "use the staging database", False)]
            # a replayed turn takes nothing new; the first played turn does
            assert await resumed.take(winner, turn + 1, claim=False) == []
            assert await resumed.take(winner, turn + 2) == [
                (steer_iri(JOB, 2), "and then stop", True)]
            assert await Steering(port, JOB).take("DA.1.c", 1) == []  # all taken

    anyio.run(main)
