"""Supervisor policy, pure: choose a pipeline and decide what follows each check and decision.

Rules of ``pipeline: auto`` (documented in docs/pipeline.md):

1. emergency — the goal mentions fixing something (fix, bug, crash, error, broken, failing):
   do → check → act (DA → CA → AA); there is nothing to plan, the fault shows the way.
2. simple — the goal has at most ``scheduler.simple_goal_max_words`` words, is one sentence and
   the task has no success checks: the do role alone.
3. exploratory — the goal lists independent parts (``independent_parts``): plan → do×N in
   parallel → check → act.
4. standard — everything else: plan → do → check → act (PA → DA → CA → AA).

Pipelines are written as phases; each phase is played by its ``auto`` role of the role
registry (``gliding.config.roles``).

``pipeline: exploratory`` in a task file asks for the exploratory pipeline whatever the goal.

A pipeline without CA still has its checks verified by the runner at the end, for the report.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gliding.config.roles import Phase, auto_roles

STANDARD: tuple[Phase, ...] = ("plan", "do", "check", "act")
EMERGENCY: tuple[Phase, ...] = ("do", "check", "act")
SIMPLE: tuple[Phase, ...] = ("do",)
EXPLORATORY = STANDARD  # the same phases; the do part runs per plan step (supervisor.py)
MAX_PARTS = 12  # more listed parts than this: not read as independent parts
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
    if pipeline == "exploratory":
        return PipelineChoice(auto_roles(EXPLORATORY), "exploratory",
                              "pipeline: exploratory in the task file")
    if _EMERGENCY_WORDS.search(goal):
        return PipelineChoice(auto_roles(EMERGENCY), "emergency", "goal asks to fix something")
    words = len(goal.split())
    sentences = len([s for s in re.split(r"[.!?]\s", goal.strip()) if s])
    if not has_checks and words <= simple_max_words and sentences <= 1:
        return PipelineChoice(auto_roles(SIMPLE), "simple",
                              f"one short sentence ({words} words), no checks")
    parts = independent_parts(goal)
    if parts:
        files = "; ".join(", ".join(p) for p in parts)
        return PipelineChoice(auto_roles(EXPLORATORY), "exploratory",
                              f"the goal lists {len(parts)} independent parts ({files})")
    return PipelineChoice(auto_roles(STANDARD), "standard",
                          "default for goals that need a plan or checks")


# ---- independent parts ---------------------------------------------------------------------
_NUMBERED = re.compile(r"(?:^|(?<=\s))\(?(\d{1,2})[.)](?=\s)")  # "1) ", "(2) ", "3. "
_BULLET = re.compile(r"^\s*[-*\u2022]\s+(.*\S)\s*$", re.MULTILINE)
_JOINED = re.compile(r";|\band also\b", re.IGNORECASE)
_FILE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/-])")
_NOT_FILES = frozenset({"e.g", "i.e", "a.m", "p.m", "vs", "etc", "no", "cf"})
_ORDER_WORDS = re.compile(
    r"\b(then|after|afterwards|before|previous|above|below|first|next|finally|once|"
    r"result of|output of|based on|using the|from step|step \d)\b", re.IGNORECASE)


def independent_parts(goal: str) -> list[list[str]]:
    """The files each part of ``goal`` names, when the goal lists independent parts; [] when
    it does not. Deliberately conservative:

    * the parts are an enumeration numbered 1, 2, 3 ... in order (``1) a 2) b``, ``1. a 2. b``),
      else two or more bullet lines (``- a``, ``* a``), else clauses joined by ``;`` or
      ``and also``;
    * there are 2 to ``MAX_PARTS`` of them, every one names at least one file (``notes.md``,
      ``src/app.py``), and no file is named by two parts;
    * no part orders itself against another (then, after, before, previous, above, first,
      next, finally, once, based on, the result/output of, step N ...).
    """
    parts = _split(goal)
    if not 2 <= len(parts) <= MAX_PARTS or any(_ORDER_WORDS.search(p) for p in parts):
        return []
    named = [files_named(p) for p in parts]
    if not all(named):
        return []
    every = [f for files in named for f in files]
    return named if len(every) == len(set(every)) else []


def files_named(text: str) -> list[str]:
    """The file names in ``text`` (``notes.md``, ``src/app.py``), in order, each once."""
    return list(dict.fromkeys(f for f in _FILE.findall(text) if f.lower() not in _NOT_FILES))


def _split(goal: str) -> list[str]:
    marks = list(_NUMBERED.finditer(goal))
    numbers = [int(m.group(1)) for m in marks]
    if len(marks) >= 2 and numbers == list(range(1, len(marks) + 1)):
        ends = [m.start() for m in marks[1:]] + [len(goal)]
        return [goal[m.end():end].strip(" ,;\n") for m, end in zip(marks, ends, strict=True)]
    bullets = _BULLET.findall(goal)
    if len(bullets) >= 2:
        return [b.strip() for b in bullets]
    return [p.strip() for p in _JOINED.split(goal) if p.strip()]


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


Outcome = Literal["success", "failed", "escalated", "budget_exceeded", "loop_detected",
                  "compaction_stalled", "error"]
Stop = Literal["budget", "loop_detected", "compaction_stalled", "error"]
"""Why a job stopped early: a budget ran out, a guard of the agent loop tripped, or an error."""
_STOPPED: dict[str, Outcome] = {"budget": "budget_exceeded", "loop_detected": "loop_detected",
                                "compaction_stalled": "compaction_stalled", "error": "error"}


def outcome(checks_passed: bool | None, decision: str | None, stopped: str | None) -> Outcome:
    """The job's outcome from its last check report, AA's last word and why it stopped early."""
    if stopped is not None and stopped in _STOPPED:
        return _STOPPED[stopped]
    if decision == "escalate" and checks_passed is not True:
        return "escalated"
    if checks_passed is False:
        return "failed"
    return "success"
