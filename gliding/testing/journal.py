"""A journal in memory: every transition the runner recorded, in order, for tests of the
runner and for the journal contract (``journal_contract.py``)."""

from __future__ import annotations

from gliding.scheduler.supervisor import SupervisorState


class MemoryJournal:
    """``scheduler.runner.Journal`` kept in a list; ``after`` numbers the first entry, as a
    resumed job's journal does (``after + 1``)."""

    def __init__(self, *, after: int = 0) -> None:
        self.after = after
        self.entries: list[tuple[SupervisorState, str]] = []

    async def record(self, state: SupervisorState, cause: str) -> None:
        self.entries.append((state, cause))

    @property
    def causes(self) -> list[str]:
        return [cause for _, cause in self.entries]

    def last(self) -> tuple[int, SupervisorState, str] | None:
        """The newest entry as ``(n, state, cause)``; None when nothing was recorded."""
        if not self.entries:
            return None
        state, cause = self.entries[-1]
        return self.after + len(self.entries), state, cause
