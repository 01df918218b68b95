"""``gliding bench coherence``: MESI over real processes, kill -9s and a linearizability check.

This module owns the pure parts of the coherence benchmark (the register store's encoding, the
seeded workload and kill schedule, the history format and its parsing, the lost-write count and
the per-mode metrics) and the parent harness that runs it. The processes it starts are in
``coherence_procs.py``.

Topology, per mode (``mesi``, ``no_cache``, ``broadcast_invalidation``; same seed, workload and
kill schedule in each)::

    parent ── starts ──► mosquitto (unless --broker), a fresh ``oxigraph serve``
           ── starts ──► directory process (mesi only)   ─┐
           ── starts ──► N client processes               ├─ MQTT + SPARQL over HTTP
           ── SIGKILL / restart / depart message ─────────┘

Every client appends one JSON line before each operation starts (``call``) and one after it
returns (``ret``), with raw ``os.write`` on an ``O_APPEND`` file, so a SIGKILL loses nothing
already written: an operation with a call and no return is pending. Kills fire when the total
count of call lines crosses seeded thresholds (progress, not wall time, so every mode sees the
same schedule). A killed client is reaped, its agent id departed over the bus and a new
incarnation (a new agent id ``p<k>.i<inc>``) started for the operations it still owes. After a
mode, each key's stored value is added as a final read, so a lost write shows up in the check.

Counters (messages published, store reads, cache hits) are rewritten by each process every
``coherence_procs.COUNTER_PERIOD_S`` and at exit; a killed process loses at most that last
period's counts.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.abc import Process

from gliding.bench.coherence_procs import (
    CoherenceBenchError,
    Kind,
    RegisterStore,
    agent_id,
    key_iri,
)
from gliding.bench.stats import percentile
from gliding.bus.auth import root_auth
from gliding.errors import GlidingError
from gliding.memory.coherence.linearizability import Operation, Result, check
from gliding.memory.coherence.service import announce_departure

MODES = ("mesi", "no_cache", "broadcast_invalidation")
POLL_S = 0.05
READY_TIMEOUT_S = 60.0


# --- the kill schedule --------------------------------------------------------------------------


@dataclass(frozen=True)
class Kill:
    """Kill when ``at`` operations were called in all; ``pick`` chooses among the running
    clients (modulo their count); ``directory``: kill the directory instead."""

    at: int
    pick: int
    directory: bool = False


def kill_schedule(seed: int, total_ops: int, kills: int, directory_kills: int) -> list[Kill]:
    """Seeded kill moments between 5% and 90% of the run, in order."""
    rng = random.Random(f"coherence/{seed}/kills")
    low, high = max(1, total_ops // 20), max(1, total_ops * 9 // 10)
    out = [Kill(rng.randint(low, high), rng.randrange(1 << 30)) for _ in range(kills)]
    out += [Kill(rng.randint(low, high), 0, True) for _ in range(directory_kills)]
    return sorted(out, key=lambda k: k.at)


# --- history ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One operation from a history: for a write ``value`` is what it wrote and ``version``
    what it was acknowledged as; for a read both are what it returned. ``ret`` None: pending."""

    op: str
    process: int
    agent: str
    key: str
    kind: Kind
    value: str | None
    call: float
    ret: float | None = None
    ok: bool = True
    version: int = 0
    hit: bool = False
    error: str | None = None

    def operation(self) -> Operation:
        return Operation(self.agent, self.key, self.kind, self.value, self.call, self.ret,
                         self.ok)


def parse_history(lines: Iterable[str]) -> list[Record]:
    """The operations of history lines (any order, any number of files); a torn or unknown line
    is skipped, a return without its call ignored."""
    calls: dict[str, dict[str, Any]] = {}
    rets: dict[str, dict[str, Any]] = {}
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if item.get("t") == "call":
            calls[item["op"]] = item
        elif item.get("t") == "ret":
            rets[item["op"]] = item
    records = []
    for op, c in calls.items():
        r = rets.get(op)
        base = Record(op, c["p"], c["agent"], c["key"], c["kind"], c["value"], c["at"])
        if r is None:
            records.append(base)
            continue
        value = c["value"] if c["kind"] == "write" else r["value"]
        records.append(Record(op, c["p"], c["agent"], c["key"], c["kind"], value, c["at"],
                              r["at"], bool(r["ok"]), int(r["version"]), bool(r["hit"]),
                              r.get("error")))
    return sorted(records, key=lambda rec: rec.call)


