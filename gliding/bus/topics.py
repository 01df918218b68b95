"""The one place bus topic strings are built.

    job/<job>/agent/<ROLE>     supervisor -> agent: an Assignment for that role
    job/<job>/result/<ROLE>    agent -> supervisor: the role's typed answer
    job/<job>/events           anyone -> observers: progress (JobEvent)
    job/<job>/archived         agents -> ingestion: an item was written to L0 (ArchivedMsg)

``results(job)`` and ``everything(job)`` are the subscription filters over them.
"""

from __future__ import annotations


def agent(job: str, role: str) -> str:
    return f"job/{job}/agent/{role}"


def result(job: str, role: str) -> str:
    return f"job/{job}/result/{role}"


def results(job: str) -> str:
    """Every role's answers of ``job``."""
    return f"job/{job}/result/+"


def events(job: str) -> str:
    return f"job/{job}/events"


def archived(job: str) -> str:
    return f"job/{job}/archived"


def everything(job: str) -> str:
    """Every topic of ``job`` (what ingestion listens to)."""
    return f"job/{job}/#"
