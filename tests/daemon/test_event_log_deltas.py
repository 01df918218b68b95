"""The daemon's event log keeps a model's streamed text (``model.delta``) only up to half its
size: past that the deltas are left out and every other event is still written, so a long
reply cannot crowd out the job's progress (gliding/daemon/events.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gliding.core.events import ModelDelta, Turn, event_data
from gliding.daemon import events as event_log
from gliding.daemon.events import EventLog


def test_deltas_stop_at_half_the_log_and_other_events_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_log, "MAX_LOG_BYTES", 20_000)
    log = EventLog(tmp_path, now=lambda: 1.0)
    turn = Turn(role="DA", session="DA", turn=1, action="finish", summary="done",
                prompt_tokens=1, completion_tokens=1, job_prompt_tokens=1,
                job_completion_tokens=1, job_cost_usd=0.0, job_unpriced_calls=0)

    async def main() -> list[str]:
        job = await log.of("job-1")
        for seq in range(1, 60):  # about 300 bytes each: 18 kB in all
            log.record(job, ModelDelta.name, event_data(ModelDelta("DA", 1, seq, "x" * 200)))
        log.record(job, Turn.name, event_data(turn))
        assert job.dropped == 59 - sum(1 for _, r, _ in log._pending
                                       if r and r["event"] == ModelDelta.name)
        return [record["event"] for _, record, _ in log._pending if record]

    names = anyio.run(main)
    kept = names.count(ModelDelta.name)
    assert 20 < kept < 40  # up to half of 20 kB, then none
    assert names == [ModelDelta.name] * kept + [Turn.name]