def lost_acked_writes(records: Iterable[Record],
                      final: dict[str, tuple[int, str | None]]) -> list[Record]:
    """Acknowledged writes the store does not hold: a version above the key's final stored
    version, or equal to it with another value."""
    lost = []
    for rec in records:
        if rec.kind != "write" or rec.ret is None or not rec.ok or rec.key not in final:
            continue
        version, value = final[rec.key]
        if rec.version > version or (rec.version == version and rec.value != value):
            lost.append(rec)
    return lost


def final_reads(final: dict[str, tuple[int, str | None]], at: float) -> list[Operation]:
    """Each key's stored value as a read after every client ended."""
    return [Operation("final", key, "read", value, at, at) for key, (_, value) in final.items()]


def _ms(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50) * 1000, 3),
            "p99": round(percentile(values, 99) * 1000, 3)}


def _mean_ms(counters: dict[str, int], micros: str, count: str) -> float:
    n = counters.get(count, 0)
    return round(counters.get(micros, 0) / n / 1000, 3) if n else 0.0


def checker_summary(result: Result, seconds: float) -> dict[str, Any]:
    return {"ok": result.ok, "keys_checked": result.keys_checked,
            "operations": result.operations, "violations": len(result.violations),
            "timed_out_keys": list(result.timed_out_keys), "seconds": round(seconds, 2),
            "examples": [v.describe() for v in result.violations[:5]]}


def mode_metrics(records: Sequence[Record], counters: dict[str, int], lost: int,
                 checked: dict[str, Any], *, wall_s: float, kills: int,
                 directory_kills: int) -> dict[str, Any]:
    """One mode's figures (see the module docstring of the CLI command for their meaning)."""
    done = [r for r in records if r.ret is not None and r.ok]
    failed = sum(1 for r in records if r.ret is not None and not r.ok)
    reads = [r for r in done if r.kind == "read"]
    writes = [r for r in done if r.kind == "write"]
    hits = sum(1 for r in reads if r.hit)
    messages = counters.get("messages", 0)
    return {
        "operations": len(done), "called": len(records), "pending": len(records) - len(done)
        - failed, "failed": failed, "reads": len(reads), "writes": len(writes),
        "messages": messages,
        "messages_per_operation": round(messages / len(records), 3) if records else 0.0,
        "read_latency_ms": _ms([r.ret - r.call for r in reads if r.ret is not None]),
        "write_latency_ms": _ms([r.ret - r.call for r in writes if r.ret is not None]),
        "store_reads": counters.get("store_reads", 0),
        "store_writes": counters.get("store_writes", 0),
        "store_save_ms_mean": _mean_ms(counters, "store_save_us", "store_writes"),
        "store_load_ms_mean": _mean_ms(counters, "store_load_us", "store_reads"),
        "cache_hit_rate": round(hits / len(reads), 4) if reads else 0.0,
        "violations": checked["violations"], "lost_acked_writes": lost,
        "checker_timed_out": bool(checked["timed_out_keys"]),
        "kills": kills, "directory_kills": directory_kills, "wall_s": round(wall_s, 2),
        "counters": counters, "checker": checked,
    }


def failures(result: dict[str, Any]) -> list[str]:
    """Why the mesi run fails the benchmark (empty: it passed)."""
    mesi = result["mesi"]
    out = []
    if mesi["violations"]:
        out.append(f"{mesi['violations']} key(s) not linearizable")
    if mesi["lost_acked_writes"]:
        out.append(f"{mesi['lost_acked_writes']} acknowledged write(s) lost")
    if mesi["checker_timed_out"]:
        out.append(f"the checker timed out on {len(mesi['checker']['timed_out_keys'])} key(s)")
    return out


