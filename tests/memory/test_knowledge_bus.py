"""Long-term memory over the bus: a worker's BusKnowledge asks the job's KnowledgeServer, which
answers from the job's own MemoryAccess over a real blackboard; errors keep their kind, the
server bounds what it is asked, a silent job is a KnowledgeError, and a job's dispatcher takes
a knowledge request only from a worker it granted work to, in that worker's own name."""

from __future__ import annotations

import anyio
import pytest

from gliding.bus.auth import WORKER_PREFIX
from gliding.bus.inproc import InProcessBus
from gliding.bus.messages import KnowledgeRequest
from gliding.context.tokens import TokenCounter
from gliding.daemon.dispatch import Dispatcher
from gliding.memory.backends.oxigraph_embedded import OxigraphBlackboard
from gliding.memory.board.blackboard import QueryError, Ref
from gliding.memory.recall.access import MemoryAccess
from gliding.memory.recall.bus import MAX_K, BusKnowledge, KnowledgeServer
from gliding.memory.recall.knowledge import KnowledgeError, KnowledgeMemory

pytestmark = pytest.mark.anyio
JOB = "20261204-000000-abcdef"
G = f"gliding://job/{JOB}"
COUNT = TokenCounter().count


def access() -> MemoryAccess:
    memory = KnowledgeMemory(OxigraphBlackboard.in_memory(), COUNT)
    fact = {"@id": f"{G}/fact/DA-1-0/1", "@type": "Fact", "partOf": f"{G}/result/DA-1-0",
            "text": "The refit of vessel NX-2207 finished on 14 March.", "lineStart": 7,
            "lineEnd": 7, "source": "read_file fleet.md"}
    memory.board.put(fact, graph=G)
    memory.observe(fact, G)
    return MemoryAccess(memory, COUNT, 600)


async def test_a_worker_s_tools_get_the_job_s_memory_through_the_bus() -> None:
    async with InProcessBus() as bus, anyio.create_task_group() as tg:
        server = KnowledgeServer(bus, JOB, access())
        await tg.start(server.serve)
        async with BusKnowledge(bus, JOB, "w1.0") as knowledge:
            assert await knowledge.reachable()
            recalled = await anyio.to_thread.run_sync(knowledge.recall, "refit of the vessel")
            assert f"[{G}/result/DA-1-0#L7] read_file fleet.md: The refit" in recalled
            hits = await anyio.to_thread.run_sync(knowledge.search, "refit", 3)
            assert [(h.iri, h.type) for h in hits] == [(f"{G}/fact/DA-1-0/1", "Fact")]
            rows = await anyio.to_thread.run_sync(
                knowledge.query, "SELECT ?f ?n WHERE { GRAPH ?g { ?f gl:lineStart ?n } }")
            assert rows == [{"f": Ref(f"{G}/fact/DA-1-0/1"), "n": 7}]
            with pytest.raises(QueryError):  # the error's kind crosses the bus
                await anyio.to_thread.run_sync(knowledge.query, "DELETE WHERE { ?s ?p ?o }")
            with pytest.raises(KnowledgeError, match="k must be"):
                await knowledge.call("search", query="refit", k=MAX_K + 1)
            with pytest.raises(KnowledgeError, match="at most"):
                await knowledge.call("recall", query="x" * 20_001)
            with pytest.raises(KnowledgeError, match="bad knowledge request"):
                await knowledge.call("recall")
        assert server.served == 8
        tg.cancel_scope.cancel()


async def test_a_job_that_does_not_answer_is_unreachable_and_a_call_says_so() -> None:
    async with InProcessBus() as bus, BusKnowledge(bus, JOB, "w1.0", timeout_s=0.05,
                                                   tries=2) as knowledge:
        with anyio.fail_after(10):
            assert not await knowledge.reachable(timeout_s=0.05)
            with pytest.raises(KnowledgeError, match="did not answer a recall within 2 x"):
                await knowledge.call("recall", query="anything")


def test_the_dispatcher_takes_knowledge_requests_only_from_its_granted_workers() -> None:
    dispatcher = Dispatcher(InProcessBus(), JOB, task_record={}, model="scripted:x",
                            origin="/data", lease_s=5.0)
    request = KnowledgeRequest(id="k1", job=JOB, worker="w1.9-ab", op="recall",
                               args={"query": "q"})
    sender = WORKER_PREFIX + "w1"
    assert dispatcher.policy("knowledge/x/request", sender, request) == (
        "no work of this job was granted to it")
    dispatcher.granted_to.add("w1")
    assert dispatcher.policy("knowledge/x/request", sender, request) is None
    other = request.model_copy(update={"worker": "w2.1-cd"})
    assert dispatcher.policy("knowledge/x/request", sender, other) == "a request for another"
    elsewhere = request.model_copy(update={"job": "20261204-000000-ffffff"})
    assert dispatcher.policy("knowledge/x/request", sender, elsewhere) == (
        "another job's message")
