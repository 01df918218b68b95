#!/usr/bin/env python3
"""MQTTBus against raw aiomqtt at QoS 1, in the same run against the same broker.

    python scripts/bench_bus.py [--messages 20000] [--size 256] [--runs 5] [--rtt 2000]
                                [--url mqtt://host:port] [--out r.json]

Starts its own mosquitto (``gliding.testing.servers.mosquitto``) unless ``--url`` is given. All
clients live in this one process and event loop, each on its own connection, so what is
measured is the CPU each side spends per message plus the broker's round trips. Every run
measures both sides (alternating which goes first) and the report holds the medians over runs.

    throughput  one publisher connection publishes ``--messages`` JobEvents one after another
                (each waits for its PUBACK) on one topic; one subscriber connection receives
                them; msgs/s from the first publish to the last receive.
    latency     ``--rtt`` sequential round trips: a request on one topic, echoed back by the
                other connection on another topic; p50 and p99 in ms.

What each side does per message, so the comparison is fair:
    raw      publishes ``message.to_json()`` with ``aiomqtt.Client.publish(qos=1,
             timeout=math.inf)``; receives with ``async for m in client.messages`` and
             ``json.loads(m.payload)``; paho acknowledges automatically. The echo publishes
             ``reply.to_json()`` of a prebuilt reply.
    mqttbus  ``MQTTBus.publish`` (topic checks, ``to_json``, PUBACK wait); the subscriber's
             bus decodes and validates with ``from_json``, routes to the subscription's bounded
             buffer, acknowledges, and ``sub.receive()`` takes it. The echo publishes the
             prebuilt reply with ``MQTTBus.publish``.
Both sides set TCP_NODELAY on their sockets (MQTTBus always does). The messages are built before
the clock starts: JobEvent(job, event, data={"n": i, "pad": "x" * size}).

Prints JSON (and writes it to ``--out``):

    {"messages", "size", "qos": 1, "runs", "rtt_round_trips",
     "raw": {"msgs_per_s", "rtt_ms_p50", "rtt_ms_p99"}, "mqttbus": {...}, "ratio",
     "ratios_per_run", "target_ratio": 0.8, "url"}

``ratio`` is mqttbus_msgs_per_s / raw_msgs_per_s of the medians. Target: ratio >= 0.80.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiomqtt
import anyio

from gliding.bus.auth import root_auth
from gliding.bus.messages import JobEvent
from gliding.bus.mqtt import MQTTBus
from gliding.bus.mqtt_link import parse_url
from gliding.testing.servers import mosquitto

TARGET_RATIO = 0.80
TOPIC = "bench/throughput"
REQUEST = "bench/rtt/request"
REPLY = "bench/rtt/reply"
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def build(count: int, size: int, event: str = "bench.tick") -> list[JobEvent]:
    pad = "x" * size
    return [JobEvent(job="bench", event=event, data={"n": n, "pad": pad}) for n in range(count)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@asynccontextmanager
async def raw_client(url: str) -> AsyncIterator[aiomqtt.Client]:
    host, port = parse_url(url)
    async with aiomqtt.Client(host, port, protocol=aiomqtt.ProtocolVersion.V5,
                              socket_options=NODELAY) as client:
        yield client


# ---- raw aiomqtt ----------------------------------------------------------------------------

async def raw_throughput(url: str, messages: list[JobEvent]) -> float:
    count = len(messages)
    async with raw_client(url) as sub, raw_client(url) as pub:
        await sub.subscribe(TOPIC, qos=1)
        done = anyio.Event()
        last = 0.0

        async def receive() -> None:
            nonlocal last
            seen = 0
            async for m in sub.messages:
                assert isinstance(m.payload, bytes)
                if json.loads(m.payload)["data"]["n"] != seen:
                    raise RuntimeError("raw: out of order")
                seen += 1
                if seen == count:
                    last = time.perf_counter()
                    done.set()
                    return

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            await anyio.wait_all_tasks_blocked()
            first = time.perf_counter()
            for message in messages:
                await pub.publish(TOPIC, message.to_json(), qos=1, timeout=math.inf)
            await done.wait()
    return count / (last - first)


async def raw_rtt(url: str, rounds: int) -> list[float]:
    requests = build(rounds, 64, "bench.request")
    reply = build(1, 64, "bench.reply")[0]
    samples: list[float] = []
    async with raw_client(url) as echo, raw_client(url) as asker:
        await echo.subscribe(REQUEST, qos=1)
        await asker.subscribe(REPLY, qos=1)

        async def serve() -> None:
            async for m in echo.messages:
                assert isinstance(m.payload, bytes)
                json.loads(m.payload)
                await echo.publish(REPLY, reply.to_json(), qos=1, timeout=math.inf)

        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            replies = asker.messages
            for request in requests:
                start = time.perf_counter()
                await asker.publish(REQUEST, request.to_json(), qos=1, timeout=math.inf)
                m = await anext(replies)
                assert isinstance(m.payload, bytes)
                json.loads(m.payload)
                samples.append((time.perf_counter() - start) * 1000)
            tg.cancel_scope.cancel()
    return samples


# ---- MQTTBus --------------------------------------------------------------------------------

SIGNED: list[Path] = []  # --signed: the root key every MQTTBus signs and checks with


def _bus(url: str) -> MQTTBus:
    """An MQTTBus; with ``--signed``, one that signs and checks as ``bus.auth`` does."""
    return MQTTBus(url, auth=root_auth(SIGNED[0]) if SIGNED else None)


async def bus_throughput(url: str, messages: list[JobEvent]) -> float:
    count = len(messages)
    async with AsyncExitStack() as stack:
        sub_bus = await stack.enter_async_context(_bus(url))
        pub_bus = await stack.enter_async_context(_bus(url))
        sub = await stack.enter_async_context(sub_bus.subscribe(TOPIC))
        done = anyio.Event()
        last = 0.0

        async def receive() -> None:
            nonlocal last
            for seen in range(count):
                _, message = await sub.receive()
                if not isinstance(message, JobEvent) or message.data["n"] != seen:
                    raise RuntimeError("mqttbus: out of order")
            last = time.perf_counter()
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            await anyio.wait_all_tasks_blocked()
            first = time.perf_counter()
            for message in messages:
                await pub_bus.publish(TOPIC, message)
            await done.wait()
    return count / (last - first)


async def bus_rtt(url: str, rounds: int) -> list[float]:
    requests = build(rounds, 64, "bench.request")
    reply = build(1, 64, "bench.reply")[0]
    samples: list[float] = []
    async with _bus(url) as echo, _bus(url) as asker:
        async with echo.subscribe(REQUEST) as inbox, asker.subscribe(REPLY) as replies:

            async def serve() -> None:
                async for _ in inbox:
                    await echo.publish(REPLY, reply)

            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                for request in requests:
                    start = time.perf_counter()
                    await asker.publish(REQUEST, request)
                    await replies.receive()
                    samples.append((time.perf_counter() - start) * 1000)
                tg.cancel_scope.cancel()
    return samples


# ---- the runs -------------------------------------------------------------------------------

async def measure(url: str, count: int, size: int, runs: int, rounds: int) -> dict[str, Any]:
    messages = build(count, size)
    sides: dict[str, tuple[Callable[[str, list[JobEvent]], Awaitable[float]],
                           Callable[[str, int], Awaitable[list[float]]]]] = {
        "raw": (raw_throughput, raw_rtt),
        "mqttbus": (bus_throughput, bus_rtt),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    p50: dict[str, list[float]] = {name: [] for name in sides}
    p99: dict[str, list[float]] = {name: [] for name in sides}
    await raw_throughput(url, messages[:500])  # warm up the broker and both code paths
    await bus_throughput(url, messages[:500])
    for run in range(runs):
        order = list(sides) if run % 2 == 0 else list(reversed(sides))
        for name in order:
            throughput, rtt = sides[name]
            rates[name].append(await throughput(url, messages))
            samples = await rtt(url, rounds)
            p50[name].append(percentile(samples, 0.50))
            p99[name].append(percentile(samples, 0.99))
        print(f"run {run + 1}/{runs}: raw {rates['raw'][-1]:.0f} msgs/s, "
              f"mqttbus {rates['mqttbus'][-1]:.0f} msgs/s", file=sys.stderr)
    report: dict[str, Any] = {"messages": count, "size": size, "qos": 1, "runs": runs,
                              "rtt_round_trips": rounds}
    for name in sides:
        report[name] = {"msgs_per_s": round(statistics.median(rates[name]), 1),
                        "rtt_ms_p50": round(statistics.median(p50[name]), 3),
                        "rtt_ms_p99": round(statistics.median(p99[name]), 3)}
    report["ratio"] = round(report["mqttbus"]["msgs_per_s"] / report["raw"]["msgs_per_s"], 3)
    report["ratios_per_run"] = [round(b / r, 3) for b, r in zip(rates["mqttbus"], rates["raw"],
                                                                strict=True)]
    report["target_ratio"] = TARGET_RATIO
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20000, help="messages per throughput run")
    parser.add_argument("--size", type=int, default=256, help="bytes of padding in each JobEvent")
    parser.add_argument("--runs", type=int, default=5, help="runs; the report holds medians")
    parser.add_argument("--rtt", type=int, default=2000, help="round trips per latency run")
    parser.add_argument("--url", help="an MQTT 5 broker (default: start a mosquitto here)")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    parser.add_argument("--signed", action="store_true",
                        help="MQTTBus signs and checks every message (bus.auth)")
    args = parser.parse_args(argv)
    if args.signed:
        SIGNED.append(Path(tempfile.mkdtemp(prefix="gliding-bench-key-")) / "bus.key")
    if args.messages < 1 or args.runs < 1 or args.rtt < 1 or args.size < 0:
        parser.error("--messages, --runs and --rtt must be >= 1, --size >= 0")

    def run(url: str) -> dict[str, Any]:
        report = anyio.run(measure, url, args.messages, args.size, args.runs, args.rtt)
        report["url"] = url if args.url else "mosquitto started by the benchmark"
        report["signed"] = bool(SIGNED)
        return report

    if args.url:
        report = run(args.url)
    else:
        with mosquitto() as broker:
            report = run(broker.url)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
