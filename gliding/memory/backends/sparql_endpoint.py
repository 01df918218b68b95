"""Blackboard on a SPARQL 1.1 endpoint over HTTP, for several processes or hosts sharing one graph.

Speaks the SPARQL 1.1 Protocol with the standard library only (``urllib.request``): queries are
POSTed as ``application/sparql-query`` (answers read as SPARQL JSON results or N-Triples),
writes as ``application/sparql-update`` to the update endpoint. ``graph=`` on a query becomes the
``default-graph-uri`` parameter. Proxies from the environment are ignored: the endpoint is
reached directly. Tested against ``oxigraph serve``, which runs each update request as one
transaction; start it without ``--union-default-graph`` so ``count()`` sees each triple once.

Concurrent writers: one client serialises its own puts (a lock), but Oxigraph's transactions do
not conflict with each other, so two *clients* putting the same node at the same moment can
leave the triples of both revisions (``get`` then raises BlackboardError). Writers of one IRI
must take turns across processes; that is the coherence directory's job.

``timeout_s`` is the socket timeout of the request (connect and each read); give the server its
own limit too (``oxigraph serve --timeout-s``) so abandoned queries stop there as well.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urlsplit

from pyoxigraph import (
    NamedNode,
    QueryBoolean,
    QueryResultsFormat,
    QuerySolutions,
    RdfFormat,
    parse,
    parse_query_results,
)

from gliding.memory.backends.rdf_terms import (
    replace_node_update,
    solution_rows,
    to_triple,
    triple_rows,
)
from gliding.memory.blackboard import (
    DEFAULT_MAX_LIMIT,
    DEFAULT_TIMEOUT_S,
    BlackboardError,
    QueryError,
    QueryTimeout,
    Triple,
    Value,
    check_read_only_query,
    sparql_iri,
)
from gliding.memory.vocabulary import VocabularyError, check_iri, node_from_terms, node_to_quads

RESULTS_JSON = "application/sparql-results+json"
N_TRIPLES = "application/n-triples"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


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
        self._opener: urllib.request.OpenerDirector | None = urllib.request.build_opener(
            urllib.request.ProxyHandler({})
        )
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
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None
    ) -> list[dict[str, Value]]:
        checked = check_read_only_query(sparql, max_limit=self.max_limit)
        params = {"default-graph-uri": check_iri(graph, "graph")} if graph is not None else None
        if checked.form in ("CONSTRUCT", "DESCRIBE"):
            return triple_rows(self._triples(checked.text, timeout_s, params))
        body = self._post(
            self.query_url, checked.text, content_type="application/sparql-query",
            accept=RESULTS_JSON, timeout_s=timeout_s, what="run the query", params=params,
        )
        result = self._parse_results(body)
        if isinstance(result, QueryBoolean):
            row: dict[str, Value] = {"boolean": bool(result)}
            return [row]
        return solution_rows(result, [v.value for v in result.variables])

    def construct(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None
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
        self._opener = None

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
        result = self._parse_results(body)
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
        try:
            return [to_triple(t) for t in parse(body, format=RdfFormat.N_TRIPLES)]
        except (SyntaxError, ValueError) as exc:
            raise BlackboardError(f"the endpoint answered bad N-Triples: {exc}") from exc

    @staticmethod
    def _parse_results(body: bytes) -> QuerySolutions | QueryBoolean:
        try:
            return parse_query_results(body, format=QueryResultsFormat.JSON)
        except (SyntaxError, ValueError) as exc:
            raise BlackboardError(f"the endpoint answered bad SPARQL JSON results: {exc}") from exc

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
        if self._opener is None:
            raise BlackboardError(f"the blackboard {self.query_url} is closed")
        if params:
            url = f"{url}?{urlencode(params)}"
        request = urllib.request.Request(
            url,
            data=text.encode("utf-8"),
            method="POST",
            headers={
                **self._headers,
                "Content-Type": f"{content_type}; charset=utf-8",
                "Accept": accept,
            },
        )
        try:
            with self._opener.open(request, timeout=timeout_s) as response:
                body: bytes = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode("utf-8", "replace").strip()
            if exc.code == 400:
                raise QueryError(f"the endpoint refused to {what}: {detail}") from exc
            raise BlackboardError(
                f"the endpoint could not {what}: HTTP {exc.code} {detail}"
            ) from exc
        except TimeoutError as exc:
            raise QueryTimeout(f"the endpoint did not {what} within {timeout_s} s") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise QueryTimeout(
                    f"the endpoint did not {what} within {timeout_s} s"
                ) from exc
            raise BlackboardError(
                f"cannot reach the endpoint {url} to {what}: {exc.reason}",
                hint="check that the SPARQL server runs and the URL is right",
            ) from exc
        except OSError as exc:
            raise BlackboardError(f"cannot {what} at {url}: {exc}") from exc
        if len(body) > MAX_RESPONSE_BYTES:
            raise BlackboardError(
                f"the endpoint answered more than {MAX_RESPONSE_BYTES} bytes to {what}",
                hint="narrow the query",
            )
        return body
