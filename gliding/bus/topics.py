"""The one place bus topic strings are built.

    job/<job>/agent/<ROLE>     supervisor -> agent: an Assignment for that role
    job/<job>/result/<ROLE>    agent -> supervisor: the role's typed answer
    job/<job>/events           anyone -> observers: progress (JobEvent)
    job/<job>/archived         agents -> ingestion: an item was written to L0 (ArchivedMsg)

``results(job)``, ``agents(job)`` and ``everything(job)`` are the subscription filters over them.

Jobs whose agents run on ``gliding worker`` processes (``daemon/dispatch.py``) add:

    work/<ROLE>                dispatcher -> workers: a WorkItem (workers share a subscription)
    claims/<job>               worker -> dispatcher: a Claim of an offered item
    worker/<worker>/grants     dispatcher -> worker: the GrantMsg answering its claim
    workers/heartbeat          worker -> dispatchers: Heartbeat
    archive/<job>/request      worker -> the job's process: an ArchiveRequest
    worker/<worker>/archive    the job's process -> worker: the ArchiveReply
    knowledge/<job>/request    worker -> the job's process: a KnowledgeRequest (recall,
                               kg_search, knowledge_query on the job's blackboard)
    worker/<worker>/knowledge  the job's process -> worker: the KnowledgeReply

The blackboard's coherence engine (``memory/coherence/``: ``directory.py``, ``cache.py``), per
space (a job):

    coherence/<space>/directory      caches -> the directory: CoherenceMsg requests and answers
    coherence/<space>/cache/<agent>  the directory -> one agent's cache: fills, acks, invalidations

They lie outside ``job/<job>/`` so that ingestion, which listens to all of a job's topics,
never sees the archive traffic.
"""

from __future__ import annotations

from gliding.bus.auth import check_name, owner
from gliding.errors import BusError


def agent(job: str, role: str) -> str:
    return f"job/{job}/agent/{role}"


def result(job: str, role: str) -> str:
    return f"job/{job}/result/{role}"


def agents(job: str) -> str:
    """Every role's assignments of ``job``."""
    return f"job/{job}/agent/+"


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


def work(role: str) -> str:
    return f"work/{role}"


def claims(job: str) -> str:
    return f"claims/{job}"


def grants(worker: str) -> str:
    return f"worker/{worker}/grants"


def heartbeats() -> str:
    return "workers/heartbeat"


def archive_requests(job: str) -> str:
    return f"archive/{job}/request"


def archive_replies(worker: str) -> str:
    return f"worker/{worker}/archive"


def knowledge_requests(job: str) -> str:
    return f"knowledge/{job}/request"


def knowledge_replies(worker: str) -> str:
    return f"worker/{worker}/knowledge"


def coherence_directory(space: str) -> str:
    return f"coherence/{space}/directory"


def coherence_cache(space: str, agent: str) -> str:
    return f"coherence/{space}/cache/{agent}"


def recipient(topic: str) -> str | None:
    """The enrolled worker a topic addresses alone (its grants, its archive and knowledge
    replies, its caches' coherence messages), whose key signs what the root sends there; None
    for the rest."""
    levels = topic.split("/")
    if len(levels) == 3 and levels[0] == "worker" and levels[2] in ("grants", "archive",
                                                                     "knowledge"):
        name = owner(levels[1])
    elif len(levels) == 4 and levels[0] == "coherence" and levels[2] == "cache":
        name = owner(levels[3])
    else:
        return None
    try:
        return check_name(name)
    except BusError:
        return None  # the job's own caches ("@ingest..."): under the root key