# --- the harness --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchSettings:
    processes: int = 4
    ops: int = 10_000
    keys: int = 100
    write_ratio: float = 0.25
    seed: int = 0
    kills: int = 8
    directory_kills: int = 1
    lease_s: float = 1.0
    timeout_leases: float = 3.0
    protocol: Literal["mesi", "broken"] = "mesi"
    broker: str | None = None
    modes: tuple[str, ...] = MODES
    check_timeout_s: float = 120.0
    workdir: Path | None = None
    bus_key: Path | None = None  # sign every message with this root key (bus/auth.py)


@dataclass
class _Run:
    """One mode's live processes and progress (mutable harness state)."""

    mode: str
    space: str
    store_url: str
    broker: str
    root: Path
    settings: BenchSettings
    clients: dict[int, Process] = field(default_factory=dict)
    incarnation: dict[int, int] = field(default_factory=dict)
    finished: set[int] = field(default_factory=set)
    calls: dict[int, int] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)
    directory: Process | None = None
    directory_incarnation: int = 0
    kills: int = 0
    directory_kills: int = 0
    departs: int = 0
    logs: list[Any] = field(default_factory=list)

    def history(self, process: int) -> Path:
        return self.root / f"history-p{process}.jsonl"


def _proc_command(*args: str, key: Path | None = None) -> list[str]:
    """A bench process's command line; ``key``: the bus key every process signs with."""
    signed = ["--bus-key", str(key)] if key is not None else []
    return [sys.executable, "-m", "gliding.bench.coherence_procs", *args, *signed]


async def _start_directory(run: _Run, grace_s: float) -> None:
    s = run.settings
    run.directory_incarnation += 1
    name = f"dir.i{run.directory_incarnation}"
    log = (run.root / f"{name}.log").open("ab")
    run.logs.append(log)
    process = await anyio.open_process(
        _proc_command("directory", "--space", run.space, "--store", run.store_url, "--broker",
                      run.broker, "--lease", str(s.lease_s), "--grace", str(grace_s),
                      "--protocol", s.protocol, "--counters",
                      str(run.root / "counters" / f"{name}.json"), key=s.bus_key),
        stdin=-1, stdout=-1, stderr=log)
    assert process.stdout is not None
    seen = b""
    with anyio.fail_after(READY_TIMEOUT_S):
        async for chunk in process.stdout:
            seen += chunk
            if b"ready" in seen:
                break
        else:
            raise CoherenceBenchError(f"the directory exited before it was ready; see {log.name}")
    run.directory = process


async def _start_client(run: _Run, process: int) -> None:
    s = run.settings
    inc = run.incarnation.get(process, 0) + 1
    run.incarnation[process] = inc
    agent = agent_id(process, inc)
    log = (run.root / f"{agent}.log").open("ab")
    run.logs.append(log)
    run.clients[process] = await anyio.open_process(
        _proc_command("client", "--mode", run.mode, "--space", run.space, "--store",
                      run.store_url, "--broker", run.broker, "--lease", str(s.lease_s),
                      "--timeout", str(s.timeout_leases * s.lease_s), "--process", str(process),
                      "--incarnation", str(inc), "--start", str(run.calls.get(process, 0)),
                      "--ops", str(s.ops), "--keys", str(s.keys), "--write-ratio",
                      str(s.write_ratio), "--seed", str(s.seed), "--history",
                      str(run.history(process)), "--counters",
                      str(run.root / "counters" / f"{agent}.json"), key=s.bus_key),
        stdin=-1, stdout=log, stderr=log)


def _tail(run: _Run, process: int) -> None:
    """Count the call lines appended to ``process``'s history since the last look."""
    path = run.history(process)
    if not path.exists():
        return
    with path.open("rb") as f:
        f.seek(run.offsets.get(process, 0))
        data = f.read()
    end = data.rfind(b"\n") + 1
    run.offsets[process] = run.offsets.get(process, 0) + end
    run.calls[process] = run.calls.get(process, 0) + data[:end].count(b'"t": "call"')


