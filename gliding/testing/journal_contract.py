"""The contract every supervisor journal passes (``scheduler.runner.Journal`` and the reading
that a resume starts from): subclass ``JournalContract`` and give ``make_journal``, a factory
``make(after) -> (journal, last)``: a journal whose first entry is ``after + 1``, and
``last()``, the newest entry as it reads back (``(n, state, cause)``, None when empty), from
durable storage where the journal has one.

``tests/memory/test_archive_journal.py`` runs it against ``ArchiveJournal`` (the job's L0
archive, read back by ``last_entry`` after the archive is opened again) and ``MemoryJournal``.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

from gliding.scheduler import policy, supervisor
from gliding.scheduler.runner import Journal
from gliding.scheduler.supervisor import SupervisorState

Last = Callable[[], "tuple[int, SupervisorState, str] | None"]
MakeJournal = Callable[[int], tuple[Journal, Last]]


def first_state() -> SupervisorState:
    choice = policy.PipelineChoice(("PA", "DA", "CA", "AA"), "explicit", "contract")
    state, _ = supervisor.start("j1", "Write hello.txt", choice, ["file hello.txt exists"],
                                max_corrections=2, max_cycles=2)
    return state


class JournalContract:
    """What ``gliding resume`` relies on from the journal the runner writes."""

    def test_nothing_recorded_reads_as_none(self, make_journal: MakeJournal) -> None:
        _journal, last = make_journal(0)
        assert last() is None

    def test_the_newest_entry_reads_back_with_its_state_and_cause(
            self, make_journal: MakeJournal) -> None:
        journal, last = make_journal(0)
        state = first_state()
        later = state.model_copy(update={"cycle": 2})
        anyio.run(journal.record, state, "start")
        anyio.run(journal.record, later, "check.report")
        assert last() == (2, later, "check.report")

    def test_a_resumed_journal_numbers_on_after_the_last_entry(
            self, make_journal: MakeJournal) -> None:
        journal, last = make_journal(7)
        anyio.run(journal.record, first_state(), "resume")
        entry = last()
        assert entry is not None and entry[0] == 8 and entry[2] == "resume"

    def test_every_field_of_the_state_survives(self, make_journal: MakeJournal) -> None:
        journal, last = make_journal(0)
        state = first_state().model_copy(update={
            "goal": "naïve café — ✓ \"quoted\"\n\ttabbed", "stop_reason": "x" * 5000})
        anyio.run(journal.record, state, "start")
        entry = last()
        assert entry is not None and entry[1] == state
