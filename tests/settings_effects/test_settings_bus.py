"""bus.*: each key, set through GLIDING_* variables, changes how the bus talks to its broker.

Every broker here is a real mosquitto on 127.0.0.1 started by the test (or a plain socket that
plays a broker which never answers, or one that refuses every connection), and every bus is
the one ``open_bus(settings)`` opens, as a job or a worker does.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream
from structlog.testing import capture_logs

from gliding.bus import topics
from gliding.bus.broker import write_broker_config
from gliding.bus.messages import JobEvent
from gliding.bus.mqtt import FIRST_RETRY_S, MQTTBus
from gliding.bus.port import Bus, Subscription
from gliding.config.settings import Settings
from gliding.daemon.compose import run_job
from gliding.daemon.runtime import bus_auth, open_bus
from gliding.errors import BusError
from gliding.testing import ScriptedLLM
from gliding.testing.servers import Mosquitto, mosquitto
from tests.settings_effects.effects_support import settings_from, team, write_task

DEFAULTS = Settings().bus
TOPIC = "gliding/effects/bus"


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def broker() -> Iterator[Mosquitto]:
    with mosquitto() as server:
        yield server


def tick(n: int) -> JobEvent:
    return JobEvent(job="effects", event="tick", data={"n": n})


async def within(seconds: float, fn: Callable[[], Awaitable[None]]) -> None:
    """``fn()``, failing with TimeoutError if it takes longer than ``seconds``."""
    with anyio.fail_after(seconds):
        await fn()


async def round_trip(bus: Bus, n: int) -> None:
    """Publish tick(n) on ``bus`` and receive it back through the broker."""
    async with bus.subscribe(f"{TOPIC}/{n}") as sub:
        await bus.publish(f"{TOPIC}/{n}", tick(n))
        assert (await sub.receive()).message == tick(n)


# --- bus.url ----------------------------------------------------------------------------------


@pytest.mark.parametrize("through_broker", [True, False])
def test_bus_url_is_the_broker_a_jobs_events_travel_through(
    tmp: Path, broker: Mosquitto, through_broker: bool
) -> None:
    assert DEFAULTS.url is None  # by default a job's bus lives inside its process
    env = {"GLIDING_BUS__URL": broker.url} if through_broker else {}
    settings = settings_from(tmp, env)
    task = write_task(tmp, "goal: Write hello.txt\npipeline: [DA]\n")
    shown: list[JobEvent] = []
    seen: list[JobEvent] = []  # what an independent client of the broker saw

    async def main() -> None:
        # an observer holding the bus key (bus.auth is on by default: signed messages)
        async with MQTTBus(broker.url, auth=bus_auth(settings)) as observer, \
                observer.subscribe("job/+/events") as sub:
            handle = await run_job(task, settings, llm=ScriptedLLM([team()] * 20),
                                   on_event=shown.append)
            assert handle.report is not None and handle.report.outcome == "success"
            end = JobEvent(job="observer", event="end")  # after whatever the job published
            await observer.publish(topics.events("observer"), end)
            async for _topic, message in sub:
                if message == end:
                    break
                assert isinstance(message, JobEvent)
                seen.append(message)

    anyio.run(within, 30, main)

    over_the_bus = [e for e in shown if e.event != "job.sandbox"]  # that one is shown directly
    assert [e.event for e in over_the_bus][-1] == "job.finished"
    if through_broker:
        assert seen == over_the_bus
    else:
        assert seen == []


# --- bus.connect_timeout_s --------------------------------------------------------------------


@pytest.mark.parametrize("timeout_s", [0.5, pytest.param(3.0, marks=pytest.mark.heavy)])
def test_connect_timeout_s_is_how_long_a_broker_that_never_answers_is_waited_for(
    tmp: Path, timeout_s: float
) -> None:
    with socket.socket() as silent:  # accepts TCP connections, never says CONNACK
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"mqtt://127.0.0.1:{silent.getsockname()[1]}"
        settings = settings_from(tmp, {"GLIDING_BUS__URL": url,
                                       "GLIDING_BUS__CONNECT_TIMEOUT_S": str(timeout_s)})

        async def connect() -> None:
            async with open_bus(settings):
                pass

        with pytest.raises(BusError, match="cannot connect") as caught:
            anyio.run(within, 30, connect)  # 30 s: hang protection only, not a bound tested

    assert url in str(caught.value)
    # the setting's timeout ended the wait, not the default's
    assert f"no answer within {timeout_s:g}s" in str(caught.value)
    assert DEFAULTS.connect_timeout_s != timeout_s


# --- bus.keepalive_s --------------------------------------------------------------------------


def test_keepalive_s_is_the_keep_alive_the_broker_is_told(tmp: Path) -> None:
    broker = Mosquitto(tmp)  # one that logs each client as it connects
    broker.config.write_text(broker.config.read_text() + "log_type notice\n")
    values = {"default": None, "short": 5, "long": 45}

    async def connect_each() -> None:
        for name, keepalive in values.items():
            env = {"GLIDING_BUS__URL": broker.url}
            if keepalive is not None:
                env["GLIDING_BUS__KEEPALIVE_S"] = str(keepalive)
            async with open_bus(settings_from(tmp, env), client_id=f"keepalive-{name}") as bus:
                await round_trip(bus, 1)

    broker.start()
    try:
        anyio.run(within, 20, connect_each)
    finally:
        broker.stop()  # its log is complete once it has stopped
    log = broker.log.read_text(errors="replace")

    for name, keepalive in values.items():
        expected = DEFAULTS.keepalive_s if keepalive is None else keepalive
        assert f"as keepalive-{name} (p5, c1, k{expected})" in log, log


# --- bus.reconnect_max_s ----------------------------------------------------------------------

REFUSED_ATTEMPTS = 5
# CONNACK, MQTT 5: remaining length 3, no session present, reason 0x88 "server unavailable",
# no properties: a broker that is there but refuses, so each attempt fails at once
CONNACK_UNAVAILABLE = b"\x20\x03\x00\x88\x00"


async def refuse(stream: SocketStream, attempts: list[float]) -> None:
    attempts.append(anyio.current_time())
    async with stream:
        with anyio.move_on_after(1.0):
            await stream.receive()  # the CONNECT
            await stream.send(CONNACK_UNAVAILABLE)
            await anyio.sleep(0.01)


@pytest.mark.heavy
@pytest.mark.parametrize("reconnect_max_s", [0.2, None])
def test_reconnect_max_s_bounds_the_wait_between_reconnect_tries(
    tmp: Path, broker: Mosquitto, reconnect_max_s: float | None
) -> None:
    """The broker goes away; on its port a stand-in refuses every connection. Once it has
    refused REFUSED_ATTEMPTS tries the broker comes back and the bus is usable again. The
    waits between tries are the ones the bus logs (``retry_in_s``), not measured ones: they
    double from FIRST_RETRY_S and stop at reconnect_max_s (0.2 s here; the default, 10 s, is
    not reached in these tries).

    A try that lands just as the stand-in closes can be left hanging (accepted, never
    answered) until the connect timeout, so that is 0.6 s here."""
    env = {"GLIDING_BUS__URL": broker.url, "GLIDING_BUS__CONNECT_TIMEOUT_S": "0.6"}
    if reconnect_max_s is not None:
        env["GLIDING_BUS__RECONNECT_MAX_S"] = str(reconnect_max_s)
    settings = settings_from(tmp, env)
    attempts: list[float] = []

    async def main() -> None:
        async with open_bus(settings) as bus:
            assert isinstance(bus, MQTTBus)
            await round_trip(bus, 1)
            await anyio.to_thread.run_sync(broker.stop)
            stand_in = await anyio.create_tcp_listener(local_host="127.0.0.1",
                                                       local_port=broker.port)
            async with anyio.create_task_group() as tg:
                tg.start_soon(stand_in.serve, lambda s: refuse(s, attempts))
                while len(attempts) < REFUSED_ATTEMPTS:
                    await anyio.sleep(0.005)
                tg.cancel_scope.cancel()
            await stand_in.aclose()
            await anyio.to_thread.run_sync(broker.start)
            while not bus.connected:
                await anyio.sleep(0.005)
            await round_trip(bus, 2)  # subscribe, publish, receive: usable again

    with capture_logs() as logs:
        anyio.run(within, 20, main)  # 20 s: hang protection only

    waits = [e["retry_in_s"] for e in logs if e["event"] == "bus.mqtt.reconnect_failed"]
    assert len(waits) >= REFUSED_ATTEMPTS, waits
    cap = DEFAULTS.reconnect_max_s if reconnect_max_s is None else reconnect_max_s
    assert waits == [min(FIRST_RETRY_S * 2**i, cap) for i in range(len(waits))]
    if reconnect_max_s is not None:
        assert max(waits) == reconnect_max_s  # reached, and never waited longer
    else:
        assert DEFAULTS.reconnect_max_s > max(waits) >= 0.8  # the waits doubled: 0.05 ... 0.8


# --- bus.max_buffer ---------------------------------------------------------------------------

PUBLISHED = 20


@pytest.mark.parametrize("max_buffer", [2, None])
def test_max_buffer_is_what_a_subscription_holds_before_it_holds_the_bus_back(
    tmp: Path, broker: Mosquitto, max_buffer: int | None
) -> None:
    """Two subscriptions of one bus to the same topic: ``full`` (made without max_buffer, so
    it holds bus.max_buffer deliveries) is not read, ``other`` (room for everything) is. Once
    ``full`` holds max_buffer deliveries the bus waits for room, so ``other`` gets no more
    either, and the broker keeps the rest; reading ``full`` lets everything through."""
    env = {"GLIDING_BUS__URL": broker.url}
    if max_buffer is not None:
        env["GLIDING_BUS__MAX_BUFFER"] = str(max_buffer)
    settings = settings_from(tmp, env)
    held = min(PUBLISHED, DEFAULTS.max_buffer if max_buffer is None else max_buffer)
    got: dict[str, list[int]] = {}

    async def numbers(sub: Subscription, count: int, within_s: float) -> list[int]:
        out: list[int] = []
        with anyio.move_on_after(within_s):
            while len(out) < count:
                _topic, message = await sub.receive()
                assert isinstance(message, JobEvent)
                out.append(int(message.data["n"]))
        return out

    async def main() -> None:
        async with (
            open_bus(settings) as bus,
            MQTTBus(broker.url, auth=bus_auth(settings)) as publisher,
            bus.subscribe(TOPIC) as full,
            bus.subscribe(TOPIC, max_buffer=PUBLISHED) as other,
        ):
            for n in range(PUBLISHED):
                await publisher.publish(TOPIC, tick(n))
            got["other_while_full"] = await numbers(other, PUBLISHED, 0.5)
            got["full"] = await numbers(full, PUBLISHED, 5.0)
            got["other_after"] = await numbers(
                other, PUBLISHED - len(got["other_while_full"]), 5.0)

    anyio.run(within, 30, main)

    assert got["other_while_full"] == list(range(held))
    assert got["full"] == list(range(PUBLISHED))  # none lost, in order
    assert got["other_while_full"] + got["other_after"] == list(range(PUBLISHED))


# --- bus.auth ---------------------------------------------------------------------------------


@pytest.mark.parametrize("auth", [None, "false"])
def test_auth_decides_whether_a_plain_message_from_anyone_is_believed(
    tmp: Path, broker: Mosquitto, auth: str | None
) -> None:
    assert DEFAULTS.auth is True
    env = {"GLIDING_BUS__URL": broker.url, **({"GLIDING_BUS__AUTH": auth} if auth else {})}
    settings = settings_from(tmp, env)
    got: list[int] = []

    async def main() -> None:
        async with open_bus(settings) as bus, bus.subscribe(TOPIC) as sub, \
                MQTTBus(broker.url) as stranger:  # no key: plain messages
            await stranger.publish(TOPIC, tick(1))
            await bus.publish(TOPIC, tick(2))  # its own: signed when auth is on
            for _ in range(2 if auth else 1):
                got.append((await sub.receive()).message.data["n"])  # type: ignore[union-attr]

    anyio.run(within, 20, main)
    assert got == ([1, 2] if auth == "false" else [2])  # on: the stranger's is refused
    assert (settings.data_dir / "bus.key").exists() == (auth is None)


# --- bus.key_file -----------------------------------------------------------------------------


def test_key_file_is_the_key_a_process_signs_with(tmp: Path, broker: Mosquitto) -> None:
    assert DEFAULTS.key_file is None  # <data_dir>/bus.key
    env = {"GLIDING_BUS__URL": broker.url}
    shared = tmp / "shared.key"
    a = settings_from(tmp, {**env, "GLIDING_DATA_DIR": str(tmp / "a"),
                            "GLIDING_BUS__KEY_FILE": str(shared)})
    b = settings_from(tmp, {**env, "GLIDING_DATA_DIR": str(tmp / "b"),
                            "GLIDING_BUS__KEY_FILE": str(shared)})
    c = settings_from(tmp, {**env, "GLIDING_DATA_DIR": str(tmp / "c")})  # its own key
    got: list[int] = []

    async def main() -> None:
        async with open_bus(a) as bus_a, bus_a.subscribe(TOPIC) as sub, open_bus(b) as bus_b, \
                open_bus(c) as bus_c:
            await bus_c.publish(TOPIC, tick(3))  # another key: refused
            await bus_b.publish(TOPIC, tick(2))  # the same key file: believed
            got.append((await sub.receive()).message.data["n"])  # type: ignore[union-attr]

    anyio.run(within, 20, main)
    assert got == [2]
    assert shared.exists() and (tmp / "c" / "bus.key").exists()
    assert not (tmp / "a" / "bus.key").exists()


# --- bus.max_message_bytes --------------------------------------------------------------------


@pytest.mark.parametrize("limit", [None, 4096])
def test_max_message_bytes_is_the_largest_message_sent_or_taken(
    tmp: Path, broker: Mosquitto, limit: int | None
) -> None:
    assert DEFAULTS.max_message_bytes == 16 * 1024 * 1024
    env = {"GLIDING_BUS__URL": broker.url, "GLIDING_BUS__AUTH": "false"}
    small = settings_from(tmp, {**env, **(
        {"GLIDING_BUS__MAX_MESSAGE_BYTES": str(limit)} if limit else {})})
    big = JobEvent(job="effects", event="big", data={"text": "x" * 8000})

    result: list[str] = []

    async def main() -> None:
        async with open_bus(small) as bus, bus.subscribe(TOPIC) as sub, \
                MQTTBus(broker.url) as other:  # a sender with the default limit
            try:
                await bus.publish(TOPIC, big)
                sent = "sent"
            except BusError as exc:
                sent = exc.message
            await other.publish(TOPIC, big)
            await other.publish(TOPIC, tick(1))
            first = (await sub.receive()).message
            second = (await sub.receive()).message if first != tick(1) else None
            result.append(f"{sent}|{first == big}|{second}")

    anyio.run(within, 20, main)
    outcome = result[0]
    if limit is None:
        assert outcome.startswith("sent|True")
    else:  # neither sent nor taken: only the small tick arrives
        assert "over bus.max_message_bytes (4096)" in outcome and outcome.endswith("|False|None")


# --- bus.username, bus.password_file ----------------------------------------------------------


def test_username_and_password_file_are_the_brokers_credentials(tmp: Path) -> None:
    assert DEFAULTS.username is None and DEFAULTS.password_file is None
    (tmp / "mosquitto").mkdir()
    server = Mosquitto(tmp / "mosquitto")
    files = write_broker_config(tmp / "conf", workers=["box1"], port=server.port)
    server.config.write_text(files.config.read_text())
    env = {"GLIDING_BUS__URL": server.url, "GLIDING_BUS__AUTH": "false"}
    password = str(files.passwords["gliding"])
    tries = {"none": {}, "wrong user": {"GLIDING_BUS__USERNAME": "box1",
                                        "GLIDING_BUS__PASSWORD_FILE": password},
             "right": {"GLIDING_BUS__USERNAME": "gliding",
                       "GLIDING_BUS__PASSWORD_FILE": password}}
    outcome: dict[str, str] = {}

    async def connect_each() -> None:
        for name, more in tries.items():
            settings = settings_from(tmp, {**env, "GLIDING_BUS__CONNECT_TIMEOUT_S": "3", **more})
            try:
                async with open_bus(settings) as bus:
                    await round_trip(bus, 1)
                outcome[name] = "ok"
            except BusError as exc:
                outcome[name] = exc.message

    server.start()
    try:
        anyio.run(within, 30, connect_each)
    finally:
        server.stop()
    assert outcome["right"] == "ok"
    assert outcome["none"].startswith("cannot connect") and outcome["wrong user"].startswith(
        "cannot connect")


def test_ca_file_is_the_ca_a_tls_brokers_certificate_is_checked_against(tmp: Path) -> None:
    assert DEFAULTS.ca_file is None  # the system's CAs, which never signed a private broker's
    (tmp / "mosquitto").mkdir()
    server = Mosquitto(tmp / "mosquitto")
    files = write_broker_config(tmp / "conf", workers=[], port=server.port, tls=True)
    other = write_broker_config(tmp / "other", workers=[], port=server.port, tls=True)
    server.config.write_text(files.config.read_text())
    env = {"GLIDING_BUS__URL": f"mqtts://127.0.0.1:{server.port}", "GLIDING_BUS__AUTH": "false",
           "GLIDING_BUS__USERNAME": "gliding", "GLIDING_BUS__CONNECT_TIMEOUT_S": "3",
           "GLIDING_BUS__PASSWORD_FILE": str(files.passwords["gliding"])}
    tries = {"unset": {}, "another CA": {"GLIDING_BUS__CA_FILE": str(other.ca_file)},
             "the broker's CA": {"GLIDING_BUS__CA_FILE": str(files.ca_file)}}
    outcome: dict[str, str] = {}

    async def connect_each() -> None:
        for name, more in tries.items():
            try:
                async with open_bus(settings_from(tmp, {**env, **more})) as bus:
                    await round_trip(bus, 1)
                outcome[name] = "ok"
            except BusError as exc:
                outcome[name] = exc.message

    server.start()
    try:
        anyio.run(within, 30, connect_each)
    finally:
        server.stop()
    assert outcome["the broker's CA"] == "ok"
    assert "CERTIFICATE_VERIFY_FAILED" in outcome["unset"]
    assert "CERTIFICATE_VERIFY_FAILED" in outcome["another CA"]
