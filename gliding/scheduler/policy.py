"""Supervisor policy, pure: choose a pipeline and decide what follows each check and decision.

Rules of ``pipeline: auto`` (documented in docs/pipeline.md):

1. emergency — the goal mentions fixing something (fix, bug, crash, error, broken, failing):
   DA → CA → AA; there is nothing to plan, the fault shows the way.
2. simple — the goal has at most ``scheduler.simple_goal_max_words`` words, is one sentence and
   the task has no success checks: DA alone.
3. standard — everything else: PA → DA → CA → AA.

A pipeline without CA still has its checks verified by the runner at the end, for the report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

STANDARD = ("PA", "DA", "CA", "AA")
EMERGENCY = ("DA", "CA", "AA")
SIMPLE = ("DA",)
_EMERGENCY_WORDS = re.compile(r"\b(fix|fixes|bug|bugs|crash|crashes|error|errors|broken|failing)\b",
                              re.IGNORECASE)


@dataclass(frozen=True)
class PipelineChoice:
    roles: tuple[str, ...]
    kind: str
    reason: str


def choose_pipeline(
    goal: str, pipeline: str | Sequence[str], *, has_checks: bool, simple_max_words: int
) -> PipelineChoice:
    if not isinstance(pipeline, str):
        return PipelineChoice(tuple(pipeline), "explicit", "pipeline given in the task file")
    if _EMERGENCY_WORDS.search(goal):
        return PipelineChoice(EMERGENCY, "emergency", "goal asks to fix something")
    words = len(goal.split())
    sentences = len([s for s in re.split(r"[.!?]\s", goal.strip()) if s])
    if not has_checks and words <= simple_max_words and sentences <= 1:
        return PipelineChoice(SIMPLE, "simple", f"one short sentence ({words} words), no checks")
    return PipelineChoice(STANDARD, "standard", "default for goals that need a plan or checks")


AfterCheck = Literal["accept", "correct", "give_up"]


def after_check(passed: bool, corrections_used: int, max_corrections: int) -> AfterCheck:
    """CA's verdict: accept, send back to DA (bounded), or stop correcting."""
    if passed:
        return "accept"
    return "correct" if corrections_used < max_corrections else "give_up"


AfterDecision = Literal["done", "next_cycle", "escalate"]


def after_decision(decision: str, cycle: int, max_cycles: int) -> AfterDecision:
    """AA's decision, bounded: another cycle only while cycles remain (``cycle`` counts from 1)."""
    if decision == "another_cycle":
        return "next_cycle" if cycle < max_cycles else "escalate"
    return "escalate" if decision == "escalate" else "done"


def decision_options(checks_passed: bool | None) -> tuple[str, ...]:
    """What AA may choose: no new cycle when every check passed, no "done" when one failed."""
    if checks_passed is None:
        return ("done", "another_cycle", "escalate")
    return ("done", "escalate") if checks_passed else ("another_cycle", "escalate")


Outcome = Literal["success", "failed", "escalated", "budget_exceeded", "error"]


def outcome(checks_passed: bool | None, decision: str | None, stopped: str | None) -> Outcome:
    """The job's outcome from its last check report, AA's last word and why it stopped early."""
    if stopped == "budget":
        return "budget_exceeded"
    if stopped == "error":
        return "error"
    if decision == "escalate" and checks_passed is not True:
        return "escalated"
    if checks_passed is False:
        return "failed"
    return "success"
