"""scheduler.*: each key, set through GLIDING_* variables, changes how a scripted job runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gliding.config.settings import Settings
from tests.settings_effects.effects_support import run_team, settings_from, write_task

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
