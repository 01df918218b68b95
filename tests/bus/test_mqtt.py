"""MQTTBus against a real mosquitto: the bus contract, plus what only a network bus does.

Beyond the contract: clear errors (no broker, a broker that never answers, bad URLs), two
connections talking, a shared group split by the broker between connections, payloads that are
not bus messages, back-pressure (see ``test_a_full_subscription_holds_back_the_broker_not_memory``)
and reconnecting after the broker restarts on the same port.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable

import aiomqtt
import anyio
import pytest
from structlog.testing import capture_logs

from gliding.bus.messages import JobEvent
from gliding.bus.mqtt import MQTTBus
from gliding.bus.mqtt_link import parse_url
from gliding.bus.port import Bus, Delivery
from gliding.config.settings import BusSettings
from gliding.errors import BusError
from gliding.testing.bus_contract import TIMEOUT_S, BusContract, collect_group, receive_until, tick
from gliding.testing.servers import Mosquitto, free_port

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # aiomqtt runs on asyncio only


class TestMQTTBus(BusContract):
    @pytest.fixture
    async def bus(self, broker: Mosquitto) -> AsyncIterator[MQTTBus]:
        async with MQTTBus(broker.url, connect_timeout_s=5.0) as bus:
            yield bus


async def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition()`` (a real broker, real time) until it holds, for at most TIMEOUT_S."""
    with anyio.fail_after(TIMEOUT_S):
        while not condition():
            await anyio.sleep(0.01)


def number(delivery: Delivery) -> int:
    """The ``n`` of a ``tick(n)``."""
    assert isinstance(delivery.message, JobEvent)
    return int(delivery.message.data["n"])


# ---- errors -----------------------------------------------------------------------------------

async def test_no_broker_is_a_bus_error_naming_the_url_within_the_timeout() -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    with pytest.raises(BusError, match="mosquitto") as caught:
        async with MQTTBus(url, connect_timeout_s=2.0):
            pass
    assert url in str(caught.value)
    # the refusal itself is the error, not a connect timeout that waited it out
    assert "refused" in str(caught.value) and "no answer within" not in str(caught.value)


async def test_a_broker_that_never_answers_times_out_with_a_bus_error() -> None:
    with socket.socket() as silent:  # accepts TCP connections, never says CONNACK
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"mqtt://127.0.0.1:{silent.getsockname()[1]}"
        with anyio.fail_after(TIMEOUT_S):  # hang protection only: far above the 0.3 s bound
            with pytest.raises(BusError, match="cannot connect") as caught:
                async with MQTTBus(url, connect_timeout_s=0.3):
                    pass
        assert url in str(caught.value)
        assert "no answer within 0.3s" in str(caught.value)  # the connect timeout ended it


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:1883", "mqtt://", "127.0.0.1:1883", "mqtt://host:port",
     "mqtt://host:99999", "mqtt://host:1883/path", "mqtt://user@host:1883", "mqtt://h:1?x=1",
     "ssl://host:8883", "mqtts://user@host:8883"],
)
def test_a_bad_url_is_a_bus_error(url: str) -> None:
    with pytest.raises(BusError, match="mqtt://host:port"):
        MQTTBus(url)


def test_urls_and_settings() -> None:
    assert parse_url("mqtt://broker.local:1884") == ("broker.local", 1884)
    assert parse_url("mqtt://10.0.0.1") == ("10.0.0.1", 1883)
    assert parse_url("mqtts://broker.local") == ("broker.local", 8883)  # TLS
    assert parse_url("mqtts://[::1]:8884") == ("::1", 8884)
    with pytest.raises(BusError, match="bus.url is not set"):
        MQTTBus.from_settings(BusSettings())
    bus: Bus = MQTTBus.from_settings(BusSettings(url="mqtt://127.0.0.1:1"), client_id="w1")
    assert isinstance(bus, MQTTBus)  # and, to the type checker, a port.Bus
    assert bus.url == "mqtt://127.0.0.1:1" and not bus.connected and not bus.closed


async def test_a_bus_is_used_inside_its_context_and_opens_once(broker: Mosquitto) -> None:
    bus = MQTTBus(broker.url)
    with pytest.raises(BusError, match="not open"):
        await bus.publish("gliding/x", tick(0))
    async with bus:
        assert bus.connected
        with pytest.raises(BusError, match="opens once"):
            await bus.__aenter__()
        with pytest.raises(BusError, match=r"\$SYS"):
            await bus.publish("$SYS/broker/load", tick(0))
    assert bus.closed and not bus.connected


# ---- two connections --------------------------------------------------------------------------