async def _reap(process: Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


async def _kill_client(run: _Run, kill: Kill, bus: Any, say: Callable[[str], None]) -> None:

    running = sorted(p for p in run.clients if p not in run.finished)
    if not running:
        return
    process = running[kill.pick % len(running)]
    proc = run.clients[process]
    with contextlib.suppress(ProcessLookupError):  # it may have just exited
        proc.send_signal(signal.SIGKILL)
    await proc.wait()
    _tail(run, process)
    if proc.returncode == 0:  # it finished before the signal: nothing to kill
        run.finished.add(process)
        return
    agent = agent_id(process, run.incarnation[process])
    run.kills += 1
    if bus is not None:
        run.departs += 1
        await announce_departure(bus, run.space, agent)
    owed = run.settings.ops - run.calls.get(process, 0)
    say(f"{run.mode}: killed client {agent} at {sum(run.calls.values())} ops called; "
        f"restarting it for {owed} more")
    if owed > 0:
        await _start_client(run, process)
    else:
        run.finished.add(process)


async def _kill_directory(run: _Run, say: Callable[[str], None]) -> None:
    if run.directory is None:
        return
    run.directory.send_signal(signal.SIGKILL)
    await run.directory.wait()
    run.directory_kills += 1
    say(f"{run.mode}: killed the directory dir.i{run.directory_incarnation} at "
        f"{sum(run.calls.values())} ops called; restarting it (grace {run.settings.lease_s}s)")
    await _start_directory(run, run.settings.lease_s)


def _counters(root: Path) -> dict[str, int]:
    total: dict[str, int] = {}
    for path in sorted((root / "counters").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for k, v in data.items():
            if isinstance(v, int):
                total[k] = total.get(k, 0) + v
    return total


async def _drive(run: _Run, schedule: list[Kill], bus: Any, say: Callable[[str], None]) -> None:
    """Run the clients to the end, firing the kills as progress crosses them."""
    s = run.settings
    total = s.processes * s.ops
    pending = list(schedule)
    next_report = 0.0
    while len(run.finished) < s.processes:
        await anyio.sleep(POLL_S)
        for p in range(s.processes):
            _tail(run, p)
        for p, proc in run.clients.items():
            if p not in run.finished and proc.returncode is not None:
                if proc.returncode != 0:
                    raise CoherenceBenchError(
                        f"{run.mode}: client {agent_id(p, run.incarnation[p])} exited with "
                        f"{proc.returncode}; see its log in {run.root}",
                        hint="run again with --workdir to keep the logs")
                run.finished.add(p)
        called = sum(run.calls.values())
        while pending and called >= pending[0].at:
            kill = pending.pop(0)
            if kill.directory:
                await _kill_directory(run, say)
            else:
                await _kill_client(run, kill, bus, say)
        if time.monotonic() >= next_report:
            say(f"{run.mode}: {called}/{total} ops called")
            next_report = time.monotonic() + 5.0


async def _run_mode(mode: str, s: BenchSettings, broker: str, base: Path, bus: Any,
                    say: Callable[[str], None]) -> dict[str, Any]:
    from gliding.bench.coherence_procs import oxigraph_server

    root = base / mode
    (root / "counters").mkdir(parents=True)
    schedule = kill_schedule(s.seed, s.processes * s.ops, s.kills,
                             s.directory_kills if mode == "mesi" else 0)
    started = time.monotonic()
    async with oxigraph_server(root / "oxigraph", root / "oxigraph.log") as store_url:
        run = _Run(mode, f"bench{s.seed}-{mode}", store_url, broker, root, s)
        try:
            if mode == "mesi":
                await _start_directory(run, 0.0)
            for p in range(s.processes):
                await _start_client(run, p)
            await _drive(run, schedule, bus if mode == "mesi" else None, say)
            if run.directory is not None:
                assert run.directory.stdin is not None
                await run.directory.stdin.aclose()  # EOF: write the counters and exit
                with anyio.move_on_after(10):
                    await run.directory.wait()
        finally:
            for proc in [*run.clients.values(), *([run.directory] if run.directory else [])]:
                await _reap(proc)
            for log in run.logs:
                log.close()
        wall_s = time.monotonic() - started
        await anyio.sleep(0.2)  # a store write in flight when the directory stopped lands
        store = RegisterStore.for_oxigraph(store_url)
        final: dict[str, tuple[int, str | None]] = {}
        final_errors = 0
        for i in range(s.keys):
            try:
                final[key_iri(i)] = await anyio.to_thread.run_sync(store.load, key_iri(i))
            except GlidingError:
                final_errors += 1
    lines: list[str] = []
    for p in range(s.processes):
        if run.history(p).exists():
            lines += run.history(p).read_text().splitlines()
    records = parse_history(lines)
    history = [r.operation() for r in records] + final_reads(final, time.monotonic())
    t0 = time.monotonic()
    result = await anyio.to_thread.run_sync(
        lambda: check(history, timeout_s=s.check_timeout_s))
    checked = checker_summary(result, time.monotonic() - t0)
    counters = _counters(root)
    counters["messages"] = counters.get("messages", 0) + run.departs
    counters["departs"] = run.departs
    lost = lost_acked_writes(records, final)
    metrics = mode_metrics(records, counters, len(lost), checked, wall_s=wall_s,
                           kills=run.kills, directory_kills=run.directory_kills)
    metrics["final_read_errors"] = final_errors
    say(f"{mode}: {metrics['operations']} ops done, {metrics['pending']} pending, "
        f"{metrics['failed']} failed, {metrics['violations']} violation(s), "
        f"{len(lost)} lost in {wall_s:.1f}s")
    return metrics


async def _run_all(s: BenchSettings, base: Path,
                   say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    from gliding.bench.coherence_procs import mosquitto_server
    from gliding.bus.mqtt import MQTTBus

    async with AsyncExitStack() as stack:
        broker = s.broker
        if broker is None:
            (base / "mosquitto").mkdir(exist_ok=True)
            broker = await stack.enter_async_context(mosquitto_server(base / "mosquitto"))
        out: dict[str, dict[str, Any]] = {}
        bus = await stack.enter_async_context(MQTTBus(
            broker, auth=root_auth(s.bus_key) if s.bus_key is not None else None))
        for mode in s.modes:
            out[mode] = await _run_mode(mode, s, broker, base, bus, say)
    return out


def run_coherence_bench(s: BenchSettings, *,
                        progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run every mode of ``s`` and return the result (see ``gliding bench coherence``).

    Raises:
        CoherenceBenchError: a process failed or a server did not start.
    """
    if "mesi" not in s.modes:
        raise CoherenceBenchError("the modes must include mesi", hint="add mesi to --modes")
    with ExitStack() as stack:
        if s.workdir is not None:
            base = s.workdir
            base.mkdir(parents=True, exist_ok=True)
        else:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gliding-coh-")))
        try:
            modes = anyio.run(_run_all, s, base, progress)
        except OSError as exc:
            raise CoherenceBenchError(f"the coherence bench could not run: {exc}") from exc
    mesi = modes["mesi"]
    no_cache = modes.get("no_cache")
    for metrics in modes.values():
        if no_cache and no_cache["store_reads"]:
            metrics["store_reads_saved_vs_no_cache"] = round(
                1 - metrics["store_reads"] / no_cache["store_reads"], 4)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items()}
    settings["modes"] = list(s.modes)
    settings["pid"] = os.getpid()
    return {
        "violations": mesi["violations"], "lost_acked_writes": mesi["lost_acked_writes"],
        "operations": mesi["operations"], "processes": s.processes, "ops_per_process": s.ops,
        "kills": mesi["kills"], "directory_kills": mesi["directory_kills"], "mesi": mesi,
        "baselines": {m: v for m, v in modes.items() if m != "mesi"},
        "checker": mesi["checker"], "settings": settings,
    }
