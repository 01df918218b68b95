"""``gliding worker``: a process that runs agents for jobs of other processes, over MQTT.

A worker subscribes to ``$share/gliding/work/<ROLE>`` for each of its roles (``--roles``), so
the broker hands every offered WorkItem to one of the workers serving that role: N workers
split the work. For each offer it claims the key and waits for the dispatcher's grant (an offer
delivered twice, or already taken by another worker, is not run twice); granted, it runs the
role's session with the same ``AgentWorker.act`` an in-process job uses and publishes the answer
on ``job/<job>/result/<ROLE>``, where the job's supervisor takes it.

While it works it sends a heartbeat every ``daemon.heartbeat_s`` naming the keys it holds; if
it dies, the dispatcher re-offers them after ``daemon.lease_s`` and another worker takes over
(its agent replays what was archived: no tool call whose result reached L0 runs again).

L0: a worker on the job's host (the WorkItem's ``origin`` data directory holds the job's
archive) writes it directly, SQLite serialising the processes; elsewhere, or with
``remote=True``, through ``BusArchive`` to the job's process. Long-term memory (recall,
kg_search, knowledge_query): the shared SPARQL endpoint when ``memory.blackboard.url`` names
one, else the job's own board through ``BusKnowledge`` to the job's process; only when that
does not answer a ping are the tools withheld (with a ``memory.withheld`` event). What a worker
on another host needs: the broker (``bus.url``), the task's workspace at the same path (a
shared filesystem), and the model (a hosted model's key in its environment, or the same local
model file).

At most ``concurrency`` assignments run at once; an offer that arrives when all are busy is
declined at once (the dispatcher offers it to the others). Model backends are built once per
model string and kept for the worker's life.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import structlog

from gliding.agents.roles import RoleSpec, load_roles
from gliding.agents.tracing import Tracer
from gliding.agents.worker import AgentWorker, JobAgents, failed_answer
from gliding.bus import topics
from gliding.bus.auth import NAME_CHARS, digest, read_key_file
from gliding.bus.messages import Assignment, Claim, GrantMsg, Heartbeat, JobEvent, WorkItem
from gliding.bus.port import Bus
from gliding.bus.replies import Replies
from gliding.config.roles import role_list, role_names
from gliding.config.settings import Settings
from gliding.config.task import Task, task_from_record
from gliding.core import events
from gliding.core.clock import SystemClock
from gliding.daemon import compose, models, parts
from gliding.daemon.board import worker_views
from gliding.daemon.jobs import leaves
from gliding.daemon.runtime import Runtime, bus_key_path, open_bus
from gliding.errors import BusError, GlidingError, ProviderUnavailable, TaskFileError, UsageError
from gliding.llm.port import LLM
from gliding.memory.archive.bus import BusArchive
from gliding.memory.archive.port import ArchivePort, LocalArchive
from gliding.memory.archive.store import Archive, archive_path
from gliding.memory.recall.bus import BusKnowledge

log = structlog.get_logger("gliding.worker")

ANSWER_TRIES = 6  # publishing an answer while the broker is away
SHARE_GROUP = "gliding"


def _same_dir(a: str, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same directory (blocking: it resolves links)."""
    return os.path.realpath(a) == os.path.realpath(b)


def worker_id(enrolled: str | None = None) -> str:
    """A name unique to this process: the name it is enrolled as (``bus/auth.py``: its key's
    name; else the host's), a dot, its pid and a random suffix."""
    base = enrolled or host_name()
    return f"{base}.{os.getpid()}-{secrets.token_hex(3)}"


def host_name() -> str:
    """This host's name as a worker name (letters, digits, ``_`` and ``-``)."""
    return "".join(c if c in NAME_CHARS else "-" for c in socket.gethostname()[:40]) or "worker"


