"""The job events' one vocabulary: on the wire with its schema version, documented, and a
client skips an event it does not know instead of failing on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gliding.bus.messages import JobEvent, from_json
from gliding.cli.client import _sse, known_events
from gliding.core import events
from gliding.daemon.render import event_line, progress_line

DOCS = Path(__file__).resolve().parents[2] / "docs" / "daemon.md"


def test_a_job_event_carries_the_schema_version_on_the_wire() -> None:
    sent = JobEvent.of("j1", events.RoleStarted(role="DA", cycle=1, attempt=0))
    wire = json.loads(sent.to_json())
    assert wire["schema_version"] == events.SCHEMA_VERSION
    assert wire["data"] == {"role": "DA", "cycle": 1, "attempt": 0}  # unset options left out
    assert from_json(sent.to_json()) == sent


@pytest.mark.parametrize("name", sorted(events.EVENTS))
def test_every_event_reads_back_from_its_data_and_is_documented(name: str) -> None:
    cls = events.EVENTS[name]
    assert f"`{name}`" in DOCS.read_text(encoding="utf-8")
    required = [f for f in events.field_names(cls) if not f.endswith("?")]
    data = dict.fromkeys(required, 1)
    parsed = events.parse(name, data)
    assert isinstance(parsed, cls) and events.event_data(parsed) == data


def test_the_cli_skips_an_event_it_does_not_know_with_a_debug_log() -> None:
    newer = JobEvent(job="j1", event="role.paused", data={"role": "DA"}, schema_version=9)
    with capture_logs() as logs:
        assert progress_line(newer) is None
    assert [(e["event"], e["log_level"]) for e in logs] == [("cli.event.unknown", "debug")]
    assert events.parse("role.paused", {"role": "DA"}) is None
    assert events.parse("role.started", {"role": "DA"}) is None  # fields missing: skipped too


def test_the_daemon_client_drops_unknown_events_from_a_stream_and_keeps_the_rest() -> None:
    lines = []
    for seq, name in enumerate(("job.queued", "role.paused", "job.finished"), 1):
        record = {"seq": seq, "event": name, "data": {"outcome": "success"},
                  "schema_version": events.SCHEMA_VERSION}
        lines += [f"event: {name}", f"data: {json.dumps(record)}", ""]
    got = list(known_events(_sse(iter(lines))))
    assert [r["event"] for r in got] == ["job.queued", "job.finished"]
    assert event_line(got[-1]).endswith("finished: success")


def test_step_sessions_and_their_workers_are_told_apart_in_progress_lines() -> None:
    """Two step DAs run side by side: every line names its session (the step), and a line of
    work on a worker names the worker — the dispatcher's grant and the worker's own start."""
    def line(event: events.Event) -> str | None:
        return progress_line(JobEvent.of("j1", event))

    assert line(events.RoleStarted(role="DA", cycle=1, attempt=0)) == \
        "[DA] started (cycle 1, attempt 0)"
    assert line(events.RoleStarted(role="DA", cycle=1, attempt=0, step="s2",
                                   session="DA.1.s2", worker="w-7")) == \
        "[DA.1.s2] started (cycle 1, attempt 0, step s2) on worker w-7"
    assert line(events.WorkGranted(key="k", worker="w-7", role="DA", cycle=1, attempt=0,
                                   step="s2", session="DA.1.s2")) == \
        "[DA.1.s2] granted to worker w-7 (cycle 1, attempt 0, step s2)"
    turn = line(events.Turn(role="DA", session="DA.1.s3", turn=2, action="bash",
                            summary="bash(...) → exit code 0", prompt_tokens=10,
                            completion_tokens=1, job_prompt_tokens=30,
                            job_completion_tokens=3, job_cost_usd=0.0, job_unpriced_calls=0,
                            cost_free="scripted"))
    assert turn is not None and turn.startswith("[DA.1.s3 turn 2] bash(...)")
    assert line(events.RoleFinished(role="DA", status="finished", turns=2, replayed=0,
                                    step="s3", session="DA.1.s3", worker="w-8")) == \
        "[DA.1.s3] finished after 2 turn(s) on worker w-8"
