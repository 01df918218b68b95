"""Budgets of a job: turns per role, prompt tokens, cost and wall time. Pure arithmetic; the
caller passes ``now`` from its clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from gliding.core.messages import Usage


@dataclass(frozen=True)
class Limits:
    turns: dict[str, int]
    prompt_tokens: int | None = None
    cost_usd: float | None = None
    wall_time_s: float | None = None


@dataclass
class BudgetTracker:
    """Spending so far; ``exhausted`` says which job-wide limit ran out, if any."""

    limits: Limits
    started_at: float
    usage: Usage = Usage()
    by_role: dict[str, Usage] = field(default_factory=dict)
    turns: dict[str, int] = field(default_factory=dict)

    def record(self, role: str, usage: Usage) -> None:
        self.usage = self.usage + usage
        self.by_role[role] = self.by_role.get(role, Usage()) + usage

    def count_turn(self, role: str) -> int:
        self.turns[role] = self.turns.get(role, 0) + 1
        return self.turns[role]

    def exhausted(self, now: float) -> str | None:
        lim = self.limits
        if lim.prompt_tokens is not None and self.usage.prompt_tokens >= lim.prompt_tokens:
            return f"prompt token budget of {lim.prompt_tokens} spent"
        if lim.cost_usd is not None and self.usage.cost_usd > lim.cost_usd:
            return f"cost budget of ${lim.cost_usd:.4f} exceeded"
        if lim.wall_time_s is not None and now - self.started_at >= lim.wall_time_s:
            return f"wall time budget of {lim.wall_time_s:g}s spent"
        return None
