"""The daemon's event log: every job's events, numbered, written, then streamed.

Every event of a job (a ``gliding.core.events`` event, from the job's run or from the daemon
itself) is numbered (``seq``), time-stamped and stamped with ``schema_version``, appended to
``<data_dir>/daemon/events/<job>.jsonl`` on a worker thread and only then handed to the job's
subscribers; so whatever a subscriber saw is in the file, and a client that reconnects with
``after=<seq>`` misses nothing and sees nothing twice (even across a daemon restart). A file
holds MAX_LOG_BYTES at most (past that only the final events are kept; past half of it no
more streamed model output, ``model.delta``, so a model's text cannot crowd out the job's
progress; one event's data is clipped at MAX_EVENT_BYTES). A subscriber's buffer holds
SUBSCRIBER_BUFFER events: one that falls further behind is disconnected (its stream ends with a
DROPPED marker) rather than stall the job or the other subscribers; it reconnects with
``after``.

Recording happens on the event loop without I/O (``record``); one writer task (``write``)
does the file I/O in batches. The job service (``gliding.daemon.service``) owns one EventLog.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from gliding.bus.messages import JobEvent
from gliding.core import events
from gliding.daemon import queue as q
from gliding.daemon.queue import TERMINAL

log = structlog.get_logger("gliding.daemon")

MAX_EVENT_BYTES = 16_000  # one event's JSON line; a larger one keeps its name, not its data
MAX_LOG_BYTES = 8 << 20  # one job's events file; past it only TERMINAL events are written
SUBSCRIBER_BUFFER = 256  # events a subscriber may lag behind before it is disconnected
DROPPED = events.StreamDropped.name
"""The marker that ends a subscriber's stream when it fell SUBSCRIBER_BUFFER events behind."""


@dataclass
class _Log:
    """A job's event log: the next number and the file's size, and who watches it."""

    job: str
    path: Path
    next_seq: int
    size: int
    subscribers: list[_Subscriber] = field(default_factory=list)
    dropped: int = 0  # events not written: the file was full
    open: bool = False  # more events may come: a subscriber follows (else it gets the past)


@dataclass
class _Subscriber:
    send: MemoryObjectSendStream[dict[str, Any]]
    dropped: bool = False


