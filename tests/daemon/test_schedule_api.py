"""Schedules through the daemon's HTTP API over a real ``JobService`` whose clock the test
sets: the token, refusals (4xx, nothing kept), a due time submitting a real job named after
its schedule that runs to success, list and remove, and the schedule kept across a restart of
the service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gliding.daemon.api import build_app
from gliding.daemon.service import JobService
from tests.daemon.daemon_support import (
    TASK,
    TIMEOUT_S,
    replies,
    settings_for,
    wait_for,
    write_replies,
)

pytestmark = pytest.mark.timeout(300)
TOKEN = "t0ken-for-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
START = 1_780_000_030.0  # 2026-05-28T20:27:10Z: 50 s before a minute starts


class SetClock:
    """The service's ``now``: stands still until the test moves it."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


@asynccontextmanager
async def api(tmp: Path, clock: SetClock
              ) -> AsyncIterator[tuple[JobService, httpx.AsyncClient]]:
    service = JobService(settings_for(tmp), base_dir=tmp, now=clock)
    async with service.running():
        app = await anyio.to_thread.run_sync(build_app, service, TOKEN)  # CPU, off the loop
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1",
                                     headers=AUTH) as client:
            yield service, client


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json()["error"])


def test_schedules_over_the_api_submit_real_jobs_and_survive_a_restart(tmp_path: Path) -> None:
    model = write_replies(tmp_path, "r.yaml", replies())
    body = {"name": "trace", "cron": "* * * * *", "task": TASK.format(workspace="ws"),
            "model": model, "base_dir": str(tmp_path)}
    clock = SetClock(START)

    async def main() -> None:
        async with api(tmp_path, clock) as (service, client):
            anonymous = await client.get("/v1/schedules", headers={"Authorization": ""})
            assert error_of(anonymous, 401)["code"] == "auth.failed"
            refused = [
                (body | {"cron": "*/15 * *"}, 400, "schedule.invalid", "not 5"),
                (body | {"cron": "0 25 * * *"}, 400, "schedule.invalid", "Bad hour"),
                (body | {"tz": "Europe/Atlantis"}, 400, "schedule.invalid", "unknown time zone"),
                (body | {"name": "a/b"}, 400, "schedule.invalid", "is not a name"),
                (body | {"task": "goal: [unclosed\n"}, 400, "task.invalid", "task.yaml"),
                (body | {"missed": "twice"}, 422, "usage", "missed"),
                (body | {"overlap": "kill"}, 422, "usage", "overlap"),
            ]
            for bad, http_status, code, says in refused:
                error = error_of(await client.post("/v1/schedules", json=bad), http_status)
                assert error["code"] == code and says in error["message"], error
            assert (await client.get("/v1/schedules")).json() == {"schedules": []}

            added = await client.post("/v1/schedules", json=body)
            assert added.status_code == 201, added.text
            assert added.json()["next_due"] == START + 50
            assert "task" not in added.json() and added.json()["missed"] == "skip"
            taken = error_of(await client.post("/v1/schedules", json=body), 409)
            assert taken["code"] == "schedule.exists" and taken["hint"]

            clock.at = START + 51  # a minute starts: the loop submits the job
            service.schedules.wake()
            with anyio.fail_after(TIMEOUT_S):
                while not (jobs := (await client.get("/v1/jobs")).json()["jobs"]):
                    await anyio.sleep(0.02)
            [job] = jobs
            assert job["name"] == "trace@2026-05-28T20:28+00:00"
            status = await wait_for(service, job["job"], "finished")
            assert status["outcome"] == "success", status
            [listed] = (await client.get("/v1/schedules")).json()["schedules"]
            assert listed["last_job"] == job["job"] and listed["last_due"] == START + 50
            assert listed["next_due"] == START + 110

        clock.at = START + 145  # back 35 s after the next due time: missed, skipped
        async with api(tmp_path, clock) as (service, client):
            with anyio.fail_after(TIMEOUT_S):  # the loop's first look skips 20:29
                while (kept := (await client.get("/v1/schedules")).json()["schedules"][0]
                       )["last_due"] != START + 110:
                    await anyio.sleep(0.02)
            assert kept["name"] == "trace" and kept["next_due"] == START + 170
            assert kept["last_job"] == job["job"]
            assert len((await client.get("/v1/jobs")).json()["jobs"]) == 1
            removed = await client.delete("/v1/schedules/trace")
            assert removed.status_code == 200 and removed.json()["name"] == "trace"
            missing = error_of(await client.delete("/v1/schedules/trace"), 404)
            assert missing["code"] == "not_found"
            assert (await client.get("/v1/schedules")).json() == {"schedules": []}

    anyio.run(main)
