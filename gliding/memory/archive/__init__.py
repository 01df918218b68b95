"""L0, the archive: every byte a job produced, by IRI, read back exactly.

    store.py     Archive: one crash-safe SQLite database per job (turns, tool results,
                 records, node revisions, the LLM call ledger, job metadata); open_for_iri
    schema.py    its on-disk layout: tables, durability pragmas, the schema version
    records.py   the values it returns (ArchivedItem, CallRecord) and their row encoding
    port.py      ArchivePort, what agents write L0 through, and LocalArchive (this process)
    bus.py       the same port over the bus (BusArchive on a worker, ArchiveServer in the job)
    journal.py   the supervisor's journal in the archive, which ``gliding resume`` replays

This file imports nothing.
"""
