"""Long-term memory over the bus: ``BusKnowledge`` is what the recall and knowledge tools of an
agent on a worker use when the worker has no shared blackboard endpoint; ``KnowledgeServer``
answers its calls in the job's process, from the job's own ``MemoryAccess``.

    worker:  BusKnowledge.recall(q) ──KnowledgeRequest on knowledge/<job>/request──► server
                                    ◄──KnowledgeReply on worker/<worker>/knowledge──  (access)

So one job has one board wherever its agents run, as L0 has through ``archive/bus.py``. Every
call only reads, so a request whose reply does not come within ``timeout_s`` is sent again, up
to ``tries`` times (``bus/rpc.py``); then the call fails with a KnowledgeError the tool shows
the model. Who may ask is the job's business: its dispatcher takes a request only from a worker
it granted work to (``daemon/dispatch.py``, ``policy``), on a bus that signs every message
(``bus/auth.py``).
The server bounds what it is asked (a query or text of at most ``MAX_ARG_CHARS``, ``k`` of at
most ``MAX_K``) and answers within the tools' own limits. ``reachable`` (one ``ping``) tells a
worker whether to offer the tools at all.

The tools call long-term memory on a worker thread (``tools/knowledge.py``), so the sync
methods here hand the request to the event loop (``anyio.from_thread``) and wait for it.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.from_thread

from gliding.bus import topics
from gliding.bus.messages import KnowledgeOp, KnowledgeReply, KnowledgeRequest
from gliding.bus.port import Bus
from gliding.bus.rpc import RequestClient, RequestServer, Service
from gliding.errors import GlidingError
from gliding.memory.board.blackboard import (
    BlackboardError,
    QueryError,
    QueryTimeout,
    QueryTooLarge,
    Ref,
    TypedLiteral,
    Value,
)
from gliding.memory.recall.access import MemoryAccess
from gliding.memory.recall.knowledge import Hit, KnowledgeError

TIMEOUT_S = 30.0  # one try: the job's first recall may load the embedding model
TRIES = 2
PING_TIMEOUT_S = 5.0
MAX_ARG_CHARS = 20_000
MAX_K = 50
_KNOWLEDGE = Service(
    name="knowledge", request=KnowledgeRequest, reply=KnowledgeReply,
    requests=topics.knowledge_requests, replies=topics.knowledge_replies, error=KnowledgeError,
    errors={e.code: e for e in (QueryError, QueryTimeout, QueryTooLarge, BlackboardError,
                                KnowledgeError)}, asked="a {op}")


class BusKnowledge(RequestClient[KnowledgeOp]):
    """The tools' ``KnowledgeAccess`` of job ``job`` for an agent on worker ``worker``; its
    ``call`` raises KnowledgeError (no answer in time, the server's own failure) or QueryError
    (a refused or malformed query).

    Use inside ``async with BusKnowledge(...) as knowledge:`` (it listens for its replies)."""

    def __init__(self, bus: Bus, job: str, worker: str, *, timeout_s: float = TIMEOUT_S,
                 tries: int = TRIES) -> None:
        super().__init__(_KNOWLEDGE, bus, job, worker, timeout_s=timeout_s, tries=tries)

    async def reachable(self, timeout_s: float = PING_TIMEOUT_S) -> bool:
        """Whether the job's process answers one ping within ``timeout_s``."""
        try:
            return bool(await self.call("ping", timeout_s=timeout_s, tries=1))
        except GlidingError:
            return False

    # the tools' KnowledgeAccess, called on a worker thread
    def recall(self, query: str) -> str:
        return str(anyio.from_thread.run(_call, self, "recall", {"query": query}))

    def search(self, query: str, k: int | None = None) -> list[Hit]:
        rows = anyio.from_thread.run(_call, self, "search", {"query": query, "k": k})
        return [Hit(str(r["iri"]), str(r["type"]), str(r["graph"]), float(r["score"]),
                    str(r["text"])) for r in rows]

    def query(self, sparql: str) -> list[dict[str, Value]]:
        rows = anyio.from_thread.run(_call, self, "query", {"sparql": sparql})
        return [{k: _value(v) for k, v in row.items()} for row in rows]


async def _call(knowledge: BusKnowledge, op: KnowledgeOp, args: dict[str, Any]) -> Any:
    return await knowledge.call(op, **args)


class KnowledgeServer(RequestServer[KnowledgeRequest]):
    """Answers the knowledge requests of job ``job`` from workers, over ``bus``, with
    ``access`` (the job's ``Runtime.access()``)."""

    def __init__(self, bus: Bus, job: str, access: MemoryAccess, *,
                 concurrency: int = 4) -> None:
        super().__init__(_KNOWLEDGE, bus, job, concurrency=concurrency)
        self.access = access

    async def handle(self, request: KnowledgeRequest) -> Any:
        return await anyio.to_thread.run_sync(self._do, request, abandon_on_cancel=True)

    def _do(self, r: KnowledgeRequest) -> Any:
        a, access = r.args, self.access
        if r.op == "ping":
            return True
        if r.op == "recall":
            return access.recall(_text(a, "query"))
        if r.op == "search":
            k = a.get("k")
            if k is not None and (not isinstance(k, int) or isinstance(k, bool)
                                  or not 1 <= k <= MAX_K):
                raise ValueError(f"k must be a whole number from 1 to {MAX_K}")
            return [{"iri": h.iri, "type": h.type, "graph": h.graph, "score": h.score,
                     "text": h.text} for h in access.search(_text(a, "query"), k)]
        if r.op == "query":
            return [{k: _wire(v) for k, v in row.items()}
                    for row in access.query(_text(a, "sparql"))]
        raise ValueError(f"unknown knowledge operation {r.op!r}")


def _text(args: dict[str, Any], key: str) -> str:
    value = args[key]
    if not isinstance(value, str) or len(value) > MAX_ARG_CHARS:
        raise ValueError(f"{key} must be a text of at most {MAX_ARG_CHARS} characters")
    return value


def _wire(value: Value) -> Any:
    """A query value as JSON: an IRI or a typed literal tagged, plain values as they are."""
    if isinstance(value, Ref):
        return {"iri": value.iri}
    if isinstance(value, TypedLiteral):
        return {"value": value.value, "datatype": value.datatype, "language": value.language}
    return value


def _value(data: Any) -> Value:
    if isinstance(data, dict) and isinstance(data.get("iri"), str):
        return Ref(data["iri"])
    if isinstance(data, dict) and isinstance(data.get("value"), str):
        language = data.get("language")
        return TypedLiteral(data["value"], str(data.get("datatype") or ""),
                            language if isinstance(language, str) else None)
    if isinstance(data, str | int | float | bool):
        return data
    return str(data)
