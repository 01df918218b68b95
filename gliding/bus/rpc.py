"""Calls from a worker to the process of a job over the bus: ``RequestClient`` asks and waits,
``RequestServer`` answers; a ``Service`` names what one kind of call (L0 in
``memory/archive/bus.py``, long-term memory in ``memory/recall/bus.py``) does its own way.

    worker:  client.call(op, **args) ──Request on service.requests(job)──► RequestServer.handle
                                     ◄──Reply on service.replies(worker)──

A request whose reply does not come within ``timeout_s`` is sent again under the same id, up to
``tries`` times (the first reply counts, ``replies.Replies``), so a service offers only calls
that are safe to repeat; then the call raises the service's ``error``. Errors keep their kind:
the server sends a GlidingError's code and message, and the client raises the class the
service's ``errors`` name for that code (its ``error`` for any other). A request ``handle``
cannot read (KeyError, TypeError, ValueError) is answered with the service's ``error``. The
server answers at most ``concurrency`` requests at once and only those of its own job; who may
send one is the job's dispatcher's business (``daemon/dispatch.py``, ``policy``), on a bus that
signs every message (``bus/auth.py``).
"""

from __future__ import annotations

import itertools
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

import anyio
import structlog

from gliding.bus.messages import ReplyMsg, Request
from gliding.bus.port import Bus
from gliding.bus.replies import Replies
from gliding.errors import GlidingError

log = structlog.get_logger("gliding.bus")

R = TypeVar("R", bound=Request)
Op = TypeVar("Op", bound=str)


@dataclass(frozen=True)
class Service(Generic[R]):
    """What sets one kind of call apart; the rest is the same for all."""

    name: str  # "archive": its log event archive.request.retry, a bad request's error text
    request: type[R]
    reply: type[ReplyMsg]
    requests: Callable[[str], str]  # the topic of a job's requests (``topics.py``)
    replies: Callable[[str], str]  # the topic of a worker's replies
    error: type[GlidingError]  # no answer in time, a bad request, a code not in ``errors``
    errors: Mapping[str, type[GlidingError]]  # the codes raised again as their own class
    asked: str  # the call in the error of a job that does not answer: "an archive {op}"


class RequestClient(Generic[Op]):
    """Calls ``service`` of job ``job`` for worker ``worker`` over ``bus``.

    Use inside ``async with`` (it listens for its replies)."""

    def __init__(self, service: Service[Any], bus: Bus, job: str, worker: str, *,
                 timeout_s: float, tries: int) -> None:
        self.service, self.bus, self._job, self.worker = service, bus, job, worker
        self.timeout_s, self.tries = timeout_s, tries
        self._ids = itertools.count()
        self._prefix = secrets.token_hex(4)
        self._replies = Replies[str, ReplyMsg]()
        self._tg: Any = None

    @property
    def job(self) -> str:
        return self._job

    async def __aenter__(self) -> Self:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        await self._tg.start(self._listen)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)

    async def _listen(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        async with self.bus.subscribe(self.service.replies(self.worker),
                                      max_buffer=1000) as replies:
            task_status.started()
            while True:
                _topic, reply = await replies.receive()
                if isinstance(reply, self.service.reply):
                    self._replies.deliver(reply.id, reply)

    async def call(self, op: Op, *, timeout_s: float | None = None, tries: int | None = None,
                   **args: Any) -> Any:
        """Ask the job's process; its result. ``timeout_s`` and ``tries``: for this call.

        Raises:
            GlidingError: the service's ``error`` when no answer came in time (the job's
                process is gone or unreachable); the server's error, of the class the
                service names for its code.
        """
        service = self.service
        rid = f"{self.worker}-{self._prefix}-{next(self._ids)}"
        request = service.request(id=rid, job=self._job, worker=self.worker, op=op, args=args)
        wait = self.timeout_s if timeout_s is None else timeout_s
        tries = tries or self.tries
        self._replies.expect(rid)
        reply = None
        try:
            for attempt in range(1, tries + 1):
                await self.bus.publish(service.requests(self._job), request)
                reply = await self._replies.wait(rid, wait)
                if reply is not None:
                    break
                log.warning(f"{service.name}.request.retry", job=self._job, op=op,
                            attempt=attempt)
        finally:
            self._replies.forget(rid)
        if reply is None:
            raise service.error(
                f"the process of job {self._job} did not answer {service.asked.format(op=op)} "
                f"within {tries} x {wait:g}s",
                hint="is the job still running (gliding status) and the broker reachable?")
        if not reply.ok:
            raise service.errors.get(reply.code, service.error)(reply.error)
        return reply.result


class RequestServer(ABC, Generic[R]):
    """Answers the requests of job ``job`` to ``service`` from workers, over ``bus``, at most
    ``concurrency`` at once, with ``handle``."""

    def __init__(self, service: Service[R], bus: Bus, job: str, *, concurrency: int) -> None:
        self.service, self.bus, self.job = service, bus, job
        self._slots = anyio.Semaphore(concurrency)
        self.served = 0

    @abstractmethod
    async def handle(self, request: R) -> Any:
        """The result of ``request``, as JSON values.

        Raises:
            GlidingError: sent back with its code and message.
            KeyError, TypeError, ValueError: a malformed request.
        """

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        async with self.bus.subscribe(self.service.requests(self.job),
                                      max_buffer=1000) as inbox, \
                anyio.create_task_group() as tg:
            task_status.started()
            while True:
                _topic, request = await inbox.receive()
                if not isinstance(request, self.service.request) or request.job != self.job:
                    continue
                await self._slots.acquire()
                tg.start_soon(self._answer, request)

    async def _answer(self, request: R) -> None:
        service = self.service
        try:
            try:
                answer = {"ok": True, "result": await self.handle(request)}
            except GlidingError as exc:
                answer = {"ok": False, "code": exc.code, "error": exc.message}
            except (KeyError, TypeError, ValueError) as exc:  # a malformed request
                answer = {"ok": False, "code": service.error.code,
                          "error": f"bad {service.name} request {request.op}: {exc}"}
            self.served += 1
            await self.bus.publish(service.replies(request.worker),
                                   service.reply(id=request.id, **answer))
        finally:
            self._slots.release()
