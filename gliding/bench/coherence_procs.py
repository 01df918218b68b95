"""The processes of ``gliding bench coherence``: its servers, and ``python -m
gliding.bench.coherence_procs`` (directory, client).

``oxigraph_server`` and ``mosquitto_server`` run the store and the broker the harness uses.

``directory``: one coherence ``Directory`` over MQTT and a ``RegisterStore``; writes ``ready``
on stdout once subscribed and runs until its stdin closes (or it is killed). ``--protocol
broken`` runs it with ``no_invalidate_step``, a deliberately wrong transition function, so the
benchmark can show that its checks catch a broken protocol.

``client``: one process incarnation doing its share of the seeded workload from ``--start``,
in one of three modes: ``mesi`` (a coherence ``Cache``), ``no_cache`` (every operation straight
to the store over HTTP) or ``broadcast_invalidation`` (write-through to the store, then an
invalidation broadcast to every client; reads served from a local copy until one arrives).
Each operation is logged to the history file before it starts and after it returns (raw
``os.write``, see ``coherence.py``). The register store, the workload and the history lines are
here too: the processes need them, the harness reads what they wrote. Both kinds rewrite their
counters file every ``COUNTER_PERIOD_S`` and at exit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import structlog
from anyio.abc import Process, TaskStatus

from gliding.bench.servers import MOSQUITTO_CONFIG, OXIGRAPH, free_port, mosquitto_binary
from gliding.bus.auth import BusAuth, root_auth
from gliding.bus.messages import CoherenceMsg
from gliding.errors import GlidingError
from gliding.memory.coherence.protocol import (
    DEFAULT_LEASE_S,
    DirEffect,
    DirEntry,
    DirEvent,
    InvAck,
    Invalidate,
    SendTo,
    directory_step,
)

GRAPH = "gliding://bench/coherence"
COUNTER_PERIOD_S = 0.5
Kind = Literal["read", "write"]


class CoherenceBenchError(GlidingError):
    code = "bench.coherence"


def key_iri(i: int) -> str:
    return f"gliding://bench/coherence/node/{i}"


def agent_id(process: int, incarnation: int) -> str:
    """A process incarnation's agent id (a valid MQTT topic level)."""
    return f"p{process}.i{incarnation}"


# --- the store ----------------------------------------------------------------------------------


def encode(iri: str, version: int, value: str | None) -> dict[str, Any]:
    """The blackboard node of one register."""
    return {"@id": iri, "@type": "Fact", "text": json.dumps({"version": version, "value": value})}


def decode(node: dict[str, Any] | None) -> tuple[int, str | None]:
    """A register's (version, value) from its node; (0, None) when absent.

    Raises:
        CoherenceBenchError: the node is not one ``encode`` wrote.
    """
    if node is None:
        return 0, None
    try:
        body = json.loads(node["text"])
        version, value = int(body["version"]), body["value"]
    except (KeyError, TypeError, ValueError) as exc:
        raise CoherenceBenchError(f"{node.get('@id')} is not a register node: {exc}") from exc
    if value is not None and not isinstance(value, str):
        raise CoherenceBenchError(f"{node.get('@id')} holds a non-string value")
    return version, value


class RegisterStore:
    """A ``NodeStore`` of versioned registers on a SPARQL endpoint (``oxigraph serve``).

    Counts its ``loads`` and ``saves`` and the microseconds they took. Blocking, like the
    blackboard it wraps.
    """

    def __init__(self, board: Any, graph: str = GRAPH) -> None:
        self.board, self.graph = board, graph
        self.loads = self.saves = 0
        self.load_us = self.save_us = 0

    @classmethod
    def for_oxigraph(cls, base_url: str) -> RegisterStore:
        from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard

        return cls(SparqlEndpointBlackboard.for_oxigraph(base_url))

    def load(self, iri: str) -> tuple[int, str | None]:
        """Raises:
            GlidingError: the endpoint could not be read, or the node is not a register.
        """
        self.loads += 1
        failure = None
        started = time.perf_counter()
        try:
            node = self.board.get(iri, graph=self.graph)
        except GlidingError as exc:
            # Re-raised without the original: its traceback holds pyoxigraph results, which
            # must be dropped on the thread that made them (this worker thread), not the loop's.
            failure = CoherenceBenchError(f"{exc.code}: {exc.message}", hint=exc.hint)
        finally:
            self.load_us += int((time.perf_counter() - started) * 1e6)
        if failure is not None:
            raise failure
        return decode(node)

    def save(self, iri: str, version: int, value: str | None) -> None:
        """Raises:
            GlidingError: the endpoint could not be written.
        """
        self.saves += 1
        started = time.perf_counter()
        try:
            self.board.put(encode(iri, version, value), graph=self.graph)
        finally:
            self.save_us += int((time.perf_counter() - started) * 1e6)