class EventLog:
    """The event logs of the jobs of ``data_dir``; ``now`` stamps the records."""

    def __init__(self, data_dir: Path, now: Callable[[], float]) -> None:
        self.data_dir = data_dir
        self._now = now
        self._logs: dict[str, _Log] = {}
        self._lock = anyio.Lock()
        # events to write, in order; a None record: end the log's streams once written
        self._pending: list[tuple[_Log, dict[str, Any] | None, str]] = []
        self._wake_writer = anyio.Event()

    async def of(self, job: str) -> _Log:
        """The job's event log, opened (its end found) on first use; kept while the daemon
        runs (a few hundred bytes a job)."""
        found = self._logs.get(job)
        if found is not None:
            return found
        async with self._lock:
            found = self._logs.get(job)
            if found is None:
                path = self.data_dir / q.EVENTS_DIR / f"{job}.jsonl"
                last, size = await anyio.to_thread.run_sync(q.events_end, path,
                                                            4 * MAX_EVENT_BYTES)
                found = self._logs[job] = _Log(job, path, last + 1, size)
        return found

    async def emit(self, job: str, event: events.Event) -> None:
        """Record one of the daemon's own events for ``job``."""
        self.record(await self.of(job), event.name, events.event_data(event))

    def on_event(self, log_: _Log, event: JobEvent) -> None:
        """Record an event of the job's run (its ``on_event``); never raises into the job."""
        try:
            self.record(log_, event.event, event.data)
        except Exception:  # an event that cannot be kept must not stop the job
            log.exception("daemon.event.failed", job=log_.job, event=event.event)

    def record(self, log_: _Log, event: str, data: dict[str, Any]) -> None:
        """Number the event and queue it for the writer (on the event loop, no I/O)."""
        record = {"seq": log_.next_seq, "at": self._now(), "job": log_.job, "event": event,
                  "data": data, "schema_version": events.SCHEMA_VERSION}
        line = json.dumps(record, ensure_ascii=False, default=str)
        if len(line.encode()) > MAX_EVENT_BYTES:
            record["data"] = {"clipped": True, "bytes": len(line.encode())}
            line = json.dumps(record, ensure_ascii=False, default=str)
        size = len(line.encode()) + 1
        if (log_.size + size > MAX_LOG_BYTES and event not in TERMINAL) or (
                event == events.ModelDelta.name and log_.size + size > MAX_LOG_BYTES // 2):
            log_.dropped += 1
            return
        log_.next_seq += 1
        log_.size += size
        log_.open = True
        self._pending.append((log_, record, line))
        self._wake_writer.set()

    def wake(self) -> None:
        """Let the writer look again (whether it may stop)."""
        self._wake_writer.set()

    async def write(self, done: Callable[[], bool]) -> None:
        """Write the queued events, batch by batch, then hand each to its subscribers; return
        once ``done()`` and nothing is left to write."""
        while True:
            await self._wake_writer.wait()
            self._wake_writer = anyio.Event()
            await self.drain()
            if done() and not self._pending:
                return

    async def drain(self) -> None:
        """Write every queued event now."""
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                with anyio.CancelScope(shield=True):  # a batch taken is written, or warned of
                    await anyio.to_thread.run_sync(
                        q.append_events, [(lg.path, line) for lg, rec, line in batch
                                          if rec is not None])
            except OSError as exc:  # events are news: the job goes on without them
                log.warning("daemon.events.unwritten", error=str(exc), events=len(batch))
            for log_, record, line in batch:
                self._fan_out(log_, record, line)

    def _fan_out(self, log_: _Log, record: dict[str, Any] | None, line: str) -> None:
        if record is None:  # the end of a run: its streams end after what came before
            self._end_streams(log_, still_open=int(line) != log_.next_seq)
            return
        for sub in list(log_.subscribers):
            try:
                sub.send.send_nowait(record)
            except anyio.WouldBlock:  # it fell behind: disconnect it, never wait for it
                sub.dropped = True
                sub.send.close()
                log_.subscribers.remove(sub)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                log_.subscribers.remove(sub)

    def _end_streams(self, log_: _Log, *, still_open: bool = False) -> None:
        log_.open = still_open  # events recorded after the end mark: another run began
        for sub in log_.subscribers:
            sub.send.close()
        log_.subscribers.clear()

    def close_subscribers(self, job: str | None) -> None:
        """End the streams of ``job``'s subscribers once they got what was recorded before
        (through the writer); every job's at once (None: the daemon stops)."""
        if job is None:
            for log_ in self._logs.values():
                self._end_streams(log_)
            return
        found = self._logs.get(job)
        if found is not None:
            self._pending.append((found, None, str(found.next_seq)))
            self._wake_writer.set()

    async def stream(self, job: str, *, after: int, follow: bool
                     ) -> AsyncIterator[dict[str, Any]]:
        """The job's events numbered above ``after``: those written so far and, ``follow``,
        the ones to come until a TERMINAL event or the end of the job's run (or of the
        daemon). A stream that fell behind ends with a DROPPED marker
        (``{"event": DROPPED, "after": <the last seq it got>}``): reconnect with that."""
        log_ = await self.of(job)
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](SUBSCRIBER_BUFFER)
        sub = _Subscriber(send)
        if follow and log_.open:
            log_.subscribers.append(sub)  # before reading the file: nothing falls between
        else:
            send.close()  # the past only
        last = after
        try:
            past = await anyio.to_thread.run_sync(q.read_events, log_.path, after)
            for record in past:
                last = record["seq"]
                yield record
            if not follow:
                return
            async for record in receive:
                if record["seq"] <= last:
                    continue  # read from the file already
                last = record["seq"]
                yield record
                if record["event"] in TERMINAL:
                    return
            if sub.dropped:
                yield {"event": DROPPED, "job": job, "after": last,
                       "schema_version": events.SCHEMA_VERSION,
                       "data": events.event_data(events.StreamDropped(
                           reason=f"fell {SUBSCRIBER_BUFFER} events behind"))}
        finally:
            if sub in log_.subscribers:
                log_.subscribers.remove(sub)
            send.close()
            receive.close()
