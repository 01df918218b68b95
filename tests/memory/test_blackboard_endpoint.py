"""The SPARQL endpoint blackboard passes the contract against a real ``oxigraph serve``.

The server is the ``oxigraph`` binary of the PyPI package ``oxigraph`` next to this Python. The
tests start it on a free loopback port with its data in a temporary directory, wait until it
answers, empty it before each test and stop it at the end.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from gliding.memory.backends.sparql_endpoint import SparqlEndpointBlackboard
from gliding.memory.board.blackboard import BlackboardError, QueryTimeout
from gliding.testing.blackboard_contract import (
    CONTRACT_MAX_LIMIT,
    G1,
    BlackboardContract,
    step,
)
from gliding.testing.servers import OXIGRAPH, free_port, oxigraph_serve, post


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not OXIGRAPH.exists():
        pytest.skip(f"no oxigraph binary at {OXIGRAPH} (pip install oxigraph)")
    location = tmp_path_factory.mktemp("oxigraph")
    with oxigraph_serve(location, log=location.parent / f"{location.name}.log") as base:
        yield base


class TestSparqlEndpoint(BlackboardContract):
    @pytest.fixture
    def board(self, server: str) -> Iterator[SparqlEndpointBlackboard]:
        post(f"{server}/update", "DROP ALL", "application/sparql-update")
        board = SparqlEndpointBlackboard.for_oxigraph(server, max_limit=CONTRACT_MAX_LIMIT)
        yield board
        board.close()


def test_an_unreachable_endpoint_is_a_clear_error() -> None:
    board = SparqlEndpointBlackboard.for_oxigraph(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BlackboardError) as caught:
        board.put(step(1), graph=G1)
    assert "cannot reach" in str(caught.value)


def test_an_endpoint_that_does_not_answer_times_out() -> None:
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        board = SparqlEndpointBlackboard.for_oxigraph(url, timeout_s=0.2)
        with pytest.raises(QueryTimeout):
            board.query("ASK { ?s ?p ?o }", timeout_s=0.2)
        with pytest.raises(QueryTimeout):
            board.get(step(1)["@id"], graph=G1)


def test_an_endpoint_that_trickles_its_answer_times_out_at_the_deadline() -> None:
    """Oxigraph streams results row by row, so a slow query keeps each read short: the
    timeout must bound the whole answer, not each read."""
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def trickle() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: "
                                   b"application/sparql-results+json\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n")
                while not stop.wait(0.02):  # one byte every 20 ms, for ever
                    try:
                        connection.sendall(b"1\r\n \r\n")
                    except OSError:  # the client gave up
                        return

        server = threading.Thread(target=trickle, daemon=True)
        server.start()
        board = SparqlEndpointBlackboard.for_oxigraph(
            f"http://127.0.0.1:{listener.getsockname()[1]}")
        try:
            # the server trickles for ever, so a read timeout never fires: only the bound on the
            # whole request ends this (without it, the test's own timeout would)
            with pytest.raises(QueryTimeout, match=r"did not .* within 0\.5 s"):
                board.query("SELECT * WHERE { ?s ?p ?o }", timeout_s=0.5)
        finally:
            stop.set()
            server.join()


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/", "127.0.0.1:7878", "http://"]
)
def test_only_http_endpoints_are_accepted(url: str) -> None:
    with pytest.raises(BlackboardError):
        SparqlEndpointBlackboard(url, url)


def test_triples_put_did_not_write_make_get_fail_clearly(server: str) -> None:
    post(f"{server}/update", "DROP ALL", "application/sparql-update")
    board = SparqlEndpointBlackboard.for_oxigraph(server)
    board.put(step(1), graph=G1)
    post(
        f"{server}/update",
        f'INSERT DATA {{ GRAPH <{G1}> {{ <{step(1)["@id"]}> <http://example.org/c> "red" }} }}',
        "application/sparql-update",
    )
    with pytest.raises(BlackboardError) as caught:
        board.get(step(1)["@id"], graph=G1)
    assert "did not write" in str(caught.value)
