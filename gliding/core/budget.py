"""Budgets of a job: turns per role, prompt and completion tokens and cost (for the job and per
role), and wall time. Pure arithmetic; the caller passes ``now`` from its clock.

A cost budget also ends the job when a call's cost is unknown (``Usage.unpriced_calls``): an
unknown cost cannot be kept under a limit, and counting it as $0 would let the job spend on."""

from __future__ import annotations

from dataclasses import dataclass, field

from gliding.core.messages import Usage


@dataclass(frozen=True)
class Limits:
    """Job-wide limits (None: none) and per-role ones (``role_*``: only the roles named).

    ``turns`` caps the turns of one assignment of a role; a role missing from it keeps the
    cap of its role file.
    """

    turns: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    wall_time_s: float | None = None
    role_prompt_tokens: dict[str, int] = field(default_factory=dict)
    role_completion_tokens: dict[str, int] = field(default_factory=dict)
    role_cost_usd: dict[str, float] = field(default_factory=dict)


@dataclass
class BudgetTracker:
    """Spending so far; ``exhausted`` says which limit ran out, if any."""

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

    def exhausted(self, now: float, role: str | None = None) -> str | None:
        """Why no further model call may be made (by ``role``, if given), or None."""
        lim = self.limits
        spent = self.usage
        if lim.prompt_tokens is not None and spent.prompt_tokens >= lim.prompt_tokens:
            return f"prompt token budget of {lim.prompt_tokens} spent"
        if lim.completion_tokens is not None and spent.completion_tokens >= lim.completion_tokens:
            return f"completion token budget of {lim.completion_tokens} spent"
        if lim.cost_usd is not None and (why := _cost_over(spent, lim.cost_usd, "")):
            return why
        if lim.wall_time_s is not None and now - self.started_at >= lim.wall_time_s:
            return f"wall time budget of {lim.wall_time_s:g}s spent"
        if role is None:
            return None
        mine = self.by_role.get(role, Usage())
        if (cap := lim.role_prompt_tokens.get(role)) is not None and mine.prompt_tokens >= cap:
            return f"{role}'s prompt token budget of {cap} spent"
        if ((cap := lim.role_completion_tokens.get(role)) is not None
                and mine.completion_tokens >= cap):
            return f"{role}'s completion token budget of {cap} spent"
        if (cost := lim.role_cost_usd.get(role)) is not None and (
                why := _cost_over(mine, cost, f"{role}'s ")):
            return why
        return None


def _cost_over(spent: Usage, limit: float, whose: str) -> str:
    """Why ``spent`` is past a cost budget of ``limit`` ("" when it is not). A call without a
    price counts as past it: its cost is unknown, so the budget can no longer be kept (a job
    with a cost budget is refused before it starts when a model it may call has no price)."""
    if spent.unpriced_calls:
        n = spent.unpriced_calls
        return (f"{whose}cost budget of ${limit:.4f} cannot be kept: {n} call{'s' * (n != 1)} "
                "had no price (set llm.prices for the model)")
    if spent.cost_usd > limit:
        return f"{whose}cost budget of ${limit:.4f} exceeded"
    return ""