async def test_two_buses_exchange_messages(broker: Mosquitto) -> None:
    with anyio.fail_after(TIMEOUT_S):
        async with MQTTBus(broker.url) as supervisor, MQTTBus(broker.url) as worker:
            async with (
                worker.subscribe("gliding/job/+/agent/DA") as inbox,
                supervisor.subscribe("gliding/job/j1/answers") as answers,
            ):
                await supervisor.publish("gliding/job/j1/agent/DA", tick(1))
                topic, request = await inbox.receive()
                assert (topic, request) == ("gliding/job/j1/agent/DA", tick(1))
                await worker.publish("gliding/job/j1/answers", tick(2))
                assert (await answers.receive()).message == tick(2)


async def test_the_broker_splits_a_shared_group_between_connections(broker: Mosquitto) -> None:
    count = 40
    pattern = "$share/workers/gliding/work"
    with anyio.fail_after(TIMEOUT_S):
        async with MQTTBus(broker.url) as one, MQTTBus(broker.url) as two:
            async with (
                one.subscribe(pattern, max_buffer=count) as a,
                two.subscribe(pattern, max_buffer=count) as b,
                MQTTBus(broker.url) as dispatcher,
            ):
                for n in range(count):
                    await dispatcher.publish("gliding/work", tick(n))
                got = await collect_group([a, b], count)
    assert sorted(got[0] + got[1]) == list(range(count))
    assert got[0] and got[1]  # mosquitto takes turns between the members


# ---- what comes off the wire --------------------------------------------------------------------

async def test_a_payload_that_is_not_a_bus_message_is_logged_and_skipped(
    broker: Mosquitto,
) -> None:
    host, port = parse_url(broker.url)
    topic = "gliding/job/j1/events"
    with anyio.fail_after(TIMEOUT_S), capture_logs() as logs:
        async with MQTTBus(broker.url) as bus, bus.subscribe(topic) as sub:
            async with aiomqtt.Client(host, port, protocol=aiomqtt.ProtocolVersion.V5) as raw:
                for payload in (b"not json", b'{"type": "nope"}', b"\xff\xfe", b""):
                    await raw.publish(topic, payload, qos=1)
                await raw.publish(topic, tick(1).to_json(), qos=1)
            assert (await sub.receive()).message == tick(1)
            await bus.publish(topic, tick(2))  # the subscription is alive and well
            assert (await sub.receive()).message == tick(2)
            refused = bus._refusals.count
    skipped = [entry for entry in logs if entry["event"] == "bus.mqtt.bad_payload"]
    assert refused == 4  # each refused; the log says so once, not once each (a flood)
    assert len(skipped) == 1 and skipped[0]["refused"] == 1
    assert all(entry["topic"] == topic and entry["log_level"] == "warning" for entry in skipped)


async def test_low_malformed_payload_flood_logs_a_few_lines(broker: Mosquitto) -> None:
    """1,000 malformed payloads: every one refused, a handful of warning lines (not 1,460)."""
    host, port = parse_url(broker.url)
    topic = "gliding/job/j1/events"
    with anyio.fail_after(TIMEOUT_S), capture_logs() as logs:
        async with MQTTBus(broker.url) as bus, bus.subscribe(topic) as sub:
            async with aiomqtt.Client(host, port, protocol=aiomqtt.ProtocolVersion.V5) as raw:
                for n in range(1000):
                    await raw.publish(topic, f"junk {n}".encode(), qos=1)
                await raw.publish(topic, tick(1).to_json(), qos=1)
            assert (await sub.receive()).message == tick(1)
            refused = bus._refusals.count
    assert refused == 1000
    assert len([e for e in logs if e["event"] == "bus.mqtt.bad_payload"]) <= 3


async def test_a_full_subscription_holds_back_the_broker_not_memory(broker: Mosquitto) -> None:
    """A subscription (max_buffer=1) that nobody reads while 60 messages arrive for it:
        * its bus stops taking deliveries: the broker sends receive_maximum (4) unacknowledged
          ones and queues the rest itself, so at no time do more than that wait to be routed
          (memory stays bounded: the buffer plus receive_maximum);
        * publishers are not held back: every publish returns (the broker acknowledges it);
        * another connection's subscription gets all 60 meanwhile;
        * once the full subscription is read, it gets all 60, in order, none lost.
    Other subscriptions of the same bus wait behind the full one (one ordered connection);
    that is documented in gliding.bus.mqtt, not asserted here."""
    count, receive_maximum = 60, 4
    topic = "gliding/job/j1/events"
    with anyio.fail_after(TIMEOUT_S):
        async with (
            MQTTBus(broker.url, receive_maximum=receive_maximum) as slow_bus,
            MQTTBus(broker.url) as other_bus,
            MQTTBus(broker.url) as publisher,
            slow_bus.subscribe(topic, max_buffer=1) as slow,
            other_bus.subscribe(topic, max_buffer=count) as other,
        ):
            for n in range(count):
                await publisher.publish(topic, tick(n))
            seen: list[int] = []
            for _ in range(count):
                seen.append(number(await other.receive()))
                assert slow_bus.pending <= receive_maximum
            assert seen == list(range(count))
            # unacknowledged: one in the reader's hands (waiting for room), the rest queued
            await wait_until(lambda: slow_bus.pending == receive_maximum - 1)
            for _ in range(20):  # the broker has had every message a while: still bounded
                await anyio.sleep(0.005)
                assert slow_bus.pending <= receive_maximum
            got = [number(await slow.receive()) for _ in range(count)]
            assert got == list(range(count))


