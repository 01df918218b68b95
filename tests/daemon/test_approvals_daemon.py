"""Approvals through the daemon: a call no allow rule matches waits, is shown in the job's
status and events, and runs (unchanged) once approved; a denial or the timeout reaches the
agent with the note, and the call is not run; an answer binds to the call shown, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from gliding.agents.approvals import answer
from gliding.config.loader import load_settings
from gliding.daemon.service import JobService
from gliding.errors import JobStateError, NotFoundError, UsageError
from gliding.memory.archive.store import Archive
from tests.daemon.daemon_support import (
    TIMEOUT_S,
    events_of,
    replies,
    serving,
    wait_event,
    wait_for,
    write_replies,
)

ASKING = """\
goal: Write the trace file
workspace: ws
pipeline: [DA]
checks:
  - file_exists: trace.txt
approvals:
  ask: unmatched
  allow:
    - {tool: bash, command: "echo step-1 >> trace.txt"}
"""


def results(tmp: Path, job: str) -> list[str]:
    with Archive.open(tmp / "data", job, create=False) as archive:
        return [archive.get(item.iri).text() for item in archive.list(kind="result")]


async def waiting(service: Any, job: str, ident: str = "DA-2") -> dict[str, Any]:
    """The call ``ident`` of ``job`` once it waits for approval (as its status shows it)."""
    await wait_event(service, job, "approval.requested")
    with anyio.fail_after(TIMEOUT_S):
        while True:
            found = [a for a in (await service.status(job))["approvals_waiting"]
                     if a["approval"] == ident]
            if found:
                return found[0]
            await anyio.sleep(0.05)


def test_an_unmatched_call_waits_and_runs_unchanged_once_approved(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=2))

    async def main() -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
        async with serving(tmp_path) as service:
            job = (await service.submit(ASKING, model=model)).job
            waits = await waiting(service, job)
            assert (await service.status(job))["state"] == "running"
            found = await service.answer(job, None, approve=True, note="fine, go on",
                                         digest=waits["digest"])
            assert found["answer"]["approved"] is True
            return job, waits, await events_of(service, job)

    job, waits, seen = anyio.run(main)
    assert waits["approval"] == "DA-2" and waits["tool"] == "bash"
    assert waits["arguments"] == {"command": "echo step-2 >> trace.txt"}
    assert waits["reason"] == "no approvals.allow rule matches this call"
    assert seen[-1]["data"] == {"outcome": "success"}
    [asked] = [e["data"] for e in seen if e["event"] == "approval.requested"]
    assert asked["approval"] == "DA-2" and asked["digest"] == waits["digest"]
    [said] = [e["data"] for e in seen if e["event"] == "approval.answered"]
    assert said == {"session": "DA", "turn": 2, "approval": "DA-2", "approved": True,
                    "by": "person", "note": "fine, go on"}
    assert (tmp_path / "ws" / "trace.txt").read_text().split() == ["step-1", "step-2"]
    assert results(tmp_path, job)[1].endswith("(a person approved this call: fine, go on)")


def test_a_denial_reaches_the_agent_and_the_call_is_not_run(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=3))

    async def main() -> str:
        async with serving(tmp_path) as service:
            job = (await service.submit(ASKING, model=model)).job
            await waiting(service, job)
            await service.answer(job, "DA-2", approve=False, note="not step 2, skip it")
            await waiting(service, job, "DA-3")
            await service.answer(job, None, approve=True)
            await wait_for(service, job, "finished")
            return job

    job = anyio.run(main)
    assert (tmp_path / "ws" / "trace.txt").read_text().split() == ["step-1", "step-3"]
    denied = results(tmp_path, job)[1]
    assert denied == "error: a person denied this call: not step 2, skip it; it was not run"
    with Archive.open(tmp_path / "data", job, create=False) as archive:
        prompt = json.loads(archive.get(f"gliding://job/{job}/turn/DA/3").text())["prompt"]
    assert any("not step 2, skip it" in str(m.get("content")) for m in prompt)


def test_an_unanswered_call_is_denied_at_the_timeout_and_the_agent_is_told(
        tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=2))

    settings = load_settings(env={}, overrides={
        "data_dir": str(tmp_path / "data"), "memory.vectors.enabled": False,
        "approvals.timeout_s": 0.5})

    async def main() -> tuple[str, list[dict[str, Any]]]:
        service = JobService(settings, base_dir=tmp_path)
        async with service.running():
            job = (await service.submit(ASKING, model=model)).job
            return job, await events_of(service, job)

    job, seen = anyio.run(main)
    [said] = [e["data"] for e in seen if e["event"] == "approval.answered"]
    assert said["approved"] is False and said["by"] == "timeout"
    assert results(tmp_path, job)[1].startswith(
        "error: no one approved this call within 0.5s (approvals.timeout_s)")
    assert (tmp_path / "ws" / "trace.txt").read_text().split() == ["step-1"]


def test_an_answer_binds_to_the_call_shown_and_is_given_once(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=2))

    async def main() -> None:
        async with serving(tmp_path) as service:
            job = (await service.submit(ASKING, model=model)).job
            waits = await waiting(service, job)
            with pytest.raises(JobStateError, match="another call than the one you saw"):
                await service.answer(job, "DA-2", approve=True, digest="0" * 64)
            with pytest.raises(NotFoundError, match="no approval request DA-9"):
                await service.answer(job, "DA-9", approve=True)
            await service.answer(job, "DA-2", approve=True, digest=waits["digest"])
            with pytest.raises(JobStateError, match="answered already"):
                await service.answer(job, "DA-2", approve=False)
            await wait_for(service, job, "finished")
            with pytest.raises(JobStateError, match="is finished"):
                await service.answer(job, None, approve=True)

    anyio.run(main)
    with Archive.open(tmp_path / "data", "job-x", create=True) as archive:
        with pytest.raises(UsageError, match="has 0 calls waiting"):
            answer(archive, None, approve=True)
        with pytest.raises(UsageError, match="at most 2000"):
            answer(archive, None, approve=True, note="x" * 2001)


def test_the_wait_is_not_charged_to_the_wall_time_budget(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies(steps=2))
    task = ASKING.replace("pipeline: [DA]\n", "pipeline: [DA]\nbudgets: {wall_time_s: 2}\n")

    async def main() -> dict[str, Any]:
        async with serving(tmp_path) as service:
            job = (await service.submit(task, model=model)).job
            await waiting(service, job)
            await anyio.sleep(3)  # past the budget, waiting for a person
            await service.answer(job, None, approve=True)
            return await wait_for(service, job, "finished")

    done = anyio.run(main)
    assert done["outcome"] == "success", done
    assert (tmp_path / "ws" / "trace.txt").read_text().split() == ["step-1", "step-2"]


def test_an_answer_past_the_deadline_is_refused(tmp_path: Path) -> None:
    from gliding.agents.approvals import request_iri

    with Archive.open(tmp_path / "data", "job-x", create=True) as archive:
        archive.put(request_iri("job-x", "DA-2"), json.dumps({
            "tool": "bash", "arguments": {"command": "ls"}, "digest": "d" * 64,
            "deadline": 100.0}), kind="approval")
        with pytest.raises(JobStateError, match="past its deadline"):
            answer(archive, "DA-2", approve=True, now=101.0)
        assert answer(archive, "DA-2", approve=False, now=99.0)["answer"]["approved"] is False
