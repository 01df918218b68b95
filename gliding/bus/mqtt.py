"""MQTTBus: the bus over an MQTT 5 broker (mosquitto), one aiomqtt connection per bus.

    async with MQTTBus("mqtt://127.0.0.1:1883") as bus:     # or MQTTBus.from_settings(bus_settings)
        async with bus.subscribe("gliding/job/+/events") as sub:
            await bus.publish("gliding/job/j1/events", JobEvent(job="j1", event="x"))
            topic, message = await sub.receive()

Entering the context connects (``BusError`` naming the URL, within ``connect_timeout_s``, when
no broker answers) and starts the one task that reads the connection; leaving it closes the bus
(``aclose`` may come earlier, from any task). Behaviour beyond ``port.Bus``:

    * Wire. MQTT 5, QoS 1 both ways; the payload is ``messages.to_json``. Every delivery is
      decoded with ``from_json`` (validated); one that is not a bus message is logged
      (``bus.mqtt.bad_payload``), acknowledged and skipped.
    * Routing. One broker subscription per distinct filter, tagged with an MQTT 5 subscription
      identifier; the local subscriptions made with that filter share it. The broker sends one
      copy per matching filter (or one copy naming several identifiers), so each local
      subscription gets each message exactly once however their filters overlap. The local
      members of one ``$share/...`` filter take turns (round robin, as on the in-process
      bus); between connections the broker picks the member.
    * Order. ``publish`` returns once the broker acknowledged the message (PUBACK), so
      sequential publishes reach every subscriber in publish order.
    * Back-pressure. Each subscription holds at most ``max_buffer`` deliveries (default: the
      bus's ``max_buffer``). When one is full the reading task waits for room, and deliveries
      are acknowledged only once every local subscription holds them: the broker then stops
      after ``receive_maximum`` unacknowledged messages and queues the rest itself (mosquitto's
      ``max_queued_messages``, past which it drops them). Memory is thus bounded by the buffers
      plus ``receive_maximum`` deliveries. A full subscription holds back the other
      subscriptions of the same bus, never publishers and never other connections.
    * Reconnect. When the connection drops, the bus reconnects with exponential backoff (from
      50 ms up to ``reconnect_max_s``, forever until closed) and resubscribes every live
      subscription before it counts as connected again. Messages published by others while it
      was away are not replayed (clean sessions).
    * Publish or subscribe while disconnected waits for the reconnection up to
      ``connect_timeout_s``, then raises ``BusError``. A publish whose connection dropped
      before its PUBACK is sent again on the next connection (at most ``SENDS`` times in all,
      so a message the broker disconnects for cannot loop): at least once, so a message can
      arrive twice across a broker restart.
    * Topics on ``$SYS/`` are refused: brokers keep them and drop what clients publish there.
    * TLS. ``mqtts://host:port`` (8883 by default) connects with TLS 1.2 or later and checks
      the broker's certificate against ``ca_file`` (``bus.ca_file``; None: the system's CAs)
      and the URL's host. A certificate that does not check is a ``BusError`` on connecting
      (``bus/certs.py`` makes a broker's; clients present none).

MQTTBus runs on asyncio only (as aiomqtt does). The aiomqtt version is pinned;
``mqtt_link.Client`` holds every place that reaches into it and paho, and ``mqtt_routing``
how deliveries reach the local subscriptions. This module keeps the connection's life
(connect, reconnect, resubscribe) and the ``port.Bus`` methods.
"""

from __future__ import annotations

import itertools
import math
import socket
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType

import aiomqtt
import anyio
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from gliding.bus.auth import ROOT, BusAuth, Forged
from gliding.bus.certs import CA_HINT, client_context
from gliding.bus.inproc import InProcessSubscription
from gliding.bus.messages import BusMessage, from_json, to_json
from gliding.bus.mqtt_link import Link, parse_url
from gliding.bus.mqtt_routing import Filter, Refusals, hand, hand_to_one
from gliding.bus.port import Delivery, check_pattern, check_topic, split_shared
from gliding.config.settings import BusSettings
from gliding.errors import BusError, GlidingError

