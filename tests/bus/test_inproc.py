"""InProcessBus passes the bus contract, plus its own promises: backpressure and closing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from gliding.bus.inproc import InProcessBus
from gliding.errors import BusError
from gliding.testing.bus_contract import TIMEOUT_S, BusContract, tick


class TestInProcessBus(BusContract):
    @pytest.fixture
    async def bus(self) -> AsyncIterator[InProcessBus]:
        bus = InProcessBus()
        yield bus
        await bus.aclose()

    async def test_publish_waits_while_a_subscriber_buffer_is_full(self, bus: InProcessBus) -> None:
        published: list[int] = []

        async def publish_three() -> None:
            for n in range(3):
                await bus.publish("gliding/job/j1/events", tick(n))
                published.append(n)

        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/events", max_buffer=1) as sub:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(publish_three)
                    await anyio.wait_all_tasks_blocked()
                    assert published == [0]  # the second message waits for room
                    assert (await sub.receive()).message == tick(0)
                    await anyio.wait_all_tasks_blocked()
                    assert published == [0, 1]
                    assert (await sub.receive()).message == tick(1)
                    assert (await sub.receive()).message == tick(2)
        assert published == [0, 1, 2]

    async def test_a_full_subscriber_does_not_hold_back_earlier_ones(
        self, bus: InProcessBus
    ) -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with (
                bus.subscribe("gliding/#", max_buffer=10) as roomy,
                bus.subscribe("gliding/#", max_buffer=1) as tight,anyio.create_task_group() as tg
            ):
                tg.start_soon(bus.publish, "gliding/x", tick(0))
                tg.start_soon(bus.publish, "gliding/x", tick(1))
                await anyio.wait_all_tasks_blocked()
                # both reached the roomy subscriber, one waits on the tight one
                assert [(await roomy.receive()).message for _ in range(2)] == [
                    tick(0),
                    tick(1),
                ]
                got = [(await tight.receive()).message for _ in range(2)]
                assert got in ([tick(0), tick(1)], [tick(1), tick(0)])

    async def test_close_wakes_a_waiting_publisher_with_bus_error(self, bus: InProcessBus) -> None:
        outcome: list[BaseException] = []

        async def publish_two() -> None:
            try:
                await bus.publish("gliding/job/j1/events", tick(0))
                await bus.publish("gliding/job/j1/events", tick(1))
            except BusError as exc:
                outcome.append(exc)

        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe("gliding/job/j1/events", max_buffer=1) as sub:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(publish_two)
                    await anyio.wait_all_tasks_blocked()
                    await bus.aclose()
                assert len(outcome) == 1 and "closed while publishing" in str(outcome[0])
                assert (await sub.receive()).message == tick(0)  # buffered before the close

    async def test_leaving_a_full_subscription_releases_its_publisher(
        self, bus: InProcessBus
    ) -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with anyio.create_task_group() as tg:
                async with bus.subscribe("gliding/job/j1/events", max_buffer=1):
                    await bus.publish("gliding/job/j1/events", tick(0))
                    tg.start_soon(bus.publish, "gliding/job/j1/events", tick(1))
                    await anyio.wait_all_tasks_blocked()
                # the waiting publish returns once its only subscriber is gone
            assert not bus.closed

    @pytest.mark.parametrize("max_buffer", [0, -1])
    async def test_rejects_a_buffer_below_one(self, bus: InProcessBus, max_buffer: int) -> None:
        with pytest.raises(BusError, match="max_buffer"):
            async with bus.subscribe("gliding/#", max_buffer=max_buffer):
                pass

    async def test_works_as_an_async_context_manager(self) -> None:
        async with InProcessBus() as bus:
            assert not bus.closed
        assert bus.closed
        with pytest.raises(BusError):
            await bus.publish("gliding/x", tick(0))

    async def test_a_shared_group_takes_turns(self, bus: InProcessBus) -> None:
        pattern = "$share/pool/gliding/work"
        with anyio.fail_after(TIMEOUT_S):
            async with bus.subscribe(pattern) as a, bus.subscribe(pattern) as b:
                for n in range(4):
                    await bus.publish("gliding/work", tick(n))
                assert [(await a.receive()).message for _ in range(2)] == [tick(0), tick(2)]
                assert [(await b.receive()).message for _ in range(2)] == [tick(1), tick(3)]

    async def test_a_full_member_passes_its_turn_on(self, bus: InProcessBus) -> None:
        pattern = "$share/pool/gliding/work"
        with anyio.fail_after(TIMEOUT_S):
            async with (
                bus.subscribe(pattern, max_buffer=1) as a,
                bus.subscribe(pattern, max_buffer=10) as b,
            ):
                for n in range(4):  # a takes 0, then is full: b takes the rest
                    await bus.publish("gliding/work", tick(n))
                assert (await a.receive()).message == tick(0)
                assert [(await b.receive()).message for _ in range(3)] == [
                    tick(1),
                    tick(2),
                    tick(3),
                ]

    async def test_a_member_leaving_hands_its_waiting_message_on(self, bus: InProcessBus) -> None:
        pattern = "$share/pool/gliding/work"
        with anyio.fail_after(TIMEOUT_S):
            leaving = bus.subscribe(pattern, max_buffer=1)
            await leaving.__aenter__()  # the first member, so the first in turn
            async with bus.subscribe(pattern, max_buffer=1) as stays:
                async with anyio.create_task_group() as tg:
                    await bus.publish("gliding/work", tick(0))  # to `leaving`
                    await bus.publish("gliding/work", tick(1))  # to `stays`
                    tg.start_soon(bus.publish, "gliding/work", tick(2))  # both full: waits
                    await anyio.wait_all_tasks_blocked()  # ... on `leaving`, whose turn it is
                    await leaving.__aexit__(None, None, None)  # tick(0) goes with it
                    assert (await stays.receive()).message == tick(1)
                    assert (await stays.receive()).message == tick(2)
