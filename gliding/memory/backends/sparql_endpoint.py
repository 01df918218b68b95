"""Blackboard on a SPARQL 1.1 endpoint over HTTP, for several processes or hosts sharing one graph.

Speaks the SPARQL 1.1 Protocol with the standard library only (``http.client``): queries are
POSTed as ``application/sparql-query`` (answers read as SPARQL JSON results or N-Triples),
writes as ``application/sparql-update`` to the update endpoint. ``graph=`` on a query becomes the
``default-graph-uri`` parameter. Proxies from the environment are not used: the endpoint is
reached directly. Tested against ``oxigraph serve``, which runs each update request as one
transaction; start it without ``--union-default-graph`` so ``count()`` sees each triple once.

Concurrent writers: one client serialises its own puts (a lock), but Oxigraph's transactions do
not conflict with each other, so two *clients* putting the same node at the same moment can
leave the triples of both revisions (``get`` then raises BlackboardError). Writers of one IRI
must take turns across processes; that is the coherence directory's job.

``timeout_s`` bounds the whole request — connecting, sending, and reading the answer, which
Oxigraph streams row by row, so a slow query can keep sending for longer than any one read —
after which the connection is closed and QueryTimeout raised. That stops our side only: what
the server does with the evaluation is its own. ``oxigraph serve`` without ``--timeout-s``
evaluates on; with it, it cancels the evaluation at that limit (a cancellation token checked
inside the evaluator). Start it with ``--timeout-s`` no higher than the queries' timeout.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urlsplit

from pyoxigraph import NamedNode, QuerySolutions

from gliding.memory.backends.rdf_terms import (
    ntriples_triples,
    parse_results,
    replace_node_update,
    result_rows,
    triple_rows,
)
from gliding.memory.board.blackboard import (
    DEFAULT_MAX_LIMIT,
    DEFAULT_TIMEOUT_S,
    BlackboardError,
    QueryError,
    QueryTimeout,
    QueryTooLarge,
    Triple,
    Value,
    check_read_only_query,
    sparql_iri,
)
from gliding.memory.board.vocabulary import (
    VocabularyError,
    check_iri,
    node_from_terms,
    node_to_quads,
)

RESULTS_JSON = "application/sparql-results+json"
N_TRIPLES = "application/n-triples"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 16
_SOURCE = "the endpoint"


class SparqlEndpointBlackboard:
    """The Blackboard of a SPARQL endpoint; ``for_oxigraph(url)`` for ``oxigraph serve``."""

    def __init__(
        self,
        query_url: str,
        update_url: str,
        *,
        max_limit: int = DEFAULT_MAX_LIMIT,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """``timeout_s`` bounds put, get and count; queries take their own.

        Raises:
            BlackboardError: a URL is not http:// or https://.
        """
        for url in (query_url, update_url):
            if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
                raise BlackboardError(
                    f"not an http(s) endpoint URL: {url!r}",
                    hint="e.g. http://127.0.0.1:7878/query and http://127.0.0.1:7878/update",
                )
        self.query_url = query_url
        self.update_url = update_url
        self.max_limit = max_limit
        self._timeout_s = timeout_s
        self._headers = dict(headers or {})
        self._closed = False
        self._write_lock = threading.Lock()

    @classmethod
    def for_oxigraph(cls, base_url: str, **options: Any) -> SparqlEndpointBlackboard:
        """The endpoints of ``oxigraph serve`` at ``base_url`` (``/query`` and ``/update``).

        Raises:
            BlackboardError: ``base_url`` is not http:// or https://.
        """
        base = base_url.rstrip("/")
        return cls(f"{base}/query", f"{base}/update", **options)

    def put(self, node: Mapping[str, Any], *, graph: str) -> str:
        quads = node_to_quads(node, graph=graph)
        subject, graph_name = quads[0].subject, quads[0].graph_name
        assert isinstance(subject, NamedNode) and isinstance(graph_name, NamedNode)
        try:
            with self._write_lock:
                self._post(
                    self.update_url,
                    replace_node_update(subject, graph_name, quads),
                    content_type="application/sparql-update",
                    accept="*/*",
                    timeout_s=self._timeout_s,
                    what=f"write {subject.value} to {graph}",
                )
        except QueryError as exc:  # the endpoint refused our own update: not the caller's fault
            raise BlackboardError(
                exc.message, hint="is update_url a SPARQL 1.1 Update endpoint?"
            ) from exc
        return subject.value

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        text = f"SELECT ?p ?o WHERE {{ GRAPH {sparql_iri(graph)} {{ {sparql_iri(iri)} ?p ?o }} }}"
        solutions = self._select(text, what=f"read {iri} from {graph}")
        pairs = []
        for solution in solutions:
            predicate = solution["p"]
            if not isinstance(predicate, NamedNode):
                raise BlackboardError(f"the endpoint answered a non-IRI predicate for {iri}")
            pairs.append((predicate, solution["o"]))
        try:
            return node_from_terms(iri, pairs)
        except VocabularyError as exc:
            raise BlackboardError(
                f"{iri} in {graph} holds triples Blackboard.put did not write: {exc.message}",
                hint="only Blackboard.put should write to the blackboard's graphs",
            ) from exc

    def query(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None,
        isolated: bool = True,
    ) -> list[dict[str, Value]]:
        # every query is evaluated by the server, another process: isolated either way
        checked = check_read_only_query(sparql, max_limit=self.max_limit)
        params = {"default-graph-uri": check_iri(graph, "graph")} if graph is not None else None
        if checked.form in ("CONSTRUCT", "DESCRIBE"):
            return triple_rows(self._triples(checked.text, timeout_s, params))
        body = self._post(
            self.query_url, checked.text, content_type="application/sparql-query",
            accept=RESULTS_JSON, timeout_s=timeout_s, what="run the query", params=params,
        )
        return result_rows(body, _SOURCE)

    def construct(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None,
        isolated: bool = True,
    ) -> list[Triple]:
        checked = check_read_only_query(sparql, max_limit=self.max_limit)
        if checked.form not in ("CONSTRUCT", "DESCRIBE"):
            raise QueryError(f"construct takes CONSTRUCT or DESCRIBE, not {checked.form}")
        params = {"default-graph-uri": check_iri(graph, "graph")} if graph is not None else None
        return self._triples(checked.text, timeout_s, params)

    def count(self, *, graph: str | None = None) -> int:
        if graph is None:
            where = "{ ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } }"
        else:
            where = f"GRAPH {sparql_iri(graph)} {{ ?s ?p ?o }}"
        solutions = list(self._select(f"SELECT (COUNT(*) AS ?n) WHERE {{ {where} }}", "count"))
        n = solutions[0]["n"] if solutions else None
        try:
            return int(getattr(n, "value", ""))
        except ValueError as exc:
            raise BlackboardError(f"the endpoint answered a count of {n!r}") from exc

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> SparqlEndpointBlackboard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SparqlEndpointBlackboard({self.query_url!r}, {self.update_url!r})"

    def _select(self, text: str, what: str) -> QuerySolutions:
        body = self._post(
            self.query_url, text, content_type="application/sparql-query", accept=RESULTS_JSON,
            timeout_s=self._timeout_s, what=what,
        )
        result = parse_results(body, _SOURCE)
        if not isinstance(result, QuerySolutions):
            raise BlackboardError(f"the endpoint answered a boolean to a SELECT ({what})")
        return result

    def _triples(
        self, text: str, timeout_s: float, params: dict[str, str] | None
    ) -> list[Triple]:
        body = self._post(
            self.query_url, text, content_type="application/sparql-query", accept=N_TRIPLES,
            timeout_s=timeout_s, what="run the query", params=params,
        )
        return ntriples_triples(body, _SOURCE)

    def _post(
        self,
        url: str,
        text: str,
        *,
        content_type: str,
        accept: str,
        timeout_s: float,
        what: str,
        params: dict[str, str] | None = None,
    ) -> bytes:
        """POST ``text`` to ``url`` and read the answer, all of it within ``timeout_s``."""
        if self._closed:
            raise BlackboardError(f"the blackboard {self.query_url} is closed")
        deadline = time.monotonic() + timeout_s
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if params:
            path += ("&" if parts.query else "?") + urlencode(params)
        kind = (http.client.HTTPSConnection if parts.scheme == "https"
                else http.client.HTTPConnection)
        connection = kind(parts.hostname or "", parts.port, timeout=timeout_s)
        headers = {**self._headers, "Content-Type": f"{content_type}; charset=utf-8",
                   "Accept": accept}
        try:
            connection.connect()
            sock = connection.sock  # kept: a closing response drops connection.sock
            connection.request("POST", path, body=text.encode("utf-8"), headers=headers)
            response = connection.getresponse()
            if response.status >= 300:
                detail = response.read(2000).decode("utf-8", "replace").strip()
                if response.status == 400:
                    raise QueryError(f"the endpoint refused to {what}: {detail}")
                raise BlackboardError(
                    f"the endpoint could not {what}: HTTP {response.status} {detail}")
            return _read_by(response, sock, deadline, what, timeout_s)
        except TimeoutError as exc:
            raise QueryTimeout(f"the endpoint did not {what} within {timeout_s} s") from exc
        except (ConnectionRefusedError, socket.gaierror) as exc:
            raise BlackboardError(
                f"cannot reach the endpoint {url} to {what}: {exc}",
                hint="check that the SPARQL server runs and the URL is right",
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise BlackboardError(f"cannot {what} at {url}: {exc}") from exc
        finally:
            connection.close()


def _read_by(response: http.client.HTTPResponse, sock: socket.socket | None, deadline: float,
             what: str, timeout_s: float) -> bytes:
    """The body of ``response``, read in chunks, each read given only the time left.

    Raises:
        TimeoutError: the deadline passed.
        QueryTooLarge: the body is longer than MAX_RESPONSE_BYTES.
    """
    body = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no whole answer within {timeout_s} s")
        if sock is not None:
            sock.settimeout(remaining)
        chunk = response.read1(_CHUNK)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES:
            raise QueryTooLarge(
                f"the endpoint answered more than {MAX_RESPONSE_BYTES} bytes to {what}",
                hint="narrow the query",
            )
