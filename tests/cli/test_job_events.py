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