log = structlog.get_logger("gliding.bus")

RECEIVE_MAXIMUM = 100  # unacknowledged deliveries the broker may send one bus
MAX_IDENTIFIER = 268_435_455  # the largest MQTT 5 subscription identifier
FIRST_RETRY_S = 0.05
SENDS = 3  # a publish whose connection drops before the PUBACK is sent at most this often
MAX_PACKET = 268_435_455  # MQTT's largest packet
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
ENVELOPE_ROOM = 1024  # what a signed envelope adds to a message, at most (and escaping)
LOSS_GRACE_S = 1.0  # how long a failed request waits for the reader to notice a lost link
UNREACHABLE_HINT = (
    "start mosquitto (scripts/setup.sh installs it) or point bus.url at a running MQTT 5 "
    "broker (mqtts:// if it listens with TLS); leave bus.url unset for the in-process bus"
)
TLS_HINT = (
    "the broker must listen with TLS on that port, with a certificate for the URL's host; "
    + CA_HINT
)


class MQTTBus:
    """A bus over an MQTT 5 broker; implements ``port.Bus``. Use it as an async context."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = 5.0,
        keepalive_s: int = 30,
        reconnect_max_s: float = 10.0,
        max_buffer: int = 1000,
        client_id: str | None = None,
        receive_maximum: int = RECEIVE_MAXIMUM,
        auth: BusAuth | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        username: str | None = None,
        password: str | None = None,
        ca_file: Path | None = None,
    ) -> None:
        """``auth``: sign every message sent and check every message received
        (``bus/auth.py``); None sends and takes plain messages. ``max_message_bytes``: a
        larger payload is neither sent nor decoded (the broker is told the limit too).
        ``ca_file``: for an ``mqtts://`` URL, the CA certificates the broker's certificate is
        checked against (None: the system's).

        Raises:
            BusError: ``url`` is not ``mqtt://host:port`` or ``mqtts://host:port``, a number
                is out of range, ``ca_file`` is given for a plain ``mqtt://`` URL or cannot
                be read.
        """
        self._host, self._port = parse_url(url)
        self._url = url
        tls = urllib.parse.urlsplit(url).scheme == "mqtts"
        self._tls = client_context(ca_file) if tls else None
        if self._tls is None and ca_file is not None:
            raise BusError(f"bus.ca_file is set, but bus.url {url} does not use TLS",
                           hint="use mqtts://host:port for a broker that listens with TLS, "
                                "or unset bus.ca_file")
        if not connect_timeout_s > 0 or not reconnect_max_s > 0 or keepalive_s < 1:
            raise BusError("connect_timeout_s, reconnect_max_s and keepalive_s must be > 0")
        self._connect_timeout_s = connect_timeout_s
        self._keepalive_s = keepalive_s
        self._reconnect_max_s = reconnect_max_s
        self._max_buffer = _check_buffer(max_buffer)
        if not 1 <= receive_maximum <= 65535:
            raise BusError(f"receive_maximum must be 1..65535, got {receive_maximum!r}")
        self._receive_maximum = receive_maximum
        self._client_id = client_id
        self._credentials = {"username": username, "password": password} if username else {}
        self.auth = auth
        if not 1024 <= max_message_bytes <= MAX_PACKET:
            raise BusError(f"max_message_bytes must be 1024..{MAX_PACKET}")
        self._max_message_bytes = max_message_bytes
        self._refusals = Refusals(url)
        self._state = "new"  # -> open -> closed
        self._link: Link | None = None
        self._filters: dict[str, Filter] = {}
        self._by_ident: dict[int, Filter] = {}
        self._idents = itertools.count(1)
        self._tg: TaskGroup | None = None
        self._reconnects = 0

    @classmethod
    def from_settings(cls, settings: BusSettings, *, client_id: str | None = None,
                      auth: BusAuth | None = None) -> MQTTBus:
        """An (unopened) bus for ``settings.url``.

        Raises:
            BusError: as the constructor; also ``settings.url`` is unset or the password
                file cannot be read.
        """
        if settings.url is None:
            raise BusError("bus.url is not set, so there is no broker to connect to",
                           hint="set bus.url: mqtt://127.0.0.1:1883, or use the in-process bus")
        password = None
        if settings.password_file is not None:
            from gliding.bus.broker import read_password

            try:
                password = read_password(settings.password_file)
            except GlidingError as exc:
                raise BusError(exc.message, hint=exc.hint) from None
        return cls(settings.url, connect_timeout_s=settings.connect_timeout_s,
                   keepalive_s=settings.keepalive_s, reconnect_max_s=settings.reconnect_max_s,
                   max_buffer=settings.max_buffer, client_id=client_id, auth=auth,
                   max_message_bytes=settings.max_message_bytes,
                   username=settings.username, password=password, ca_file=settings.ca_file)

    @property
    def url(self) -> str:
        return self._url

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    @property
    def reconnects(self) -> int:
        """How often the connection was lost and made again (``port.Bus.reconnects``)."""
        return self._reconnects

    @property
    def connected(self) -> bool:
        """Whether the bus holds a live connection to the broker right now."""
        return self._link is not None and not self._link.lost.is_set()

    @property
    def pending(self) -> int:
        """Deliveries read from the broker that wait to be routed (at most receive_maximum)."""
        return self._link.client.queued if self._link is not None else 0

    async def __aenter__(self) -> MQTTBus:
        """Connect and start reading.

        Raises:
            BusError: the broker did not accept a connection within connect_timeout_s, or this
                bus was opened before.
        """
        if self._state != "new":
            raise BusError("an MQTTBus opens once", hint="make a new MQTTBus")
        self._up = anyio.Event()
        self._lock = anyio.Lock()
        self._reader = anyio.CancelScope()
        link = await self._connect()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._state = "open"
        self._set_link(link)
        self._tg.start_soon(self._run, link)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        tg, self._tg = self._tg, None
        return await tg.__aexit__(exc_type, exc, tb) if tg is not None else None

    async def publish(self, topic: str, message: BusMessage) -> None:
        """See ``port.Bus.publish``; returns once the broker has the message (PUBACK).

        Raises:
            BusError: as ``port.Bus.publish``; also a ``$SYS/`` topic, or no connection came
                back within connect_timeout_s.
        """
        self._require_open(f"publish on {topic!r}")
        check_topic(topic)
        if topic.startswith("$SYS/"):
            raise BusError(f"cannot publish on {topic!r}: the broker keeps $SYS/ for itself",
                           hint="use a topic under gliding/")
        payload = to_json(message)
        if len(payload) > self._max_message_bytes:
            raise BusError(f"cannot publish on {topic!r}: the message has {len(payload)} bytes, "
                           f"over bus.max_message_bytes ({self._max_message_bytes})",
                           hint="send a reference (an IRI in the archive) instead")
        link = self._link
        deadline = math.inf
        for _ in range(SENDS):
            if link is None or link.lost.is_set():
                if deadline == math.inf:
                    deadline = anyio.current_time() + self._connect_timeout_s
                link = await self._wait_up(deadline, f"publish on {topic!r}")
            with link.request():
                try:  # sealed here, numbered in the order messages reach the socket
                    wire = payload if self.auth is None else self.auth.sealer.seal(topic, payload)
                    await link.client.publish(topic, wire, qos=1, timeout=math.inf)
                    return
                except aiomqtt.MqttError as exc:
                    await self._settle(link, exc, f"publish on {topic!r}")
            # the link dropped before the PUBACK: send again on the next one
        raise BusError(
            f"cannot publish on {topic!r}: the connection to {self._url} dropped each of "
            f"{SENDS} times it was sent", hint="the broker may refuse it (too large?): see its log")

    @asynccontextmanager
    async def subscribe(
        self, pattern: str, *, max_buffer: int | None = None, unverified: bool = False
    ) -> AsyncIterator[InProcessSubscription]:
        """See ``port.Bus.subscribe``; the broker holds the filter when the context is entered.
        ``unverified``: on a bus with ``auth``, also take signed messages this process cannot
        check (a worker: the root's offers to the whole pool); every subscription of one
        filter must say the same.

        Raises (on entering):
            BusError: as ``port.Bus.subscribe``; also the broker refused the filter, or no
                connection came back within connect_timeout_s.
        """
        self._require_open(f"subscribe to {pattern!r}")
        check_pattern(pattern)
        size = self._max_buffer if max_buffer is None else _check_buffer(max_buffer)
        send, receive = anyio.create_memory_object_stream[Delivery](size)
        try:
            await self._join(pattern, send, unverified)
            yield InProcessSubscription(pattern, receive)
        finally:
            send.close()
            receive.close()
            with anyio.CancelScope(shield=True):
                await self._leave(pattern, send)

    async def aclose(self) -> None:
        """See ``port.Bus.aclose``; disconnects from the broker (politely, if it is there)."""
        if self._state == "closed":
            return
        opened, self._state = self._state == "open", "closed"
        if not opened:
            return
        for entry in self._filters.values():
            for member in entry.members:
                member.close()
        self._reader.cancel()
        self._up.set()  # wake whoever waits for a connection: they find the bus closed
        link, self._link = self._link, None
        if link is not None:
            link.drop()
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._connect_timeout_s):
                try:
                    await link.client.__aexit__(None, None, None)
                except aiomqtt.MqttError as exc:
                    log.info("bus.mqtt.disconnect_failed", url=self._url, error=str(exc))
            link.client.abort()

    # ---- connection -------------------------------------------------------------------------

    async def _connect(self) -> Link:
        properties = Properties(PacketTypes.CONNECT)
        properties.ReceiveMaximum = self._receive_maximum
        # the broker sends nothing larger (an envelope adds under 1 KiB to a message)
        properties.MaximumPacketSize = min(MAX_PACKET, self._max_message_bytes + ENVELOPE_ROOM)
        link = Link(
            self._lost, hostname=self._host, port=self._port, identifier=self._client_id,
            protocol=aiomqtt.ProtocolVersion.V5, keepalive=self._keepalive_s,
            timeout=self._connect_timeout_s, properties=properties, **self._credentials,
            tls_context=self._tls,
            # no Nagle: a PUBACK or a second copy must not wait 40 ms for the peer's ACK
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        try:
            with anyio.fail_after(self._connect_timeout_s):
                await link.client.__aenter__()
        except (aiomqtt.MqttError, TimeoutError) as exc:
            link.client.abort()
            reason = str(exc) or f"no answer within {self._connect_timeout_s:g}s"
            raise BusError(f"cannot connect to the MQTT broker at {self._url}: {reason}",
                           hint=UNREACHABLE_HINT if self._tls is None else TLS_HINT) from exc
        except BaseException:
            link.client.abort()
            raise
        return link

    def _set_link(self, link: Link) -> None:
        self._link = link
        self._up.set()

    def _lost(self, link: Link) -> None:
        if self._link is link:  # from now on, whoever needs the broker waits for the next one
            self._link, self._up = None, anyio.Event()

    async def _run(self, link: Link) -> None:
        """Read ``link`` until it drops, then reconnect; until the bus closes."""
        with self._reader:
            while True:
                await self._read(link)
                link.drop()
                link.client.abort()
                log.warning("bus.mqtt.disconnected", url=self._url)
                link = await self._reconnect()

    async def _reconnect(self) -> Link:
        delay = min(FIRST_RETRY_S, self._reconnect_max_s)
        for attempt in itertools.count(1):
            try:
                link = await self._connect()
            except BusError as exc:
                log.info("bus.mqtt.reconnect_failed", url=self._url, attempt=attempt,
                         retry_in_s=delay, error=exc.message)
            else:
                async with self._lock:
                    try:
                        for entry in list(self._filters.values()):
                            await self._subscribe_on(link, entry)
                    except BusError as exc:  # refused now, accepted before: try again later
                        log.warning("bus.mqtt.resubscribe_failed", url=self._url, error=str(exc))
                        link.drop()
                    if not link.lost.is_set():
                        self._set_link(link)
                        self._reconnects += 1
                        log.info("bus.mqtt.reconnected", url=self._url, attempt=attempt,
                                 filters=len(self._filters))
                        return link
                link.client.abort()
            await anyio.sleep(delay)
            delay = min(delay * 2, self._reconnect_max_s)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _wait_up(self, deadline: float, what: str) -> Link:
        while True:
            self._require_open(what)
            link = self._link
            if link is not None and not link.lost.is_set():
                return link
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                raise BusError(
                    f"cannot {what}: the MQTT broker at {self._url} has been unreachable for "
                    f"{self._connect_timeout_s:g}s", hint=UNREACHABLE_HINT)
            with anyio.move_on_after(remaining):
                await self._up.wait()

    async def _settle(self, link: Link, exc: aiomqtt.MqttError, what: str) -> None:
        """After a failed request: return if the link dropped (so retry), else raise."""
        with anyio.move_on_after(LOSS_GRACE_S):
            await link.lost.wait()
        self._require_open(what)
        if not link.lost.is_set():
            raise BusError(f"cannot {what} at {self._url}: {exc}",
                           hint="see the broker's log") from exc

    # ---- subscriptions ----------------------------------------------------------------------

    async def _join(self, pattern: str, send: MemoryObjectSendStream[Delivery],
                    unverified: bool = False) -> None:
        deadline = anyio.current_time() + self._connect_timeout_s
        async with self._lock:
            self._require_open(f"subscribe to {pattern!r}")
            entry = self._filters.get(pattern)
            if entry is not None and entry.unverified != unverified:
                raise BusError(f"{pattern!r} is subscribed with unverified={entry.unverified}",
                               hint="subscribe to it one way only")
            if entry is None:
                entry = Filter(pattern, self._next_ident(), split_shared(pattern)[0] is not None,
                                unverified=unverified)
                self._filters[pattern] = entry
                self._by_ident[entry.ident] = entry
                entry.members.append(send)
                link = self._link
                if link is not None:
                    try:
                        await self._subscribe_on(link, entry)
                    except BusError:
                        entry.members.remove(send)
                        self._forget(entry)
                        raise
            else:
                entry.members.append(send)
        # if the link dropped meanwhile, the reconnection resubscribes the filter
        await self._wait_up(deadline, f"subscribe to {pattern!r}")

    async def _subscribe_on(self, link: Link, entry: Filter) -> None:
        """SUBSCRIBE ``entry`` on ``link``; returns early if the link drops (``link.lost``).

        Raises:
            BusError: the broker refused the filter.
        """
        properties = Properties(PacketTypes.SUBSCRIBE)
        properties.SubscriptionIdentifier = entry.ident
        what = f"subscribe to {entry.pattern!r}"
        with link.request():
            try:
                codes = await link.client.subscribe(entry.pattern, qos=1, properties=properties)
            except aiomqtt.MqttError as exc:
                await self._settle(link, exc, what)
                return
            for code in codes:
                value = code if isinstance(code, int) else code.value
                if value >= 0x80:
                    raise BusError(f"the broker at {self._url} refused {entry.pattern!r}: {code}",
                                   hint="check the filter and the broker's ACL")

    async def _leave(self, pattern: str, send: MemoryObjectSendStream[Delivery]) -> None:
        entry = self._filters.get(pattern)
        if entry is None or send not in entry.members:
            return
        entry.members.remove(send)
        if entry.members or self.closed:
            return
        async with self._lock:
            if entry.members or self._filters.get(pattern) is not entry:
                return
            self._forget(entry)
            link = self._link
            if link is None or self.closed:
                return
            with anyio.move_on_after(self._connect_timeout_s), link.request():
                try:
                    await link.client.unsubscribe(pattern)
                except aiomqtt.MqttError as exc:
                    # its deliveries are dropped anyway: no local subscription holds its identifier
                    log.info("bus.mqtt.unsubscribe_failed", url=self._url, pattern=pattern,
                             error=str(exc))

    def _forget(self, entry: Filter) -> None:
        del self._filters[entry.pattern]
        del self._by_ident[entry.ident]

    def _next_ident(self) -> int:
        while True:
            ident = next(self._idents)
            if ident > MAX_IDENTIFIER:
                self._idents = itertools.count(1)
            elif ident not in self._by_ident:
                return ident

    # ---- delivery ---------------------------------------------------------------------------

    async def _read(self, link: Link) -> None:
        """Route what ``link`` delivers, acknowledging each once routed; until it drops."""
        client = link.client
        by_ident = self._by_ident
        try:
            while True:
                mqtt_message = await client.next()
                properties = mqtt_message.properties
                idents = getattr(properties, "SubscriptionIdentifier", None)
                decoded: dict[str | bytes, Delivery | None] = {}
                for ident in idents or ():
                    entry = by_ident.get(ident)
                    if entry is None or not entry.members:
                        continue  # left meanwhile
                    delivery = self._decode(mqtt_message, ident, entry, decoded)
                    if delivery is None:
                        continue
                    if entry.shared:
                        await hand_to_one(entry, delivery)
                    else:
                        for member in tuple(entry.members):
                            try:
                                member.send_nowait(delivery)
                            except anyio.WouldBlock:
                                await hand(member, delivery)
                            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                                pass  # it left
                client.ack(mqtt_message)
        except aiomqtt.MqttError:
            return

    def _decode(self, mqtt_message: aiomqtt.Message, ident: int, entry: Filter,
                decoded: dict[str | bytes, Delivery | None]) -> Delivery | None:
        """The delivery of ``mqtt_message`` for the subscription ``ident``, or None (logged)
        when it is not one: too large, not a bus message, or, on a bus with ``auth``, not
        signed by a sender this process can check (unless ``entry`` takes unverified
        messages), a replay, or refused by the policy. ``decoded`` shares the decoding of one
        message between the subscriptions it is for."""
        payload = mqtt_message.payload
        topic = mqtt_message.topic.value
        size = len(payload) if isinstance(payload, bytes | str) else 0
        try:
            if not isinstance(payload, bytes | str):
                raise BusError(f"payload of type {type(payload).__name__}")
            if size > self._max_message_bytes + (ENVELOPE_ROOM if self.auth else 0):
                raise BusError(f"{size} bytes, over bus.max_message_bytes")
            sender, verified = ROOT, True
            text: str | bytes = payload
            if self.auth is not None:
                sealed = self.auth.opener.open(topic, payload, ident, entry.began)
                sender, text, verified = sealed.sender, sealed.msg, sealed.verified
                if not verified and not entry.unverified:
                    return None  # the root's word to others (an offer to the pool): not ours
            if text not in decoded:
                delivery = Delivery(topic, from_json(text))
                if (verified and sender != ROOT and self.auth is not None
                        and self.auth.policy is not None):
                    refused = self.auth.policy(topic, sender, delivery.message)
                    if refused:
                        raise Forged(f"{sender} may not say that: {refused}", kind="policy")
                decoded[text] = delivery
            return decoded[text]
        except BusError as exc:
            self._refusals.note(topic, exc, size)
            return None

    def _require_open(self, what: str) -> None:
        if self._state != "open":
            if self._state == "new":
                raise BusError(f"cannot {what}: the bus is not open yet",
                               hint="use `async with MQTTBus(url) as bus:`")
            raise BusError(f"cannot {what}: the bus is closed", hint="open a new bus")


def _check_buffer(max_buffer: object) -> int:
    if not isinstance(max_buffer, int) or isinstance(max_buffer, bool) or max_buffer < 1:
        raise BusError(f"max_buffer must be an int >= 1, got {max_buffer!r}",
                       hint="the default (bus.max_buffer) suits most subscribers")
    return max_buffer
