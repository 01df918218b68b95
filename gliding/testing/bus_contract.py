"""The contract every bus backend passes: subclass ``BusContract`` and provide a ``bus`` fixture.

    from gliding.testing.bus_contract import BusContract

    class TestMyBus(BusContract):
        @pytest.fixture
        async def bus(self):
            async with MyBus(...) as bus:
                yield bus

The fixture yields an open bus; tests may close it themselves, so leaving must tolerate a bus
that is already closed. The suite runs on asyncio (``anyio_backend``), which every backend,
aiomqtt included, supports. The tests never sleep to prove that something did not arrive: they
publish a sentinel after it and rely on per-publisher order, so they hold for network backends
as well. ``$``-topics are tested on ``$gliding/...``: brokers keep ``$SYS/`` for themselves
(mosquitto drops what clients publish there).

It lives in the library, not under tests/, so that a backend written elsewhere can run it;
production code never imports ``gliding.testing``. ``tests/bus/test_inproc.py`` and
``tests/bus/test_mqtt.py`` run it against the two backends.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gliding.bus.messages import (
    AgentDone,
    ArchivedMsg,
    ArchiveReply,
    ArchiveRequest,
    ArtifactMsg,
    Assignment,
    CheckOutcome,
    CheckReportMsg,
    Claim,
    CoherenceMsg,
    DecisionMsg,
    GrantMsg,
    Heartbeat,
    JobEvent,
    KnowledgeReply,
    KnowledgeRequest,
    PlanMsg,
    TurnLine,
    UsageWire,
    WorkItem,
)
from gliding.errors import BusError

TIMEOUT_S = 10.0

EXAMPLE_MESSAGES: tuple[Any, ...] = (
    Assignment(
        job="j1",
        role="DA",
        cycle=1,
        attempt=2,
        goal="write hello.py",
        instructions="Create hello.py that prints 'hello'.",
        options=["done", "escalate"],
        turn_base=3,
    ),
    PlanMsg(job="j1", cycle=1, steps=["read spec", "write code"], turn_iri=None),
    PlanMsg(job="j1", cycle=2, steps=[], turn_iri="gliding://job/j1/turn/PA/3"),
    ArtifactMsg(
        job="j1",
        cycle=1,
        attempt=1,
        summary="wrote hello.py",
        files=["hello.py"],
        written={"hello.py": "gliding://job/j1/result/c7"},
        iris=["gliding://job/j1/result/c7"],
        status="finished",
        turns=3,
        usage=UsageWire(prompt_tokens=900, completion_tokens=40, cost_usd=0.002),
        lines=[TurnLine(role="DA", turn=1, summary="write_file → ok",
                        iri="gliding://job/j1/turn/DA/1")],
    ),
    CheckReportMsg(
        job="j1",
        cycle=1,
        attempt=1,
        results=[
            CheckOutcome(check="hello.py exists", status="pass", evidence="12 B",
                         path="hello.py"),
            CheckOutcome(check="python hello.py", status="fail", evidence="exit 1",
                         expected="0", remedy="Make the command `python hello.py` exit 0"),
        ],
        passed=False,
        notes="one check failed",
    ),
    DecisionMsg(job="j1", cycle=1, decision="another_cycle", report="fix the exit code"),
    DecisionMsg(job="j1", cycle=2, decision="done", report="all checks pass ✓"),
    AgentDone(job="j1", role="CA", status="finished", turns=4, summary="checked 2 items"),
    ArchivedMsg(job="j1", iri="gliding://job/j1/result/DA-1-0", kind="result", role="DA",
                turn=1, summary="bash → exit 0", turn_iri="gliding://job/j1/turn/DA/1"),
    JobEvent(job="j1", event="turn.done", data={"role": "DA", "tokens": 812, "cost_usd": 0.0031}),
    WorkItem(
        key="j1/DA/1/0",
        epoch=1,
        assignment=Assignment(job="j1", role="DA", cycle=1, attempt=0, goal="g", instructions="i"),
        task_record={"goal": "write hello.py", "checks": [{"file": "hello.py"}]},
        model="scripted",
        briefing="you are DA",
        origin="/data/.gliding",
    ),
    Claim(job="j1", key="j1/DA/1/0", epoch=1, worker="w1"),
    Claim(job="j1", key="j1/DA/1/0", epoch=2, worker="w2", declined=True),
    GrantMsg(job="j1", key="j1/DA/1/0", epoch=1, worker="w1", granted=True),
    Heartbeat(worker="w1", roles=["DA", "CA"], held={"j1/DA/1/0": 1}, free=3),
    ArchiveRequest(id="r1", job="j1", worker="w1", op="find", args={"iri": "gliding://job/j1"}),
    ArchiveReply(id="r1", ok=True, result={"items": [1, "two", None]}),
    ArchiveReply(id="r2", ok=False, code="not_found", error="no such IRI"),
    KnowledgeRequest(id="k1", job="j1", worker="w1", op="search",
                     args={"query": "refit date", "k": 5}),
    KnowledgeReply(id="k1", ok=True, result=[{"iri": "gliding://job/j1/fact/a/1"}]),
    KnowledgeReply(id="k2", ok=False, code="blackboard.query_invalid", error="bad query"),
    CoherenceMsg(kind="write_request", iri="gliding://job/j1/node/n", sender="a.1", rid=3,
                 value='{"text": "ünïcode"}'),
    CoherenceMsg(kind="fill", iri="gliding://job/j1/node/n", version=7, value=None, grant="E"),
)


def tick(n: int, job: str = "j1") -> JobEvent:
    return JobEvent(job=job, event="test.tick", data={"n": n})


async def collect_group(members: list[Any], count: int) -> list[list[int]]:
    """Receive from every member of a shared group at once until they got ``count`` messages
    together; the ``data["n"]`` of what each member got, in arrival order."""
    got: list[list[int]] = [[] for _ in members]

    async def drain(i: int, sub: Any, scope: anyio.CancelScope) -> None:
        while True:
            _, message = await sub.receive()
            got[i].append(message.data["n"])
            if sum(map(len, got)) >= count:
                scope.cancel()

    async with anyio.create_task_group() as tg:
        for i, sub in enumerate(members):
            tg.start_soon(drain, i, sub, tg.cancel_scope)
    return got


async def receive_until(sub: Any, sentinel: Any) -> list[tuple[str, Any]]:
    """Everything ``sub`` receives before ``sentinel`` (which must arrive)."""
    got: list[tuple[str, Any]] = []
    while True:
        topic, message = await sub.receive()
        if message == sentinel:
            return got
        got.append((topic, message))


@pytest.mark.anyio
class BusContract:
    """Tests of ``gliding.bus.port.Bus``; subclasses supply the ``bus`` fixture."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        # asyncio only: the trio installed next to anyio 4 here is too old for its test runner.
        return "asyncio"

    async def test_delivers_a_published_message(self, bus: Any) -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/events") as sub:
                await bus.publish("gliding/job/j1/events", tick(1))
                topic, message = await sub.receive()
        assert topic == "gliding/job/j1/events"
        assert message == tick(1)

    async def test_routes_by_wildcards(self, bus: Any) -> None:
        topics = [
            "gliding/job/j1/events",
            "gliding/job/j2/events",
            "gliding/job/j1/agent/DA",
            "gliding/job/j1",
            "gliding/other",
            "$gliding/load",
        ]
        patterns = {
            "gliding/job/+/events": ["gliding/job/j1/events", "gliding/job/j2/events"],
            "gliding/job/j1/#": [
                "gliding/job/j1/events",
                "gliding/job/j1/agent/DA",
                "gliding/job/j1",
            ],
            "gliding/job/j1/events": ["gliding/job/j1/events"],
            "#": topics[:-1],  # a leading wildcard never matches $-topics
            "+/+/+/+": ["gliding/job/j1/events", "gliding/job/j2/events"],
            "$gliding/#": ["$gliding/load"],
        }
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            async with (
                bus.subscribe("gliding/job/+/events") as a,
                bus.subscribe("gliding/job/j1/#") as b,
                bus.subscribe("gliding/job/j1/events") as c,
                bus.subscribe("#") as d,
                bus.subscribe("+/+/+/+") as e,
                bus.subscribe("$gliding/#") as f,
            ):
                for i, topic in enumerate(topics):
                    await bus.publish(topic, tick(i))
                await bus.publish("gliding/job/j1/events", sentinel)
                await bus.publish("$gliding/load", sentinel)
                subs = dict(zip(patterns, (a, b, c, d, e, f), strict=True))
                for pattern, expected in patterns.items():
                    got = await receive_until(subs[pattern], sentinel)
                    assert [t for t, _ in got] == expected, pattern
                    assert [m for _, m in got] == [tick(topics.index(t)) for t in expected]

    async def test_keeps_publish_order(self, bus: Any) -> None:
        count = 500
        received: list[int] = []

        async def consume(sub: Any) -> None:
            while len(received) < count:
                _, message = await sub.receive()
                received.append(message.data["n"])

        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/+", max_buffer=8) as sub:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(consume, sub)
                    for n in range(count):
                        await bus.publish(f"gliding/job/j1/t{n % 3}", tick(n))
        assert received == list(range(count))

    async def test_isolates_subscribers(self, bus: Any) -> None:
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            async with (
                bus.subscribe("gliding/job/j1/events") as first,
                bus.subscribe("gliding/job/j1/events") as second,
                bus.subscribe("gliding/job/j2/events") as other,
            ):
                for n in range(5):
                    await bus.publish("gliding/job/j1/events", tick(n))
                await bus.publish("gliding/job/j2/events", tick(99, job="j2"))
                await bus.publish("gliding/job/j1/events", sentinel)
                # each subscriber of the same filter gets every message, however the other reads
                got_first = await receive_until(first, sentinel)
                got_second = await receive_until(second, sentinel)
                assert [m for _, m in got_first] == [tick(n) for n in range(5)]
                assert got_second == got_first
                # the other filter saw only its own topic
                topic, message = await other.receive()
                assert (topic, message) == ("gliding/job/j2/events", tick(99, job="j2"))

    async def test_stops_delivery_after_unsubscribe(self, bus: Any) -> None:
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/#") as stays:
                async with bus.subscribe("gliding/job/j1/#") as leaves:
                    await bus.publish("gliding/job/j1/events", tick(1))
                    assert (await leaves.receive()).message == tick(1)
                await bus.publish("gliding/job/j1/events", tick(2))
                await bus.publish("gliding/job/j1/events", sentinel)
                got = await receive_until(stays, sentinel)
                assert [m for _, m in got] == [tick(1), tick(2)]
                with pytest.raises(BusError):
                    await leaves.receive()

    async def test_drops_messages_nobody_subscribed_to(self, bus: Any) -> None:
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            await bus.publish("gliding/job/j1/events", tick(1))
            async with bus.subscribe("gliding/job/j1/events") as sub:
                await bus.publish("gliding/job/j1/events", sentinel)
                assert await receive_until(sub, sentinel) == []

    async def test_message_types_survive_the_trip(self, bus: Any) -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/msgs", max_buffer=len(EXAMPLE_MESSAGES)) as s:
                for message in EXAMPLE_MESSAGES:
                    await bus.publish("gliding/job/j1/msgs", message)
                for sent in EXAMPLE_MESSAGES:
                    _, got = await s.receive()
                    assert type(got) is type(sent)
                    assert got == sent

    async def test_async_for_ends_when_the_bus_closes(self, bus: Any) -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/events") as sub:
                await bus.publish("gliding/job/j1/events", tick(1))
                await bus.publish("gliding/job/j1/events", tick(2))
                got: list[Any] = []

                async def drain() -> None:
                    async for _, message in sub:
                        got.append(message)
                        if len(got) == 2:
                            await bus.aclose()

                await drain()
                with pytest.raises(BusError):
                    await sub.receive()
        assert got == [tick(1), tick(2)]

    async def test_publish_after_close_raises(self, bus: Any) -> None:
        await bus.aclose()
        await bus.aclose()  # closing twice is harmless
        with pytest.raises(BusError, match="closed"):
            await bus.publish("gliding/job/j1/events", tick(1))

    async def test_subscribe_after_close_raises(self, bus: Any) -> None:
        await bus.aclose()
        with pytest.raises(BusError, match="closed"):
            async with bus.subscribe("gliding/#"):
                pass

    @pytest.mark.parametrize("topic", ["gliding/+/events", "gliding/#", "#", "", "a/b+"])
    async def test_publish_on_a_wildcard_or_empty_topic_raises(self, bus: Any, topic: str) -> None:
        with pytest.raises(BusError):
            await bus.publish(topic, tick(1))

    @pytest.mark.parametrize("pattern", ["a/#/b", "a/b#", "a+/b", "", "a/\x00"])
    async def test_subscribe_to_a_bad_filter_raises(self, bus: Any, pattern: str) -> None:
        with pytest.raises(BusError):
            async with bus.subscribe(pattern):
                pass

    async def test_publish_of_a_non_message_raises(self, bus: Any) -> None:
        with pytest.raises(BusError, match="not a bus message"):
            await bus.publish("gliding/job/j1/events", {"type": "job_event", "job": "j1"})

    async def test_a_shared_group_gets_each_message_once(self, bus: Any) -> None:
        count = 40
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            async with (
                bus.subscribe("$share/workers/gliding/job/j1/events", max_buffer=count) as a,
                bus.subscribe("$share/workers/gliding/job/j1/events", max_buffer=count) as b,
                bus.subscribe("gliding/job/j1/events", max_buffer=count + 1) as everything,
            ):
                for n in range(count):
                    await bus.publish("gliding/job/j1/events", tick(n))
                got = await collect_group([a, b], count)
                await bus.publish("gliding/job/j1/events", sentinel)
                plain = await receive_until(everything, sentinel)
        # together the members got every message exactly once, each member in publish order
        assert sorted(got[0] + got[1]) == list(range(count))
        assert all(part == sorted(part) for part in got)
        # a plain subscriber of the same filter still gets them all
        assert [m for _, m in plain] == [tick(n) for n in range(count)]

    async def test_a_shared_group_of_one_gets_everything_in_order(self, bus: Any) -> None:
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("$share/solo/gliding/job/+/events") as solo:
                for n in range(10):
                    await bus.publish(f"gliding/job/j{n % 2}/events", tick(n))
                await bus.publish("gliding/other", tick(99))  # its filter does not match
                await bus.publish("gliding/job/j1/events", sentinel)
                got = await receive_until(solo, sentinel)
        assert [m for _, m in got] == [tick(n) for n in range(10)]
        assert [t for t, _ in got] == [f"gliding/job/j{n % 2}/events" for n in range(10)]

    async def test_each_shared_group_gets_its_own_copy(self, bus: Any) -> None:
        sentinel = tick(-1)
        with anyio.fail_after(TIMEOUT_S):
            async with (
                bus.subscribe("$share/red/gliding/job/j1/#") as red,
                bus.subscribe("$share/blue/gliding/job/j1/#") as blue,
            ):
                for n in range(5):
                    await bus.publish("gliding/job/j1/events", tick(n))
                await bus.publish("gliding/job/j1/events", sentinel)
                got_red = await receive_until(red, sentinel)
                got_blue = await receive_until(blue, sentinel)
        assert [m for _, m in got_red] == [tick(n) for n in range(5)]
        assert got_blue == got_red

    @pytest.mark.parametrize(
        "pattern",
        ["$share/", "$share//a/b", "$share/g", "$share/g/", "$share/g+/a", "$share/g/a/#/b"],
    )
    async def test_subscribe_to_a_bad_shared_filter_raises(self, bus: Any, pattern: str) -> None:
        with pytest.raises(BusError):
            async with bus.subscribe(pattern):
                pass

    async def test_publish_on_a_share_topic_raises(self, bus: Any) -> None:
        with pytest.raises(BusError, match=r"\$share"):
            await bus.publish("$share/g/gliding/job/j1/events", tick(1))
