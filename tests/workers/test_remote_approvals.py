"""A job whose DA runs on a broker-only worker (its L0 only through a real mosquitto) asks a
person before a call: the request reaches the job's archive, the answer written there reaches
the waiting worker, which runs the approved call and tells the model of the denied one; a steer
reaches the remote session's next model call the same way."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import anyio
import pytest

from gliding.agents.approvals import answer
from gliding.agents.steer import post_steer
from gliding.bus.messages import JobEvent
from gliding.memory.archive.store import Archive
from gliding.testing.servers import Mosquitto
from tests.workers.test_remote_agents import broker, run_with_workers  # noqa: F401 - fixture

TASK = """\
goal: Create hello.txt containing "Hello"
pipeline: [DA]
workspace: ws
checks:
  - file_contains: {path: hello.txt, text: "Hello"}
approvals:
  ask: unmatched
  allow: [{tool: bash, command: "echo Hello > hello.txt"}]
"""
REPLIES = """\
DA:
  - bash: {command: "echo Hello > hello.txt"}
  - bash: {command: "echo Bye >> hello.txt"}
  - bash: {command: "echo seen >> steered.txt"}
  - finish: {summary: wrote hello.txt}
"""


@pytest.mark.heavy
def test_a_remote_worker_waits_for_the_answer_and_takes_a_steer(
        tmp_path: Path, broker: Mosquitto) -> None:  # noqa: F811
    (tmp_path / "task.yaml").write_text(TASK)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    def person(event: JobEvent) -> None:  # answers from beside the job's archive
        if event.event != "approval.requested":
            return
        approve = event.data["approval"] == "DA-3"

        def write() -> None:
            with Archive.open(tmp_path / "data", event.job, create=False) as archive:
                if not approve:
                    post_steer(archive, "Skip the Bye line")
                answer(archive, event.data["approval"], approve=approve,
                       note="" if approve else "no Bye")

        threading.Thread(target=write).start()

    handle, _services, events = anyio.run(functools.partial(
        run_with_workers, tmp_path, broker.url, (True,), on_event=person))
    assert handle.report.outcome == "success", handle.report
    asked = [e.data["approval"] for e in events if e.event == "approval.requested"]
    assert asked == ["DA-2", "DA-3"]
    assert (tmp_path / "ws" / "hello.txt").read_text() == "Hello\n"  # the Bye was denied
    assert (tmp_path / "ws" / "steered.txt").read_text() == "seen\n"
    [steered] = [e.data for e in events if e.event == "steer.taken"]
    assert steered["text"] == "Skip the Bye line" and steered["turn"] == 3
    started = [e.data for e in events if e.event == "role.started"]
    assert started[0]["worker"].startswith("w0")  # the remote worker ran DA