def enrolled_name(settings: Settings, given: str | None) -> str | None:
    """The name this worker signs as: its key's (a worker key), else ``given``, else the
    host's; None when the bus does not sign.

    Raises:
        BusError: no key, or a key enrolled under another name than ``given``.
    """
    if settings.bus.auth is False or settings.bus.url is None:
        return given
    ring = read_key_file(bus_key_path(settings))
    name = given or ring.name or host_name()
    ring.as_worker(name)
    return name


class WorkerService:
    """Serves ``roles`` for any job on ``bus``, at most ``concurrency`` assignments at once."""

    def __init__(self, settings: Settings, bus: Bus, runtime: Runtime, *,
                 roles: Sequence[str] | None = None, concurrency: int = 1,
                 remote: bool = False, name: str | None = None) -> None:
        self.settings = settings
        self.bus = bus
        self.runtime = runtime
        self.roles = tuple(dict.fromkeys(role_names() if roles is None else roles))
        self.concurrency = concurrency
        self.remote = remote
        self.name = name or worker_id()
        self.held: dict[str, int] = {}  # key -> epoch granted
        self.finished = 0  # assignments answered
        self._grants = Replies[tuple[str, int], GrantMsg]()  # claims awaiting their answer
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._freed = anyio.Event()  # set (and replaced) whenever a slot frees
        self._llms: dict[str, LLM] = {}
        self._busy = 0

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Subscribe to the roles' work and this worker's grants, then serve until cancelled."""
        async with anyio.create_task_group() as tg:
            await tg.start(self._grant_inbox)
            for role in self.roles:
                await tg.start(self._serve_role, role, tg)
            tg.start_soon(self._heartbeats)
            log.info("worker.ready", worker=self.name, roles=list(self.roles),
                     concurrency=self.concurrency)
            task_status.started()

    async def _grant_inbox(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Grants answer a waiting claim; a refusal of work this worker runs stops it."""
        async with self.bus.subscribe(topics.grants(self.name), max_buffer=1000) as inbox:
            task_status.started()
            while True:
                _topic, grant = await inbox.receive()
                if not isinstance(grant, GrantMsg):
                    continue
                if self._grants.deliver((grant.key, grant.epoch), grant):
                    continue
                if not grant.granted and self.held.get(grant.key) == grant.epoch:
                    log.warning("worker.revoked", worker=self.name, key=grant.key,
                                reason=grant.reason)
                    scope = self._scopes.get(grant.key)
                    if scope is not None:
                        scope.cancel()

    async def _serve_role(self, role: str, tg: Any, *,
                          task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Hold the role's share of the offers only while a slot is free (the broker then
        hands new offers to the other workers); an offer that still arrives when full is
        declined."""
        pattern = f"$share/{SHARE_GROUP}/{topics.work(role)}"
        ready = task_status
        while True:
            while self._busy >= self.concurrency:
                await self._freed.wait()
            # the root's offers to the pool are signed for no worker in particular: taken
            # unverified, run only once a grant this worker can check names their digest
            async with self.bus.subscribe(pattern, max_buffer=100, unverified=True) as offers:
                ready.started()
                ready = anyio.TASK_STATUS_IGNORED
                while self._busy < self.concurrency:
                    _topic, item = await offers.receive()
                    if not isinstance(item, WorkItem) or item.assignment.role != role:
                        continue
                    if item.key in self.held or (item.key, item.epoch) in self._grants:
                        continue  # delivered again (QoS 1) while claimed or running here
                    if self._busy >= self.concurrency:  # another role took the last slot
                        await self._publish(topics.claims(item.assignment.job), Claim(
                            job=item.assignment.job, key=item.key, epoch=item.epoch,
                            worker=self.name, declined=True))
                        continue
                    self._busy += 1
                    self._grants.expect((item.key, item.epoch))
                    tg.start_soon(self._claim_and_run, item)

    async def _claim_and_run(self, item: WorkItem) -> None:
        job = item.assignment.job
        try:
            grant = None
            try:
                if await self._publish(topics.claims(job), Claim(
                        job=job, key=item.key, epoch=item.epoch, worker=self.name)):
                    grant = await self._grants.wait((item.key, item.epoch),
                                                    self.settings.daemon.lease_s)
            finally:
                self._grants.forget((item.key, item.epoch))
            if grant is None or not grant.granted:
                log.info("worker.claim.refused", worker=self.name, key=item.key,
                         reason=grant.reason if grant else "no answer")
                return
            if grant.item != digest(item.to_json()):  # a forged offer, or not the one granted
                log.warning("worker.offer.forged", worker=self.name, key=item.key,
                            job=job, reason="the grant names another offer")
                return
            self.held[item.key] = item.epoch
            answer = None
            with anyio.CancelScope() as scope:
                self._scopes[item.key] = scope
                try:
                    answer = await self._run(item)
                except Exception as exc:  # noqa: BLE001 - a worker bug or a store it cannot reach: it fails
                    answer = self._failed(item, exc)
            if scope.cancelled_caught or answer is None:
                return  # revoked: the work went to another worker, or the job ended
            topic = topics.result(job, item.assignment.role)
            for attempt in range(ANSWER_TRIES):  # the broker may be restarting
                if await self._publish(topic, answer):
                    self.finished += 1
                    break
                await anyio.sleep(min(2.0 ** attempt, self.settings.daemon.lease_s))
        finally:
            self.held.pop(item.key, None)
            self._scopes.pop(item.key, None)
            self._busy -= 1
            self._freed.set()
            self._freed = anyio.Event()

    def _failed(self, item: WorkItem, exc: Exception) -> Any:
        """The answer for an assignment whose session raised ``exc``: ``unavailable`` when no
        model answered (the job stops interrupted, resumable), else ``failed``."""
        unavailable = next((e for e in leaves(exc) if isinstance(e, ProviderUnavailable)), None)
        if unavailable is not None:
            log.warning("worker.assignment.unavailable", worker=self.name, key=item.key,
                        error=unavailable.message)
            return failed_answer(item.assignment, unavailable.message, status="unavailable")
        log.error("worker.assignment.crashed", worker=self.name, key=item.key,
                  error=f"{type(exc).__name__}: {exc}")
        return failed_answer(item.assignment, f"{type(exc).__name__}: {exc}")

    async def _publish(self, topic: str, message: Any) -> bool:
        """Publish; False (logged) when the broker stays unreachable: a worker outlives a
        broker restart (what it could not say, the leases recover)."""
        try:
            await self.bus.publish(topic, message)
        except BusError as exc:
            log.warning("worker.publish.failed", worker=self.name, topic=topic,
                        error=exc.message)
            return False
        return True

    async def _heartbeats(self) -> None:
        while True:
            await self._publish(topics.heartbeats(), Heartbeat(
                worker=self.name, roles=list(self.roles), held=dict(self.held),
                free=max(0, self.concurrency - self._busy)))
            await anyio.sleep(self.settings.daemon.heartbeat_s)

    async def _llm(self, model: str) -> LLM:
        if model not in self._llms:  # a replies file or litellm's import: not on the loop
            self._llms[model] = await anyio.to_thread.run_sync(models.build_llm, model,
                                                               self.settings)
        return self._llms[model]

    async def _run(self, item: WorkItem) -> Any:
        a = item.assignment
        async with self._kit(item) as kit:
            return await AgentWorker(kit, [a.role]).act(a)

    @asynccontextmanager
    async def _kit(self, item: WorkItem) -> AsyncIterator[JobAgents]:
        """What the assignment's agent needs, opened for it and closed after it."""
        a: Assignment = item.assignment
        job, settings, rt = a.job, self.settings, self.runtime
        task = await anyio.to_thread.run_sync(host_task, item.task_record, settings)
        clock = SystemClock()
        async with AsyncExitStack() as stack:
            port, job_dir = await self._archive(stack, item)
            base = await anyio.to_thread.run_sync(load_roles)
            knowledge = None
            if settings.memory.blackboard.url is None:  # no store of this host is the job's:
                rt = dataclasses.replace(rt, knowledge=None)  # the job's, through the bus
                if _remembers(base.get(a.role)):
                    knowledge = await stack.enter_async_context(
                        BusKnowledge(self.bus, job, self.name))
                    if not await knowledge.reachable():
                        knowledge = None
                        await self._withhold_memory(a, base)
            budget, checks, _mcp, roles, tools = await parts.agent_parts(
                job, task, settings, base, port, rt, clock, knowledge=knowledge)
            sandbox = await compose.job_sandbox(job, task, settings, None)
            began = job_dir / "began"
            await anyio.to_thread.run_sync(partial(began.mkdir, parents=True, exist_ok=True))
            briefing_text = item.briefing

            async def briefing(_a: Assignment) -> str:
                return briefing_text

            board = None
            if item.coherence_lease_s > 0:  # what changes between its turns, too
                agent = f"{_topic_safe(self.name)}.{secrets.token_hex(4)}"
                board = await stack.enter_async_context(worker_views(
                    self.bus, job, agent, item.coherence_lease_s, settings, rt.counter.count))
            await stack.enter_async_context(tools)  # open now, closed when the agent ends
            # this worker's spans of the assignment; off the loop: the first imports the SDK
            tracer = await anyio.to_thread.run_sync(Tracer, settings.traces.endpoint)
            stack.push_async_callback(anyio.to_thread.run_sync, tracer.close)
            yield JobAgents(job=job, workspace=task.workspace, llm=await self._llm(item.model),
                            roles=roles, tools=tools, checks=checks, archive=port,
                            budget=budget, bus=self.bus, clock=clock, settings=settings,
                            counter=rt.counter, briefing=briefing, began_dir=began,
                            sandbox=sandbox, board=board, worker=self.name,
                            hooks=parts.job_hooks(job, task, settings, sandbox, self.bus),
                            approvals=parts.job_approvals(job, task, settings, port, clock,
                                                          self.bus),
                            tracer=tracer, trace_parent=item.trace)

    async def _withhold_memory(self, a: Assignment, roles: Mapping[str, RoleSpec]) -> None:
        """The job's process did not answer a knowledge ping (and there is no shared
        blackboard endpoint): the knowledge tools would query this worker's own store, which
        knows nothing of the job, so they are withheld, and the job's events say so (never a
        silent empty memory)."""
        if not _remembers(roles.get(a.role)):
            return
        reason = ("the job's process did not answer over the bus and there is no shared "
                  "blackboard endpoint (memory.blackboard.url): this worker's own store would "
                  "answer every query with nothing; check the job is running with a "
                  "blackboard, or give the worker the endpoint the job uses")
        log.warning("worker.memory.withheld", job=a.job, role=a.role, worker=self.name)
        try:
            await self.bus.publish(topics.events(a.job), JobEvent.of(a.job, events.MemoryWithheld(
                role=a.role, worker=self.name, reason=reason)))
        except BusError as exc:
            log.warning("worker.event.unsent", job=a.job, error=exc.message)

    async def _archive(self, stack: AsyncExitStack, item: WorkItem
                       ) -> tuple[ArchivePort, Path]:
        """The job's archive: its file when this host has it (and not ``remote``), else the
        bus; and the directory where this worker keeps the job's begin marks."""
        job = item.assignment.job
        own = self.settings.data_dir
        if not self.remote and item.origin and await anyio.to_thread.run_sync(
                _same_dir, item.origin, own) and archive_path(own, job).exists():
            archive = await anyio.to_thread.run_sync(
                partial(Archive.open, own, job, create=False))
            stack.callback(archive.close)
            return LocalArchive(archive, own), archive.path.parent
        port = await stack.enter_async_context(BusArchive(self.bus, job, self.name))
        local = own / "worker" / job
        try:
            await anyio.to_thread.run_sync(partial(local.mkdir, parents=True, exist_ok=True))
        except OSError as exc:
            raise GlidingError(f"cannot create {local}: {exc.strerror or exc}") from exc
        return port, local


