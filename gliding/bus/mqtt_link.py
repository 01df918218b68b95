"""The MQTT bus's connection: ``bus.url`` parsing and the adapter over aiomqtt and paho.

``Client`` is aiomqtt's client with the few changes the bus needs (manual acknowledgements, a
direct read of aiomqtt's queue, writes on the loop's next tick, a prompt failure when the broker
closes before its CONNACK, a bounded TLS handshake); ``Link`` is one connection and the
requests to cancel when it drops. The aiomqtt and paho versions are pinned: this module is the
only place that reaches into their internals, so an upgrade is checked here alone.
``mqtt.MQTTBus`` connects, reconnects and routes over these.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import aiomqtt
import anyio

from gliding.errors import BusError

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
_LOST: Any = object()  # queued after the last delivery of a connection


def parse_url(url: str) -> tuple[str, int]:
    """``(host, port)`` of ``mqtt://host:port`` or ``mqtts://host:port`` (TLS; the port
    defaults to 1883, or 8883 with TLS).

    Raises:
        BusError: ``url`` is not of that form.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except (ValueError, TypeError, AttributeError) as exc:
        raise _bad_url(url) from exc
    if (parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/")
            or parts.query or parts.fragment or parts.username is not None):
        raise _bad_url(url)
    return parts.hostname, port


def _bad_url(url: object) -> BusError:
    return BusError(f"bad bus.url {url!r}: expected mqtt://host:port or mqtts://host:port",
                    hint="e.g. mqtt://127.0.0.1:1883, or mqtts://broker.lan:8883 for TLS; "
                         "leave bus.url unset for the in-process bus")


class Client(aiomqtt.Client):
    """aiomqtt's client, reaching into aiomqtt 2.5 and paho 2.1 (both pinned) for four things:
    deliveries are acknowledged by the bus (paho's manual ack), so the broker holds back what
    the bus has no room for; they are read straight from aiomqtt's queue, without the task per
    message that ``aiomqtt.Client.messages`` makes; packets are written on the loop's next tick; a
    connection the broker closes before its CONNACK (a plain client on a TLS port) fails the
    connect at once, where aiomqtt would wait for the timeout. With TLS, the handshake is
    bounded by the connect timeout and a socket whose handshake fails is closed (paho
    leaves it open)."""

    def __init__(self, *args: Any, on_lost: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client.manual_ack_set(True)
        self._client.connect_timeout = self.timeout
        self._loop_thread = threading.get_ident()
        self._on_lost = on_lost
        self._client._ssl_wrap_socket = self._ssl_wrap  # type: ignore[method-assign]

    def _ssl_wrap(self, tcp_sock: socket.socket) -> ssl.SSLSocket:
        """paho's ``_ssl_wrap_socket`` (in paho's connect thread), closing what fails."""
        context = self._client._ssl_context
        assert context is not None and context.check_hostname  # bus/certs.py made it
        sock = context.wrap_socket(tcp_sock, server_hostname=self._hostname,
                                   do_handshake_on_connect=False)
        try:
            sock.settimeout(self.timeout)
            sock.do_handshake()
        except BaseException:
            sock.close()
            raise
        return sock

    async def __aenter__(self) -> Client:
        await super().__aenter__()
        self._disconnected.add_done_callback(self._lost)
        return self

    def _lost(self, disconnected: asyncio.Future[None]) -> None:
        if not disconnected.cancelled():
            disconnected.exception()  # retrieved: asyncio need not complain about it
        self._queue.put_nowait(_LOST)  # after the deliveries that came before the end
        self._on_lost()

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason_code: Any,
                       properties: Any = None) -> None:
        if not self._connected.done():
            self._connected.set_exception(aiomqtt.MqttError(
                "the broker closed the connection before accepting it"))
        super()._on_disconnect(client, userdata, flags, reason_code, properties)

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def next(self) -> aiomqtt.Message:
        """The next delivery, at once if one has arrived.

        Raises:
            aiomqtt.MqttError: the connection is lost (what arrived before it is taken first).
        """
        message = await self._queue.get()
        if message is _LOST:
            self._queue.put_nowait(_LOST)
            raise aiomqtt.MqttError("the connection to the broker was lost")
        return message

    def ack(self, message: aiomqtt.Message) -> None:
        self._client.ack(message.mid, message.qos)

    def abort(self) -> None:
        """Close the socket without a goodbye (it may never have finished connecting)."""
        with suppress(Exception):
            self._client._reset_sockets()

    def _on_socket_register_write(self, client: Any, userdata: Any, sock: Any) -> None:
        # paho has a packet to send. aiomqtt always waits for the socket to turn writable, via
        # call_soon_threadsafe (paho's connect runs in a thread); on the loop's own thread we
        # write on the next tick instead: two syscalls and a wake-up less per packet.
        if threading.get_ident() != self._loop_thread:
            super()._on_socket_register_write(client, userdata, sock)
        else:
            self._loop.call_soon(self._write_now, client, userdata, sock)

    def _write_now(self, client: Any, userdata: Any, sock: Any) -> None:
        try:
            client.loop_write()
        except Exception as exc:  # noqa: BLE001 - as aiomqtt's own write callback: the connection is lost
            if not self._disconnected.done():
                self._disconnected.set_exception(exc)
            return
        if client.want_write() and client.socket() is sock:  # a part is left: wait for room
            super()._on_socket_register_write(client, userdata, sock)


class Link:
    """One connection; ``waiters`` are the requests to cancel when it drops."""

    def __init__(self, on_lost: Callable[[Link], None], **client_options: Any) -> None:
        self.client = Client(**client_options, on_lost=self.drop)
        self.lost = anyio.Event()
        self.waiters: set[anyio.CancelScope] = set()
        self._on_lost = on_lost

    def drop(self) -> None:
        if not self.lost.is_set():
            self.lost.set()
            self._on_lost(self)
        for scope in self.waiters:
            scope.cancel()

    @contextmanager
    def request(self) -> Iterator[None]:
        """A scope for one request to the broker, cancelled if the link drops meanwhile."""
        with anyio.CancelScope() as scope:
            self.waiters.add(scope)
            try:
                yield
            finally:
                self.waiters.discard(scope)
