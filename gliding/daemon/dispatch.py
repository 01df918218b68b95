"""The job side of remote agents: ``Dispatcher`` hands a job's assignments to the worker pool.

When a job's agents run on ``gliding worker`` processes (``daemon.agents: workers``), the
supervisor's runner publishes its Assignments on ``job/<job>/agent/<ROLE>`` exactly as for
in-process agents. The dispatcher takes them from there and

* offers each as a ``WorkItem`` on ``work/<ROLE>``, which workers receive through the MQTT 5
  shared subscription ``$share/gliding/work/<ROLE>`` (each offer goes to one of them);
* grants it to the first worker that claims it (``claims/<job>`` → ``worker/<id>/grants``),
  idempotently: a claim QoS 1 delivered twice is granted twice to the same worker;
* watches the workers' heartbeats (``workers/heartbeat``): an assignment whose worker has not
  been heard from for ``daemon.lease_s`` is offered again, and another worker takes it over;
  its agent replays what the first one archived (turns and tool results are not run again);
* marks an assignment done when its answer appears on ``job/<job>/result/<ROLE>``;
* tells a worker to stop (a GrantMsg with ``granted`` false for the key and epoch it holds) when
  its work was handed on, when it names work it no longer holds, and when the job ends;
* on a resumed job, waits ``expect_s`` before offering what it is handed, so that a worker still
  running an assignment of the killed process adopts it by its heartbeat instead of a second
  worker starting it.

The rules are the pure table of ``leases.py``; this is the thin shell that carries out its
effects, on the event loop's clock (virtual in tests). The dispatcher knows nothing of agents
or tools: what a worker needs to run the assignment travels in the WorkItem (the task record,
the model string, the role's briefing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from gliding.bus import topics
from gliding.bus.auth import WORKER_PREFIX, digest, owner
from gliding.bus.messages import (
    AgentDone,
    Answer,
    ArchivedMsg,
    ArchiveRequest,
    Assignment,
    Claim,
    CoherenceMsg,
    GrantMsg,
    Heartbeat,
    JobEvent,
    KnowledgeRequest,
    WorkItem,
)
from gliding.bus.port import Bus
from gliding.core import events
from gliding.core.iri import step_session
from gliding.daemon import leases as L

log = structlog.get_logger("gliding.daemon")


def work_key(job: str, role: str, cycle: int, attempt: int, step: str | None = None) -> str:
    """The name of one assignment in the lease table (and in workers' heartbeats)."""
    base = f"{job}/{role}/{cycle}/{attempt}"
    return f"{base}/{step}" if step else base


def assignment_key(a: Assignment) -> str:
    return work_key(a.job, a.role, a.cycle, a.attempt, getattr(a, "step", None))


def answer_key(m: Answer) -> str:
    return work_key(m.job, m.role, m.cycle, m.attempt, getattr(m, "step", None))


class Dispatcher:
    """Offers job ``job``'s assignments to workers over ``bus`` and re-hands lapsed ones."""

    def __init__(self, bus: Bus, job: str, *, task_record: dict[str, Any], model: str,
                 origin: str, lease_s: float, offer_s: float | None = None,
                 expect_s: float = 0.0,
                 briefing: Callable[[Assignment], Awaitable[str]] | None = None,
                 coherence_lease_s: float = 0.0, trace: str = "") -> None:
        self.bus = bus
        self.coherence_lease_s = coherence_lease_s
        self.trace = trace  # the job span's traceparent: workers trace under it
        self.job = job
        self.task_record = task_record
        self.model = model
        self.origin = origin
        self.briefing = briefing
        self.leases = L.Leases(lease_s=lease_s,
                               offer_s=offer_s or max(0.5, min(2.0, lease_s / 2)))
        self.expect_s = expect_s
        self.started = 0.0
        self.items: dict[str, WorkItem] = {}
        self.handed = 0  # offers made, re-offers included
        self.granted_to: set[str] = set()  # the enrolled workers granted work of the job
        self.lapsed = 0  # assignments taken from a silent worker

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe, report ready, then dispatch until cancelled; then tell every worker that
        still holds work of the job to stop."""
        try:
            await self._serve(task_status)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._apply(L.revoke_all(self.leases, "the job ended"))

    async def _serve(self, task_status: Any) -> None:
        job = self.job
        self.started = anyio.current_time()
        async with (
            self.bus.subscribe(topics.agents(job), max_buffer=1000) as assignments,
            self.bus.subscribe(topics.claims(job), max_buffer=1000) as claims,
            self.bus.subscribe(topics.heartbeats(), max_buffer=1000) as beats,
            self.bus.subscribe(topics.results(job), max_buffer=1000) as answers,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._take, assignments)
            tg.start_soon(self._claims, claims)
            tg.start_soon(self._beats, beats)
            tg.start_soon(self._answers, answers)
            tg.start_soon(self._ticks)
            task_status.started()

    async def _take(self, sub: Any) -> None:
        while True:
            _topic, a = await sub.receive()
            if not isinstance(a, Assignment) or a.job != self.job:
                continue
            key = assignment_key(a)
            briefing = await self.briefing(a) if self.briefing is not None else ""
            self.items[key] = WorkItem(key=key, epoch=1, assignment=a,
                                       task_record=self.task_record, model=self.model,
                                       briefing=briefing, origin=self.origin,
                                       coherence_lease_s=self.coherence_lease_s,
                                       trace=self.trace)
            now = anyio.current_time()
            if now - self.started < self.expect_s:  # a worker may hold it: let it say so first
                await self._apply(L.expect(self.leases, key, now,
                                           self.started + self.expect_s - now))
            else:
                await self._apply(L.offer(self.leases, key, now))

    async def _claims(self, sub: Any) -> None:
        while True:
            _topic, c = await sub.receive()
            if not isinstance(c, Claim) or c.job != self.job:
                continue
            if c.declined:  # that worker is full: the next tick offers it again (leases.py)
                log.debug("work.declined", job=self.job, key=c.key, worker=c.worker)
                continue
            await self._apply(L.claim(self.leases, c.key, c.epoch, c.worker,
                                      anyio.current_time()))

    async def _beats(self, sub: Any) -> None:
        while True:
            _topic, h = await sub.receive()
            if isinstance(h, Heartbeat):
                mine = {k: e for k, e in h.held.items() if k in self.leases.keys}
                if mine:
                    await self._apply(L.heartbeat(self.leases, h.worker, mine,
                                                  anyio.current_time()))

    async def _answers(self, sub: Any) -> None:
        while True:
            _topic, m = await sub.receive()
            if isinstance(m, Answer) and m.job == self.job:
                await self._apply(L.done(self.leases, answer_key(m)))

    async def _ticks(self) -> None:
        period = min(self.leases.lease_s, self.leases.offer_s) / 4
        while True:
            await anyio.sleep(period)
            await self._apply(L.tick(self.leases, anyio.current_time()))

    async def _apply(self, result: tuple[L.Leases, list[L.Effect]]) -> None:
        self.leases, effects = result
        for effect in effects:
            if isinstance(effect, L.Offer):
                await self._offer(effect.key, effect.epoch)
            elif isinstance(effect, L.Grant | L.Revoke):
                granted = isinstance(effect, L.Grant) and effect.granted
                item = ""
                if granted:
                    self.granted_to.add(owner(effect.worker))
                    item = digest(self._item(effect.key, effect.epoch).to_json())
                await self.bus.publish(topics.grants(effect.worker), GrantMsg(
                    job=self.job, key=effect.key, epoch=effect.epoch, worker=effect.worker,
                    granted=granted, reason=effect.reason, item=item))
                if granted:  # the job's own word on who runs what (a worker's may be forged)
                    await self.bus.publish(topics.events(self.job), JobEvent.of(
                        self.job, self._granted(effect.key, effect.worker)))
            else:
                self.lapsed += 1
                log.warning("work.lapsed", job=self.job, key=effect.key, worker=effect.worker,
                            silent_s=round(effect.silent_s, 1))
                await self.bus.publish(topics.events(self.job), JobEvent.of(
                    self.job, events.WorkLapsed(key=effect.key, worker=effect.worker,
                                                silent_s=round(effect.silent_s, 1))))

    def _granted(self, key: str, worker: str) -> events.WorkGranted:
        a = self.items[key].assignment
        return events.WorkGranted(key=key, worker=worker, role=a.role, cycle=a.cycle,
                                  attempt=a.attempt, step=a.step,
                                  session=step_session(a.role, a.cycle, a.step)
                                  if a.step else None)

    def _item(self, key: str, epoch: int) -> WorkItem:
        return self.items[key].model_copy(update={"epoch": epoch})

    async def _offer(self, key: str, epoch: int) -> None:
        item = self._item(key, epoch)
        self.handed += 1
        await self.bus.publish(topics.work(item.assignment.role), item)

    def policy(self, topic: str, sender: str, message: Any) -> str | None:
        """What a worker may say to this job (``bus/auth.py``: ``BusAuth.policy``; the root's
        messages never come here): claims and heartbeats in its own name, the answer of work
        this job granted it (the current holder), and, once granted work of the job, its
        archive writes, knowledge and coherence requests, events and archive notices; nothing
        else. None: take it; else why not."""
        name = sender.removeprefix(WORKER_PREFIX)
        if isinstance(message, Claim | Heartbeat):
            return None if owner(message.worker) == name else "a claim or heartbeat for another"
        if getattr(message, "job", self.job) != self.job:
            return "another job's message"  # the job's bus hears only its own topics
        if isinstance(message, Answer):
            lease = self.leases.keys.get(answer_key(message))
            holder = lease.holder if lease is not None else None
            return None if holder is not None and owner(holder) == name else (
                "an answer to work it does not hold")
        if name not in self.granted_to and not any(  # granted, or adopted by a heartbeat
                lease.holder and owner(lease.holder) == name
                for lease in self.leases.keys.values()):
            return "no work of this job was granted to it"
        if isinstance(message, ArchiveRequest | KnowledgeRequest):
            return None if owner(message.worker) == name else "a request for another"
        if isinstance(message, CoherenceMsg):
            return None if owner(message.sender) == name else "a coherence request for another"
        if isinstance(message, JobEvent | ArchivedMsg | AgentDone):
            return None
        return f"a {type(message).__name__} is not a worker's to send"
