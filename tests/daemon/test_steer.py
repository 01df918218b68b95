"""Steering a running job through the daemon: the message reaches the next model call of the
running session, appended after what it had seen (so the prompt before it is unchanged), is a
job event, and lives in the archive; a job that is not running is not steered."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from gliding.daemon.queue import JobStateError
from gliding.errors import UsageError
from gliding.memory.archive.store import Archive
from tests.daemon.daemon_support import (
    TASK,
    events_of,
    replies,
    serving,
    wait_event,
    wait_for,
    write_replies,
)

SAY = "Stop after step 3 and write DONE into trace.txt"


def prompts(tmp: Path, job: str) -> dict[int, list[dict]]:
    """DA's prompt of each turn, as archived."""
    with Archive.open(tmp / "data", job, create=False) as archive:
        return {item.meta["turn"]: json.loads(archive.get(item.iri).text())["prompt"]
                for item in archive.list(kind="turn")}


def test_a_steer_reaches_the_next_model_call_appended_and_is_an_event(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=4, sleep_s=0.4))

    async def main() -> tuple[str, list[dict]]:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_event(service, job, "turn")  # DA is at work
            iri = await service.steer(job, SAY)
            assert iri == f"gliding://job/{job}/steer/1"
            return job, await events_of(service, job)

    job, seen = anyio.run(main)
    assert seen[-1]["data"] == {"outcome": "success"}
    [steered] = [e["data"] for e in seen if e["event"] == "steer.taken"]
    assert steered["text"] == SAY and steered["session"] == "DA"
    turns = prompts(tmp_path, job)
    took = steered["turn"]
    before, after = turns[took - 1], turns[took]
    assert after[: len(before)] == before  # appended: what the cache holds is unchanged
    said = [m for m in after[len(before):] if m["role"] == "user"]
    assert said and said[-1]["content"].endswith(SAY)
    assert all(SAY not in json.dumps(turns[t]) for t in turns if t < took)


def test_only_a_running_or_paused_job_is_steered_and_a_message_has_bounds(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=1))

    async def main() -> None:
        async with serving(tmp_path) as service:
            job = (await service.submit(TASK.format(workspace="ws"), model=model)).job
            await wait_for(service, job, "finished")
            with pytest.raises(JobStateError, match="only a running or paused job"):
                await service.steer(job, SAY)

    anyio.run(main)
    with Archive.open(tmp_path / "data", "job-x", create=True) as archive:
        from gliding.agents.steer import STEER_CHARS, post_steer

        with pytest.raises(UsageError, match="must say something"):
            post_steer(archive, "  \n")
        with pytest.raises(UsageError, match="at most"):
            post_steer(archive, "x" * (STEER_CHARS + 1))
        assert post_steer(archive, "one") == "gliding://job/job-x/steer/1"
        assert post_steer(archive, "two") == "gliding://job/job-x/steer/2"