def _remembers(spec: RoleSpec | None) -> bool:
    """Whether a role carries a tool that asks long-term memory (recall, kg_search)."""
    return spec is not None and bool({"knowledge", "memory"} & {
        *spec.tool_groups, *spec.tool_groups_on_demand})


def host_task(record: dict[str, Any], settings: Settings) -> Task:
    """The task of a work item as this host will run it: checked as a task file is (its
    workspace refused where no job may work on this host), its MCP servers only those this
    host's own ``mcp.servers`` define by name, run as the host defines them (a task record
    never makes a worker start a program), its venv and mounts only where
    ``tools.toolchain.allow`` lets them (``compose.job_sandbox``).

    Raises:
        TaskFileError: a damaged record, a refused workspace, or an MCP server this host does
            not define.
    """
    task = task_from_record(record)
    compose.refuse_workspace(task, settings)
    unknown = sorted(set(task.mcp_servers) - set(settings.mcp.servers))
    if unknown:
        raise TaskFileError(
            f"the task names MCP server(s) {', '.join(unknown)} that this worker's config "
            "does not define; a worker starts only the servers its own mcp.servers names",
            hint="define them in the worker host's config.yaml (mcp.servers), or run the job "
                 "with local agents")
    return dataclasses.replace(task, mcp_servers={})  # the host's own, by name, run anyway


