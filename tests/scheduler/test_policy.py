"""The supervisor policy is pure: properties over all inputs, plus the documented examples."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gliding.scheduler import policy


def test_explicit_pipeline_is_kept() -> None:
    choice = policy.choose_pipeline("anything", ("DA", "CA"), has_checks=True, simple_max_words=12)
    assert choice.roles == ("DA", "CA") and choice.kind == "explicit"


def test_fix_goals_are_emergencies() -> None:
    choice = policy.choose_pipeline("Fix the crash in parser.py when input is empty", "auto",
                                    has_checks=True, simple_max_words=12)
    assert choice.roles == ("DA", "CA", "AA") and choice.kind == "emergency"


def test_short_goal_without_checks_goes_straight_to_da() -> None:
    choice = policy.choose_pipeline("List the files", "auto", has_checks=False,
                                    simple_max_words=12)
    assert choice.roles == ("DA",)


def test_checks_need_the_standard_pipeline() -> None:
    choice = policy.choose_pipeline("List the files", "auto", has_checks=True, simple_max_words=12)
    assert choice.roles == ("PA", "DA", "CA", "AA")


def test_two_sentences_are_not_simple() -> None:
    choice = policy.choose_pipeline("Read a. Then write b.", "auto", has_checks=False,
                                    simple_max_words=12)
    assert choice.kind == "standard"


@given(st.booleans(), st.integers(0, 10), st.integers(0, 10))
def test_corrections_are_bounded(passed: bool, used: int, cap: int) -> None:
    step = policy.after_check(passed, used, cap)
    if passed:
        assert step == "accept"
    elif used < cap:
        assert step == "correct"
    else:
        assert step == "give_up"


@given(st.sampled_from(["done", "another_cycle", "escalate", "nonsense"]),
       st.integers(1, 10), st.integers(1, 10))
def test_cycles_are_bounded(decision: str, cycle: int, cap: int) -> None:
    step = policy.after_decision(decision, cycle, cap)
    if step == "next_cycle":
        assert decision == "another_cycle" and cycle < cap
    if decision == "done":
        assert step == "done"


def test_simulated_supervisor_never_exceeds_its_bounds() -> None:
    """Drive the policy like the runner does, with an adversary that always fails and retries."""
    for max_corr in range(4):
        for max_cycles in range(1, 4):
            cycles = corrections = 0
            while cycles < max_cycles:
                cycles += 1
                attempt = 0
                while policy.after_check(False, attempt, max_corr) == "correct":
                    attempt += 1
                    corrections += 1
                if policy.after_decision("another_cycle", cycles, max_cycles) != "next_cycle":
                    break
            assert cycles == max_cycles
            assert corrections == max_corr * max_cycles


@given(st.sampled_from([None, True, False]))
def test_decision_options_follow_the_evidence(passed: bool | None) -> None:
    options = policy.decision_options(passed)
    if passed is True:
        assert "another_cycle" not in options
    if passed is False:
        assert "done" not in options
    assert "escalate" in options


def test_outcomes() -> None:
    assert policy.outcome(True, "done", None) == "success"
    assert policy.outcome(False, "escalate", None) == "escalated"
    assert policy.outcome(False, None, None) == "failed"
    assert policy.outcome(True, "done", "budget") == "budget_exceeded"
    assert policy.outcome(None, None, "error") == "error"


# ---- exploratory: goals with independent parts ----------------------------------------------
def auto(goal: str, has_checks: bool = True) -> policy.PipelineChoice:
    return policy.choose_pipeline(goal, "auto", has_checks=has_checks, simple_max_words=12)


def test_an_enumeration_of_parts_each_naming_its_own_file_is_exploratory() -> None:
    choice = auto("Write 1) a.txt with hello 2) b.txt with world 3) notes.md on both words")
    assert choice.kind == "exploratory" and choice.roles == ("PA", "DA", "CA", "AA")
    assert choice.reason == "the goal lists 3 independent parts (a.txt; b.txt; notes.md)"


def test_bullets_semicolons_and_also_list_parts_too() -> None:
    assert auto("Set up the project:\n- write app.py\n- write README.md\n").kind == "exploratory"
    assert auto("Write report.md; write data/raw.csv").kind == "exploratory"
    assert auto("Write report.md and also write data.csv").kind == "exploratory"


def test_exploratory_is_conservative() -> None:
    for goal in ("Write a.txt, then b.txt",  # one part
                 "1) write a.py 2) test a.py",  # the same file twice: not independent
                 "1) write a.py 2) then run b.py",  # ordered
                 "1) write a.py 2) write the docs",  # a part without a file
                 "2) write a.py 3) write b.py",  # not numbered from 1
                 "Summarise the paper; e.g. the results",  # "e.g" is no file
                 "1) write a.py 2) write b.py after a.py"):
        assert auto(goal).kind == "standard", goal


def test_emergency_and_simple_come_first_and_the_task_file_may_ask_for_it() -> None:
    assert auto("Fix 1) a.py 2) b.py").kind == "emergency"
    assert auto("Write a.txt; write b.txt", has_checks=False).kind == "simple"
    asked = policy.choose_pipeline("Say hi", "exploratory", has_checks=False,
                                   simple_max_words=12)
    assert asked.kind == "exploratory" and asked.reason == "pipeline: exploratory in the task file"


@given(st.text(max_size=200))
def test_independent_parts_never_share_a_file(goal: str) -> None:
    parts = policy.independent_parts(goal)
    assert parts == [] or 2 <= len(parts) <= policy.MAX_PARTS
    files = [f for p in parts for f in p]
    assert len(files) == len(set(files)) and all(parts)
