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