async def serve_worker(settings: Settings, *, roles: Sequence[str], concurrency: int,
                       remote: bool, announce: Callable[[dict[str, Any]], None],
                       enrolled: str | None = None) -> None:
    """``gliding worker``: connect to ``bus.url``, serve until SIGINT or SIGTERM.

    Raises:
        UsageError: ``bus.url`` is not set, a role is unknown, or concurrency is below 1.
        BusError: the broker cannot be reached.
    """
    if settings.bus.url is None:
        raise UsageError("a worker needs a broker: give --broker mqtt://host:port (or bus.url)",
                         hint="start mosquitto, then `gliding worker --broker URL`")
    unknown = [r for r in roles if r not in role_names()]
    if unknown or not roles:
        raise UsageError(f"unknown role(s) {', '.join(unknown) or '(none given)'}",
                         hint=f"--roles takes a comma-separated list of {role_list()}")
    if not 1 <= concurrency <= 1024:
        raise UsageError(f"--concurrency must be 1 to 1024, got {concurrency}")
    name = worker_id(await anyio.to_thread.run_sync(enrolled_name, settings, enrolled))
    try:  # its own blackboard (without memory.blackboard.url) and begin marks live there
        await anyio.to_thread.run_sync(partial(settings.data_dir.mkdir, parents=True,
                                               exist_ok=True))
    except OSError as exc:
        raise UsageError(f"cannot create the data directory {settings.data_dir}: "
                         f"{exc.strerror or exc}") from exc
    async with Runtime.open(settings) as rt, open_bus(settings, client_id=name,
                                                      worker=name) as bus:
        service = WorkerService(settings, bus, rt, roles=roles, concurrency=concurrency,
                                remote=remote, name=name)
        async with anyio.create_task_group() as tg:
            await tg.start(service.serve)
            announce({"worker": name, "broker": settings.bus.url, "roles": list(service.roles),
                      "concurrency": concurrency, "remote": remote,
                      "blackboard": rt.board is not None})
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    log.info("worker.stopping", worker=name, held=list(service.held))
                    tg.cancel_scope.cancel()
                    break


def _topic_safe(name: str) -> str:
    """``name`` as one MQTT topic level (a cache's address)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "worker"
