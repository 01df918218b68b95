"""Real servers for integration tests, started and stopped by the tests themselves.

``oxigraph_serve(location)`` runs ``oxigraph serve`` (the binary of the PyPI package ``oxigraph``
next to this Python) on a free loopback port with its data in ``location``, waits until it
answers a query, yields its base URL and stops it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OXIGRAPH = Path(sys.executable).parent / "oxigraph"
START_TIMEOUT_S = 20.0


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(url: str, body: str, content_type: str, timeout_s: float = 2.0) -> bytes:
    """POST ``body`` to ``url`` without any proxy from the environment; the reply's bytes."""
    request = urllib.request.Request(url, data=body.encode(), method="POST",
                                     headers={"Content-Type": content_type})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=timeout_s) as response:
        return bytes(response.read())


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
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log is not None and not isinstance(sink, int):
            sink.close()
