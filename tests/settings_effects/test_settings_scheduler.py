"""scheduler.*: each key, set through GLIDING_* variables, changes how a scripted job runs."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gliding.bus.messages import JobEvent
from gliding.config.settings import Settings
from gliding.core.messages import Message
from gliding.daemon.compose import run_job
from gliding.errors import ConfigError
from gliding.llm.port import LLMRequest
from gliding.testing import ScriptedLLM, call
from gliding.testing.latency import LatencyLLM
from tests.settings_effects.effects_support import (
    run_scripted,
    run_team,
    settings_from,
    team,
    write_task,
)

DEFAULTS = Settings().scheduler

FAILING_TASK = """\
goal: Create hello.txt containing "Hello, World!"
pipeline: {pipeline}
checks:
  - file_contains: {{path: hello.txt, text: "Hello, World!"}}
"""


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- scheduler.max_corrections ----------------------------------------------------------------


@pytest.mark.parametrize("max_corrections", [None, 0, 1, 4])
def test_max_corrections_bounds_how_often_ca_sends_da_back(
    tmp: Path, max_corrections: int | None
) -> None:
    env = {} if max_corrections is None else {
        "GLIDING_SCHEDULER__MAX_CORRECTIONS": str(max_corrections)}
    expected = DEFAULTS.max_corrections if max_corrections is None else max_corrections
    task = write_task(tmp, FAILING_TASK.format(pipeline="[DA, CA]"))

    job = run_team(task, settings_from(tmp, env), content="Goodbye")  # DA never fixes it

    report = job.handle.report
    assert job.started("CA") == 1 + expected
    assert job.started("DA") == 1 + expected
    assert report.corrections == expected
    assert report.cycles == 1
    assert report.outcome == "failed"
    assert [r.passed for r in report.checks] == [False]


def test_a_correction_hands_da_the_failed_check_as_its_goal(tmp: Path) -> None:
    task = write_task(tmp, FAILING_TASK.format(pipeline="[DA, CA]"))

    job = run_team(task, settings_from(tmp, {"GLIDING_SCHEDULER__MAX_CORRECTIONS": "1"}),
                   content="Goodbye")

    da_firsts = [r for r in job.llm.requests if r.meta["role"] == "DA"
                 and r.messages[-1].role == "user" and "Goal" in r.messages[-1].content]
    assert len(da_firsts) == 2
    assert da_firsts[1].messages[-1].content.startswith(
        'Goal: Write the file hello.txt containing the text "Hello, World!"')


# --- scheduler.max_cycles ---------------------------------------------------------------------


@pytest.mark.parametrize("max_cycles", [None, 1, 3])
def test_max_cycles_bounds_the_pdca_cycles(tmp: Path, max_cycles: int | None) -> None:
    env = {"GLIDING_SCHEDULER__MAX_CORRECTIONS": "0"}
    if max_cycles is not None:
        env["GLIDING_SCHEDULER__MAX_CYCLES"] = str(max_cycles)
    expected = DEFAULTS.max_cycles if max_cycles is None else max_cycles
    task = write_task(tmp, FAILING_TASK.format(pipeline="[PA, DA, CA, AA]"))

    job = run_team(task, settings_from(tmp, env), content="Goodbye", decision="another_cycle")

    report = job.handle.report
    assert report.cycles == expected
    for role in ("PA", "DA", "CA", "AA"):
        assert job.started(role) == expected, role
    assert report.decision == "escalate"  # AA asked for more, but the cycles ran out
    assert report.outcome == "escalated"


# --- scheduler.simple_goal_max_words ----------------------------------------------------------

NINE_WORDS = "Write a short poem about gliding over green hills"


@pytest.mark.parametrize(
    ("limit", "roles", "kind"),
    [
        (None, ["DA"], "simple"),
        ("9", ["DA"], "simple"),
        ("8", ["PA", "DA", "CA", "AA"], "standard"),
        ("0", ["PA", "DA", "CA", "AA"], "standard"),
    ],
)
def test_simple_goal_max_words_picks_the_auto_pipeline(
    tmp: Path, limit: str | None, roles: list[str], kind: str
) -> None:
    assert len(NINE_WORDS.split()) == 9 <= DEFAULTS.simple_goal_max_words
    env = {} if limit is None else {"GLIDING_SCHEDULER__SIMPLE_GOAL_MAX_WORDS": limit}
    task = write_task(tmp, f"goal: {NINE_WORDS}\npipeline: auto\n")

    job = run_team(task, settings_from(tmp, env), path="poem.txt", content="Over green hills")

    report = job.handle.report
    assert list(report.pipeline.roles) == roles
    assert report.pipeline.kind == kind
    assert job.roles_called() == roles
    assert report.outcome == "success"
    assert (tmp / "workspace" / "poem.txt").read_text(encoding="utf-8") == "Over green hills"


# --- scheduler.max_parallel -------------------------------------------------------------------

STEPS = 4
EXPLORATORY_TASK = (
    "goal: Write s1.txt, s2.txt, s3.txt and s4.txt\npipeline: exploratory\nchecks:\n"
    + "".join(f'  - file_contains: {{path: s{k}.txt, text: "step s{k}"}}\n'
              for k in range(1, STEPS + 1)))


def step_crew(request: LLMRequest) -> Message:
    """PA plans STEPS independent steps; the DA of step sK writes sK.txt, then finishes; CA and
    AA as in ``team``."""
    role = request.meta["role"]
    if role == "PA":
        return call("finish", steps=[{"id": f"s{k}", "text": f"Write s{k}.txt"}
                                     for k in range(1, STEPS + 1)])
    if role == "DA":
        step = str(request.meta["session"]).rsplit(".", 1)[-1]  # DA.<cycle>.<step>
        # callable once the file is written
        if any(t.name == "finish" for t in request.callable_tools or ()):
            return call("finish", summary=f"wrote {step}.txt")
        return call("write_file", path=f"{step}.txt", content=f"step {step}")
    return team()(request)


def da_steps_at_once(events: list[JobEvent]) -> int:
    """The most DA step sessions between their role.started and role.finished at once."""
    running, most = 0, 0
    for e in events:
        if e.data.get("role") == "DA" and e.data.get("step"):
            running += {"role.started": 1, "role.finished": -1}.get(e.event, 0)
            most = max(most, running)
    return most


@pytest.mark.heavy
@pytest.mark.parametrize("max_parallel", [1, 3])
def test_max_parallel_bounds_the_step_sessions_that_run_at_once(
    tmp: Path, max_parallel: int
) -> None:
    assert DEFAULTS.max_parallel > 3  # both values hold the four steps back
    task = write_task(tmp, EXPLORATORY_TASK)
    settings = settings_from(tmp, {"GLIDING_SCHEDULER__MAX_PARALLEL": str(max_parallel)})
    llm = LatencyLLM(ScriptedLLM([step_crew] * 50), latency_s=0.2)  # overlaps show in .peak
    events: list[JobEvent] = []

    handle = anyio.run(lambda: run_job(task, settings, llm=llm, on_event=events.append))

    report = handle.report
    assert report is not None and report.outcome == "success", report
    assert report.pipeline.kind == "exploratory" and len(report.plan) == STEPS
    steps = [e.data["step"] for e in events
             if e.event == "role.started" and e.data.get("role") == "DA"]
    assert sorted(steps) == [f"s{k}" for k in range(1, STEPS + 1)]  # each step once
    assert da_steps_at_once(events) == max_parallel
    assert llm.peak == max_parallel  # the model never had more step DAs' calls in flight
    for k in range(1, STEPS + 1):
        assert (tmp / "workspace" / f"s{k}.txt").read_text(encoding="utf-8") == f"step s{k}"


# --- scheduler.loop_limit ---------------------------------------------------------------------

LOOKING_TASK = "goal: Look at the workspace and write nothing\npipeline: [DA]\n"


@pytest.mark.parametrize(("limit", "outcome", "runs"), [(None, "loop_detected", 2),
                                                        ("2", "loop_detected", 1),
                                                        ("4", "loop_detected", 3),
                                                        ("0", "success", 5)])
def test_loop_limit_is_how_often_one_call_may_come_in_a_row(
    tmp: Path, limit: str | None, outcome: str, runs: int
) -> None:
    assert DEFAULTS.loop_limit == 3
    env = {} if limit is None else {"GLIDING_SCHEDULER__LOOP_LIMIT": limit}
    task = write_task(tmp, LOOKING_TASK)
    same = [call("list_dir", path=".") for _ in range(5)]

    job = run_scripted(task, settings_from(tmp, env),
                       {"DA": [*same, call("finish", summary="looked")]})

    report = job.handle.report
    assert report.outcome == outcome
    assert len(job.results()) == runs  # the call that completes the row is not run
    tripped = [e for e in job.events if e.event == "guard.tripped"]
    assert len(tripped) == (outcome == "loop_detected")
    if tripped:
        assert report.stopped == tripped[0].data["detail"]


def test_loop_limit_of_one_is_refused(tmp: Path) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.loop_limit.*at least 2"):
        settings_from(tmp, {"GLIDING_SCHEDULER__LOOP_LIMIT": "1"})
