"""The report of a finished job, read off the supervisor's final state."""

from __future__ import annotations

from dataclasses import dataclass, field

from gliding.bus.messages import CheckOutcome, TurnLine
from gliding.core.messages import Usage
from gliding.core.text import error_line
from gliding.scheduler.policy import PipelineChoice
from gliding.scheduler.supervisor import SupervisorState


@dataclass(frozen=True)
class RoleUsage:
    role: str
    turns: int
    usage: Usage
    schema_tokens: int = 0  # cl100k tokens of the tool schemas in the role's prompt


@dataclass(frozen=True)
class JobReport:
    job: str
    outcome: str
    pipeline: PipelineChoice
    cycles: int
    corrections: int
    checks: tuple[CheckOutcome, ...]
    checks_verified_by: str
    decision: str | None
    report: str
    plan: tuple[str, ...]
    roles: tuple[RoleUsage, ...]
    artifacts: tuple[tuple[str, str], ...]
    turns: tuple[TurnLine, ...]
    stopped: str | None
    wall_s: float
    total: Usage = field(default_factory=Usage)
    context_tokens: dict[str, tuple[int, int]] = field(default_factory=dict)
    # checked file -> "written by this job" | "found unchanged" | "missing"
    checked_files: dict[str, str] = field(default_factory=dict)
    resumed: int = 0  # how many times the job was resumed
    workspace_changed: bool = False  # changed behind the job's back before a resume
    # files the job wrote that were not archived, and why (a symlink, too large, ...)
    skipped_artifacts: tuple[tuple[str, str], ...] = ()
    # what this process's agents were shown between turns (coherence): updates, sent_tokens
    # (changed lines only) and full_tokens (had the whole view been re-sent each time)
    board_updates: dict[str, int] = field(default_factory=dict)
    # the models of the job's calls whose cost is unknown (no price), from its ledger
    unpriced_models: tuple[str, ...] = ()
    # role -> its calls that repeated an earlier call whose result the prompt no longer held
    # whole (post-compaction re-reads)
    rereads: dict[str, int] = field(default_factory=dict)


def build_report(state: SupervisorState, *, artifacts: tuple[tuple[str, str], ...],
                 wall_s: float, checked_files: dict[str, str] | None = None,
                 resumed: int = 0, workspace_changed: bool = False,
                 skipped_artifacts: tuple[tuple[str, str], ...] = ()) -> JobReport:
    """The report of ``state`` (which must have an outcome)."""
    assert state.outcome is not None
    roles = tuple(dict.fromkeys(state.roles))
    usage: dict[str, Usage] = {}
    for role, t in state.totals.items():
        u = t.usage
        usage[role] = Usage(u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cost_usd,
                            u.unpriced_calls)
    total = sum(usage.values(), Usage())
    return JobReport(
        job=state.job, outcome=state.outcome,
        pipeline=PipelineChoice(state.roles, state.pipeline_kind, state.pipeline_reason),
        cycles=state.cycle, corrections=state.corrections, checks=state.results,
        checks_verified_by=state.verified_by, decision=state.decision,
        report=state.report or error_line(state.stop_reason or ""), plan=state.plan,
        roles=tuple(RoleUsage(r, state.totals[r].turns if r in state.totals else 0,
                              usage.get(r, Usage()),
                              state.totals[r].schema_tokens if r in state.totals else 0)
                    for r in roles),
        artifacts=artifacts, turns=state.lines,
        stopped=None if state.stop_reason is None else error_line(state.stop_reason),
        wall_s=wall_s,
        total=total,
        context_tokens={r: (t.context_tokens, t.baseline_tokens)
                        for r, t in state.totals.items() if t.baseline_tokens},
        rereads={r: t.rereads for r, t in state.totals.items() if t.rereads},
        checked_files=dict(checked_files or {}), resumed=resumed,
        workspace_changed=workspace_changed, skipped_artifacts=skipped_artifacts)