# --- workload and the history format ------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    kind: Kind
    key: str


def workload(seed: int, process: int, ops: int, keys: int, write_ratio: float) -> list[Step]:
    """Process ``process``'s operations: a uniform key, a write with ``write_ratio``."""
    rng = random.Random(f"coherence/{seed}/{process}")
    steps = []
    for _ in range(ops):
        key = key_iri(rng.randrange(keys))
        steps.append(Step("write" if rng.random() < write_ratio else "read", key))
    return steps


def write_value(process: int, incarnation: int, n: int) -> str:
    return f"p{process}.i{incarnation}.{n}"


def call_line(op: str, process: int, agent: str, step: Step, value: str | None,
              at: float) -> bytes:
    return (json.dumps({"t": "call", "op": op, "p": process, "agent": agent, "key": step.key,
                        "kind": step.kind, "value": value, "at": at}) + "\n").encode()


def ret_line(op: str, at: float, *, ok: bool, value: str | None = None, version: int = 0,
             hit: bool = False, error: str | None = None) -> bytes:
    return (json.dumps({"t": "ret", "op": op, "at": at, "ok": ok, "value": value,
                        "version": version, "hit": hit, "error": error}) + "\n").encode()


# --- the servers --------------------------------------------------------------------------------
# Started here, async, with what bench/servers.py says of them (gliding.testing.servers starts
# the same ones for tests, blocking; production code never imports gliding.testing).

SERVER_START_S = 30.0


async def _stop(process: Process) -> None:
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


@asynccontextmanager
async def _server(command: list[str], log: Path, ready: Callable[[], Awaitable[bool]],
                  what: str) -> AsyncIterator[None]:
    """Run ``command`` (output to ``log``) until ``ready()`` answers True; stop it at the end.

    Raises:
        CoherenceBenchError: it is not installed, exited, or was not ready in time.
    """
    with log.open("ab") as sink:
        try:
            process = await anyio.open_process(command, stdin=subprocess.DEVNULL, stdout=sink,
                                               stderr=subprocess.STDOUT)
        except FileNotFoundError as exc:
            raise CoherenceBenchError(f"cannot start {what}: {exc}",
                                      hint="run scripts/setup.sh") from exc
    try:
        deadline = anyio.current_time() + SERVER_START_S
        while not await ready():
            if process.returncode is not None or anyio.current_time() > deadline:
                raise CoherenceBenchError(f"{what} did not start (exit {process.returncode})",
                                          hint=f"see {log}")
            await anyio.sleep(0.05)
        yield
    finally:
        await _stop(process)


