"""Real servers for integration tests, started and stopped by the tests themselves.

``oxigraph_serve(location)`` runs ``oxigraph serve`` (the binary of the PyPI package ``oxigraph``
next to this Python) on a free loopback port with its data in ``location``, waits until it
answers a query, yields its base URL and stops it.

``mosquitto()`` runs the Debian ``mosquitto`` broker (MQTT 5) on a free loopback port with a
generated config in a temporary directory; it yields a ``Mosquitto`` whose ``stop()`` and
``start()`` restart it on the same port (for reconnect tests) and kills it at the end.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gliding.bench.servers import MOSQUITTO_CONFIG, OXIGRAPH, free_port, mosquitto_binary

START_TIMEOUT_S = 20.0


def post(url: str, body: str, content_type: str, timeout_s: float = 2.0) -> bytes:
    """POST ``body`` to ``url`` without any proxy from the environment; the reply's bytes."""
    request = urllib.request.Request(url, data=body.encode(), method="POST",
                                     headers={"Content-Type": content_type})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout_s) as response:
        return bytes(response.read())


def stop_process(process: subprocess.Popen[bytes], wait_s: float = 10.0) -> None:
    """SIGTERM ``process``, then SIGKILL when it has not exited after ``wait_s``."""
    process.terminate()
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def oxigraph_serve(location: Path, *, log: Path | None = None) -> Iterator[str]:
    """``oxigraph serve`` on a free loopback port; yields ``http://127.0.0.1:<port>``.

    Raises:
        FileNotFoundError: no ``oxigraph`` binary next to this Python.
        RuntimeError: the server exited or did not answer within START_TIMEOUT_S.
    """
    if not OXIGRAPH.exists():
        raise FileNotFoundError(f"no oxigraph binary at {OXIGRAPH} (pip install oxigraph)")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    sink = log.open("wb") if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(
        [str(OXIGRAPH), "serve", "--location", str(location), "--bind", f"127.0.0.1:{port}"],
        stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                post(f"{base}/query", "ASK { ?s ?p ?o }", "application/sparql-query")
                break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"oxigraph serve did not start on port {port} (exit {process.poll()})"
                        + (f"; see {log}" if log is not None else "")) from None
                time.sleep(0.05)
        yield base
    finally:
        stop_process(process)
        if log is not None and not isinstance(sink, int):
            sink.close()


class Mosquitto:
    """A mosquitto broker on one loopback port; ``url`` is ``mqtt://127.0.0.1:<port>``."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.binary = mosquitto_binary()
        self.port = port if port is not None else free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.config = directory / "mosquitto.conf"
        self.config.write_text(MOSQUITTO_CONFIG.format(port=self.port))
        self.log = directory / "mosquitto.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the broker (again, on the same port) and wait until it accepts connections.

        Raises:
            RuntimeError: it exited or did not listen within START_TIMEOUT_S.
        """
        if self.running:
            return
        with self.log.open("ab") as sink:
            self._process = subprocess.Popen([self.binary, "-c", str(self.config)],
                                             stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    code = self._process.poll()
                    self.stop()
                    raise RuntimeError(
                        f"mosquitto did not start on port {self.port} (exit {code}); see "
                        f"{self.log}: {self.log.read_text(errors='replace')[-500:]}") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 5 s); its clients see the drop."""
        process, self._process = self._process, None
        if process is None:
            return
        stop_process(process, wait_s=5)


@contextmanager
def mosquitto(port: int | None = None) -> Iterator[Mosquitto]:
    """A running mosquitto on ``port`` (a free one by default), stopped at the end.

    Raises:
        FileNotFoundError: mosquitto is not installed (run scripts/setup.sh).
        RuntimeError: it did not start.
    """
    with tempfile.TemporaryDirectory(prefix="gliding-mosquitto-") as directory:
        broker = Mosquitto(Path(directory), port)
        try:
            broker.start()
            yield broker
        finally:
            broker.stop()


__all__ = ["MOSQUITTO_CONFIG", "OXIGRAPH", "Mosquitto", "free_port", "mosquitto",
           "mosquitto_binary", "oxigraph_serve", "post"]
