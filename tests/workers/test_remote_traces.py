"""A traced job whose agents run on a broker-only worker: the worker's spans join the job's
trace, its ``invoke_agent`` span a child of the job's ``gliding.job`` span (the work item
carries the W3C traceparent), each host exporting its own spans to the loopback receiver."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import anyio
import pytest

from gliding.testing.servers import Mosquitto
from tests.settings_effects.test_settings_traces import Receiver
from tests.workers.test_remote_agents import (
    REPLIES,
    TASK,
    broker,  # noqa: F401 - the fixture
    run_with_workers,
)

pytest.importorskip("opentelemetry.sdk")


@pytest.mark.heavy
def test_a_worker_s_spans_join_the_job_s_trace(tmp_path: Path,
                                               broker: Mosquitto) -> None:  # noqa: F811
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    with Receiver() as receiver:
        traced = {"traces.endpoint": receiver.url}
        handle, _services, _events = anyio.run(functools.partial(
            run_with_workers, tmp_path, broker.url, (True,), worker=traced, **traced))
        assert handle.report.outcome == "success", handle.report
        deadline = time.monotonic() + 30  # each side flushes when its work ends
        while not any(s.name == "gliding.job" for s in receiver.spans) or \
                sum(s.name.startswith("invoke_agent") for s in receiver.spans) < 4:
            assert time.monotonic() < deadline, [s.name for s in receiver.spans]
            time.sleep(0.1)
    spans = receiver.spans
    [job] = [s for s in spans if s.name == "gliding.job"]
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert sorted(s.name for s in agents) == ["invoke_agent AA", "invoke_agent CA",
                                              "invoke_agent DA", "invoke_agent PA"]
    assert {s.trace_id for s in spans} == {job.trace_id}  # one trace, both hosts
    assert all(s.parent_span_id == job.span_id for s in agents)
    calls = [s for s in spans if s.name.startswith(("chat ", "execute_tool "))]
    by_id = {s.span_id: s for s in agents}
    assert calls and all(s.parent_span_id in by_id for s in calls)