@asynccontextmanager
async def oxigraph_server(location: Path, log: Path) -> AsyncIterator[str]:
    """``oxigraph serve`` on a free loopback port with its data in ``location``; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    probe = RegisterStore.for_oxigraph(url)

    async def ready() -> bool:
        try:
            await anyio.to_thread.run_sync(probe.load, key_iri(0))
        except GlidingError:
            return False
        return True

    command = [str(OXIGRAPH), "serve", "--location", str(location), "--bind",
               f"127.0.0.1:{port}"]
    async with _server(command, log, ready, "oxigraph serve"):
        yield url


@asynccontextmanager
async def mosquitto_server(directory: Path) -> AsyncIterator[str]:
    """A mosquitto broker on a free loopback port, its files in ``directory``; its URL."""
    try:
        binary = mosquitto_binary()
    except FileNotFoundError as exc:
        raise CoherenceBenchError(str(exc), hint="or pass --broker mqtt://host:port") from None
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(MOSQUITTO_CONFIG.format(port=port))

    async def ready() -> bool:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            return False
        await stream.aclose()
        return True

    async with _server([binary, "-c", str(config)], directory / "mosquitto.log", ready,
                       "mosquitto"):
        yield f"mqtt://127.0.0.1:{port}"


# --- the broken protocol -------------------------------------------------------------------------


def no_invalidate_step(entry: DirEntry, event: DirEvent, now: float, *,
                       lease: float = DEFAULT_LEASE_S) -> tuple[DirEntry, tuple[DirEffect, ...]]:
    """A broken directory: it never sends Invalidate and pretends every holder acked at once
    (the protocol's state machine test runs it too, and must catch it)."""
    entry, effects = directory_step(entry, event, now, lease=lease)
    kept: list[DirEffect] = []
    while True:
        skipped = [e for e in effects
                   if isinstance(e, SendTo) and isinstance(e.message, Invalidate)]
        kept.extend(e for e in effects if e not in skipped)
        if not skipped:
            return entry, tuple(kept)
        effects = ()
        for effect in skipped:
            assert isinstance(effect.message, Invalidate)
            ack = InvAck(entry.iri, effect.to, effect.message.seq)
            entry, more = directory_step(entry, ack, now, lease=lease)
            effects += more


def broadcast_topic(space: str) -> str:
    return f"coherence/{space}/broadcast"


def _write_counters(path: Path, counters: dict[str, int]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(counters))
    os.replace(tmp, path)


async def _keep_counters(path: Path, counters: Callable[[], dict[str, int]]) -> None:
    while True:
        _write_counters(path, counters())
        await anyio.sleep(COUNTER_PERIOD_S)


# --- the directory ------------------------------------------------------------------------------


def _auth(args: argparse.Namespace) -> BusAuth | None:
    """Signed messages when the harness gave a bus key (``gliding bench coherence --signed``)."""
    return root_auth(args.bus_key) if args.bus_key is not None else None


async def directory_main(args: argparse.Namespace) -> None:
    from gliding.bus.mqtt import MQTTBus
    from gliding.memory.coherence.directory import Directory

    store = RegisterStore.for_oxigraph(args.store)
    step = no_invalidate_step if args.protocol == "broken" else directory_step
    counters_path = Path(args.counters)
    async with MQTTBus(args.broker, auth=_auth(args)) as bus:
        directory = Directory(bus, store, args.space, lease_s=args.lease, grace_s=args.grace,
                              step=step)

        def counters() -> dict[str, int]:
            st = directory.stats
            return {"messages": st.sent, "directory_sent": st.sent,
                    "directory_received": st.received, "store_reads": st.store_loads,
                    "store_writes": st.store_saves, "store_failures": st.store_failures,
                    "store_load_us": store.load_us, "store_save_us": store.save_us,
                    "dropped": st.dropped, "departed": st.departed}

        try:
            async with anyio.create_task_group() as tg:
                await tg.start(directory.serve)
                os.write(1, b"ready\n")
                tg.start_soon(_keep_counters, counters_path, counters)
                await anyio.to_thread.run_sync(sys.stdin.buffer.read)  # until the parent closes
                tg.cancel_scope.cancel()
        finally:
            _write_counters(counters_path, counters())


# --- the clients --------------------------------------------------------------------------------


class MesiRegisters:
    """``mesi``: a coherence ``Cache``; reads answer (version, value, hit), writes the version."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.departs = 0

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        await self.cache.serve(task_status=task_status)

    async def read(self, iri: str) -> tuple[int, str | None, bool]:
        hits = self.cache.stats.hits
        got = await self.cache.read(iri)
        return got.version, got.value, self.cache.stats.hits > hits

    async def write(self, iri: str, value: str) -> int:
        return int(await self.cache.write(iri, value))

    async def leave(self) -> None:
        """Depart: a process done with its share says so, or every line it holds would keep
        writers of it waiting a lease for its answer."""
        self.departs += 1
        await self.cache.leave()

    def snapshot(self) -> dict[str, int]:
        st = self.cache.stats
        return {"messages": st.sent + self.departs, "client_sent": st.sent + self.departs,
                "client_received": st.received,
                "cache_hits": st.hits, "cache_misses": st.misses, "invalidated": st.invalidated,
                "abandoned": st.abandoned}


class StoreRegisters:
    """``no_cache``: every operation goes to the store; a write reads the version first (a
    racy read-modify-write: a baseline, not a protocol)."""

    def __init__(self, store: RegisterStore) -> None:
        self.store = store

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        task_status.started()
        await anyio.sleep_forever()

    async def read(self, iri: str) -> tuple[int, str | None, bool]:
        version, value = await anyio.to_thread.run_sync(self.store.load, iri)
        return version, value, False

    async def write(self, iri: str, value: str) -> int:
        version, _ = await anyio.to_thread.run_sync(self.store.load, iri)
        await anyio.to_thread.run_sync(self.store.save, iri, version + 1, value)
        return version + 1

    def snapshot(self) -> dict[str, int]:
        return {"store_reads": self.store.loads, "store_writes": self.store.saves,
                "store_load_us": self.store.load_us, "store_save_us": self.store.save_us}


class BroadcastRegisters(StoreRegisters):
    """``broadcast_invalidation``: write-through, then an invalidation to every client."""

    def __init__(self, store: RegisterStore, bus: Any, space: str, agent: str) -> None:
        super().__init__(store)
        self.bus, self.space, self.agent = bus, space, agent
        self.local: dict[str, tuple[int, str | None]] = {}
        self.sent = self.received = self.hits = 0

    async def serve(self, *, task_status: TaskStatus[None]) -> None:
        async with self.bus.subscribe(broadcast_topic(self.space), max_buffer=10_000) as sub:
            task_status.started()
            async for _, message in sub:
                if isinstance(message, CoherenceMsg) and message.kind == "invalidate":
                    self.received += 1
                    if message.sender != self.agent:
                        self.local.pop(message.iri, None)

    async def read(self, iri: str) -> tuple[int, str | None, bool]:
        if iri in self.local:
            self.hits += 1
            return (*self.local[iri], True)
        version, value, _ = await super().read(iri)
        self.local[iri] = (version, value)
        return version, value, False

    async def write(self, iri: str, value: str) -> int:
        self.local.pop(iri, None)
        version = await super().write(iri, value)
        self.local[iri] = (version, value)
        self.sent += 1
        await self.bus.publish(broadcast_topic(self.space),
                               CoherenceMsg(kind="invalidate", iri=iri, sender=self.agent,
                                            version=version))
        return version

    def snapshot(self) -> dict[str, int]:
        return {**super().snapshot(), "messages": self.sent, "client_sent": self.sent,
                "client_received": self.received, "cache_hits": self.hits}


async def _operate(args: argparse.Namespace, registers: MesiRegisters | StoreRegisters,
                   fd: int) -> None:
    agent = agent_id(args.process, args.incarnation)
    steps = workload(args.seed, args.process, args.ops, args.keys, args.write_ratio)
    for n in range(args.start, args.ops):
        step: Step = steps[n]
        op = f"p{args.process}.{n}"
        value = write_value(args.process, args.incarnation, n) if step.kind == "write" else None
        os.write(fd, call_line(op, args.process, agent, step, value, time.monotonic()))
        try:
            if step.kind == "write":
                assert value is not None
                version = await registers.write(step.key, value)
                line = ret_line(op, time.monotonic(), ok=True, version=version)
            else:
                version, got, hit = await registers.read(step.key)
                line = ret_line(op, time.monotonic(), ok=True, value=got, version=version,
                                hit=hit)
        except GlidingError as exc:  # CoherenceTimeout, BusError, a store error
            line = ret_line(op, time.monotonic(), ok=False, error=f"{exc.code}: {exc.message}")
        os.write(fd, line)


async def client_main(args: argparse.Namespace) -> None:
    from gliding.bus.mqtt import MQTTBus
    from gliding.memory.coherence.cache import Cache

    agent = agent_id(args.process, args.incarnation)
    fd = os.open(args.history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    counters_path = Path(args.counters)
    store = RegisterStore.for_oxigraph(args.store)
    registers: MesiRegisters | StoreRegisters
    try:
        async with MQTTBus(args.broker, auth=_auth(args)) as bus:
            if args.mode == "mesi":
                registers = MesiRegisters(Cache(bus, args.space, agent, lease_s=args.lease,
                                                timeout_s=args.timeout, tries=3))
            elif args.mode == "broadcast_invalidation":
                registers = BroadcastRegisters(store, bus, args.space, agent)
            else:
                registers = StoreRegisters(store)
            try:
                async with anyio.create_task_group() as tg:
                    await tg.start(registers.serve)
                    tg.start_soon(_keep_counters, counters_path, registers.snapshot)
                    await _operate(args, registers, fd)
                    if isinstance(registers, MesiRegisters):
                        await registers.leave()
                    tg.cancel_scope.cancel()
            finally:
                _write_counters(counters_path, registers.snapshot())
    finally:
        os.close(fd)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gliding.bench.coherence_procs")
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("directory", "client"):
        p = sub.add_parser(role)
        p.add_argument("--space", required=True)
        p.add_argument("--store", required=True)
        p.add_argument("--broker", required=True)
        p.add_argument("--bus-key", type=Path, default=None)
        p.add_argument("--lease", type=float, required=True)
        p.add_argument("--counters", required=True)
    d = sub.choices["directory"]
    d.add_argument("--grace", type=float, default=0.0)
    d.add_argument("--protocol", choices=("mesi", "broken"), default="mesi")
    c = sub.choices["client"]
    c.add_argument("--mode", choices=("mesi", "no_cache", "broadcast_invalidation"),
                   required=True)
    c.add_argument("--timeout", type=float, required=True)
    for name in ("--process", "--incarnation", "--start", "--ops", "--keys", "--seed"):
        c.add_argument(name, type=int, required=True)
    c.add_argument("--write-ratio", type=float, required=True)
    c.add_argument("--history", required=True)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    anyio.run(directory_main if args.role == "directory" else client_main, args)


if __name__ == "__main__":
    main()
