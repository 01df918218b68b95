"""Steering's inbox and journal in L0: an unclaimed steer is offered to every session until one
is answered with it (the first claim wins; the other keeps having seen it), a failed call
claims nothing, and a resumed job's turns take back what they claimed, at the same place."""

from __future__ import annotations

from pathlib import Path

import anyio

from gliding.agents.steer import Steering, post_steer, steer_iri
from gliding.memory.archive.port import LocalArchive
from gliding.memory.archive.store import Archive

JOB = "job-steer"
FIRST = (steer_iri(JOB, 1), "use the staging database")


def test_a_steer_is_claimed_once_and_replayed_where_it_was_claimed(tmp_path: Path) -> None:
    async def main() -> None:
        with Archive.open(tmp_path, JOB) as archive:
            port = LocalArchive(archive, tmp_path)
            a, b = Steering(port, JOB), Steering(port, JOB)
            assert await a.take("DA.1.a", 1) == []
            post_steer(archive, FIRST[1])
            # both step DAs see it before their next call
            assert await a.take("DA.1.a", 2) == [(*FIRST, True)]
            assert await b.take("DA.1.b", 4) == [(*FIRST, True)]
            # a's call failed: it claims nothing, and sees it again at its next call
            assert await a.take("DA.1.a", 3) == [(*FIRST, True)]
            # b is answered first and claims it; a's later claim finds it taken
            assert await b.claim("DA.1.b", 4, [FIRST[0]]) == [FIRST[0]]
            assert await a.claim("DA.1.a", 3, [FIRST[0]]) == []
            assert b.text(FIRST[0]) == FIRST[1]
            assert await a.take("DA.1.a", 4) == []
            post_steer(archive, "and then stop")
            # a resumed job: a new process replays b's turns
            resumed = Steering(port, JOB)
            assert await resumed.take("DA.1.b", 3) == [(steer_iri(JOB, 2), "and then stop",
                                                        True)]
            assert await resumed.take("DA.1.b", 4) == [(*FIRST, False),
                                                       (steer_iri(JOB, 2), "and then stop",
                                                        True)]

    anyio.run(main)