@pytest.mark.parametrize("pattern", ["gliding/work", "$share/pool/gliding/work"])
async def test_closing_frees_a_reader_that_waits_for_room(broker: Mosquitto, pattern: str) -> None:
    with anyio.fail_after(TIMEOUT_S):
        async with MQTTBus(broker.url) as publisher, MQTTBus(broker.url) as bus:
            async with bus.subscribe(pattern, max_buffer=1) as sub:
                for n in range(3):
                    await publisher.publish("gliding/work", tick(n))
                await wait_until(lambda: bus.pending == 1)  # tick(1) waits for room
                await bus.aclose()
                assert [m async for _, m in sub] == [tick(0)]  # what it held, then the end


# ---- the broker goes away -----------------------------------------------------------------------

async def test_reconnects_and_resubscribes_after_the_broker_restarts(
    own_broker: Mosquitto,
) -> None:
    topic = "gliding/job/j1/events"
    with anyio.fail_after(TIMEOUT_S):
        async with MQTTBus(own_broker.url, reconnect_max_s=0.1) as bus:
            async with (
                bus.subscribe("gliding/job/j1/#") as plain,
                bus.subscribe("$share/workers/gliding/job/j1/events") as shared,
            ):
                await bus.publish(topic, tick(1))
                await anyio.to_thread.run_sync(own_broker.stop)
                await wait_until(lambda: not bus.connected)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(bus.publish, topic, tick(2))  # waits for the reconnection
                    await anyio.sleep(0.05)
                    await anyio.to_thread.run_sync(own_broker.start)
                await wait_until(lambda: bus.connected)
                async with MQTTBus(own_broker.url) as other:  # the broker itself routes to us
                    await other.publish(topic, tick(3))
                await bus.publish(topic, tick(-1))
                got_plain = await receive_until(plain, tick(-1))
                got_shared = await receive_until(shared, tick(-1))
    assert [m for _, m in got_plain] == [tick(1), tick(2), tick(3)]
    assert got_shared == got_plain


async def test_publish_while_the_broker_is_down_fails_after_the_timeout(
    own_broker: Mosquitto,
) -> None:
    with anyio.fail_after(TIMEOUT_S):
        async with MQTTBus(own_broker.url, connect_timeout_s=0.3, reconnect_max_s=0.1) as bus:
            await anyio.to_thread.run_sync(own_broker.stop)
            await wait_until(lambda: not bus.connected)
            started = anyio.current_time()
            with pytest.raises(BusError, match="unreachable for 0.3s") as caught:
                await bus.publish("gliding/x", tick(1))
            # it waited out connect_timeout_s for the broker (a deadline on the loop's clock, so
            # load cannot break this lower bound; the upper one is the fail_after above)
            assert anyio.current_time() - started >= 0.3
            assert own_broker.url in str(caught.value)
            with pytest.raises(BusError, match="unreachable"):
                async with bus.subscribe("gliding/#"):
                    pass
            # closing wakes a publish that waits for the broker
            async with anyio.create_task_group() as tg:
                failures: list[BusError] = []

                async def publish() -> None:
                    try:
                        await bus.publish("gliding/x", tick(2))
                    except BusError as exc:
                        failures.append(exc)

                tg.start_soon(publish)
                await anyio.sleep(0.05)
                await bus.aclose()
            assert len(failures) == 1 and "closed" in str(failures[0])


async def test_reconnects_counts_the_connections_made_again(own_broker: Mosquitto) -> None:
    async with MQTTBus(own_broker.url, reconnect_max_s=0.2) as bus:
        assert bus.reconnects == 0
        await anyio.to_thread.run_sync(own_broker.stop)
        await anyio.to_thread.run_sync(own_broker.start)
        with anyio.fail_after(10):
            while bus.reconnects == 0:
                await anyio.sleep(0.05)
        assert bus.reconnects == 1 and bus.connected
