"""What the daemon tests share: scripted task files, settings on a temporary data directory, a
running ``JobService``, and waiting for what its events say.

Jobs run on the scripted model (``scripted:<replies file>``) with the default command sandbox
(bubblewrap), DA only: each takes well under a second unless its bash steps sleep on purpose.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from gliding.config.loader import load_settings
from gliding.config.settings import Settings
from gliding.daemon.service import JobService

TIMEOUT_S = 100  # one job or one wait: seconds on an idle machine, far more on a loaded one

TASK = """\
goal: Write the trace file
workspace: {workspace}
pipeline: [DA]
checks:
  - file_exists: trace.txt
"""


def replies(steps: int = 1, sleep_s: float = 0.0, marker: str = "step") -> str:
    """DA replies: ``steps`` bash calls that each append a line (and sleep), then finish."""
    pause = f" && sleep {sleep_s}" if sleep_s else ""
    calls = "".join(f'  - bash: {{command: "echo {marker}-{k} >> trace.txt{pause}"}}\n'
                    for k in range(1, steps + 1))
    return f"DA:\n{calls}  - finish: {{summary: done}}\n"


def settings_for(tmp: Path, **daemon: Any) -> Settings:
    overrides: dict[str, Any] = {"data_dir": str(tmp / "data"),
                                 "memory.vectors.enabled": False}
    overrides.update({f"daemon.{k}": v for k, v in daemon.items()})
    return load_settings(env={}, overrides=overrides)


def write_replies(tmp: Path, name: str, text: str) -> str:
    """The model string of a replies file written into ``tmp``."""
    (tmp / name).write_text(text, encoding="utf-8")
    return f"scripted:{tmp / name}"


@asynccontextmanager
async def serving(tmp: Path, **daemon: Any) -> AsyncIterator[JobService]:
    service = JobService(settings_for(tmp, **daemon), base_dir=tmp)
    async with service.running():
        yield service


async def events_of(service: JobService, job: str) -> list[dict[str, Any]]:
    """Follow ``job`` to the end of its stream (at most TIMEOUT_S); its events."""
    out: list[dict[str, Any]] = []
    with anyio.fail_after(TIMEOUT_S):
        async for record in service.events(job):
            out.append(record)
    return out


async def wait_for(service: JobService, job: str, *states: str) -> dict[str, Any]:
    """Poll until ``job`` is in one of ``states``; its status."""
    with anyio.fail_after(TIMEOUT_S):
        while True:
            status = await service.status(job)
            if status["state"] in states:
                return status
            await anyio.sleep(0.02)


async def wait_event(service: JobService, job: str, event: str) -> None:
    """Until ``job`` has recorded ``event`` (its first one of that name)."""
    with anyio.fail_after(TIMEOUT_S):
        async for record in service.events(job):
            if record["event"] == event:
                return
    raise AssertionError(f"job {job} ended without {event}")
