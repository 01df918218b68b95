"""Blackboard on an embedded pyoxigraph Store: on disk (RocksDB) by default, in memory for tests.

One process owns an on-disk store (RocksDB takes a lock on the directory); for several processes
or hosts, serve the directory with ``oxigraph serve`` and use ``sparql_endpoint``. Writes are
single SPARQL updates, which Oxigraph applies as one transaction, one at a time (a lock: see
``_lock``). A write that returned is in RocksDB's write-ahead log and survives a killed
process; after a power loss the blackboard is rebuilt from the revisions archived in L0.

Each query (``query``, ``construct``) is evaluated in a child process forked for it
(``query_process.py``): pyoxigraph cannot cancel a running query, so stopping the child is the
only real stop. At its ``timeout_s`` the child is killed, and each child may grow by at most
``query_memory_bytes``; at most ``max_queries`` children run at once (a query waits for a turn
within its own timeout), so together they hold at most ``max_queries * query_memory_bytes``
and a timed-out query gives its turn back at its deadline. The fork costs milliseconds
(numbers in ``docs/memory.md``), so our own template queries (``isolated=False``: recall's graph
step, ``KnowledgeMemory.load``) run in this process instead, on daemon threads with their own
``max_queries`` slots; one of those that times out is only no longer waited for and holds its
slot until it ends. ``get`` and ``count`` read in this process too: pattern reads of our own,
bounded by a node or the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

from pyoxigraph import (
    NamedNode,
    QueryBoolean,
    QueryResultsFormat,
    QuerySolutions,
    QueryTriples,
    RdfFormat,
    Store,
)

from gliding.memory.backends.query_process import evaluate_forked
from gliding.memory.backends.rdf_terms import (
    ntriples_triples,
    replace_node_update,
    result_rows,
    solution_rows,
    to_triple,
    triple_rows,
)
from gliding.memory.board.blackboard import (
    DEFAULT_MAX_LIMIT,
    DEFAULT_TIMEOUT_S,
    BlackboardError,
    QueryError,
    QueryTimeout,
    ReadOnlyQuery,
    Triple,
    Value,
    check_read_only_query,
)
from gliding.memory.board.vocabulary import (
    VocabularyError,
    check_iri,
    node_from_terms,
    node_to_quads,
)

DEFAULT_MAX_QUERIES = 4
DEFAULT_QUERY_MEMORY_BYTES = 1 << 30  # what one query may allocate past the process's own size
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # one query's answer, as the endpoint backend allows
_CHILD = "the query process"
T = TypeVar("T")


class OxigraphBlackboard:
    """The embedded Blackboard. Open it with ``open(path)`` or ``in_memory()``; close it."""

    def __init__(
        self,
        store: Store,
        *,
        location: str,
        max_limit: int,
        max_queries: int = DEFAULT_MAX_QUERIES,
        query_memory_bytes: int = DEFAULT_QUERY_MEMORY_BYTES,
    ) -> None:
        self._store: Store | None = store
        self._location = location
        self.max_limit = max_limit
        self.query_memory_bytes = query_memory_bytes
        self._slots = threading.BoundedSemaphore(max_queries)  # query children
        self._local_slots = threading.BoundedSemaphore(max_queries)  # isolated=False threads
        # Oxigraph's update transactions do not conflict with each other: two concurrent puts
        # of one node could both delete the old triples and both insert, merging two
        # revisions. This process owns the store, so one lock serialises every put. get and
        # count hold it too, and so does a query's fork: no use of the store by this process
        # is half-done in a forked child (query_process.py).
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        max_limit: int = DEFAULT_MAX_LIMIT,
        max_queries: int = DEFAULT_MAX_QUERIES,
        query_memory_bytes: int = DEFAULT_QUERY_MEMORY_BYTES,
    ) -> OxigraphBlackboard:
        """Open (creating if needed) the store in directory ``path``.

        Raises:
            BlackboardError: the directory cannot be used, e.g. another process holds it, or
                the store in it is damaged (RocksDB's ``Corruption``, a RuntimeError).
        """
        try:
            store = Store(str(path))
        except OSError as exc:
            raise BlackboardError(
                f"cannot open the blackboard store in {path}: {exc}",
                hint="if another process holds it, share it with `oxigraph serve --location "
                f"{path}` and the SPARQL endpoint backend",
            ) from exc
        except RuntimeError as exc:  # what pyoxigraph raises for a damaged store
            raise BlackboardError(
                f"the blackboard store in {path} is damaged: {exc}",
                hint=f"move {path} aside: the next job makes a new, empty one (the job "
                "archives still hold every node revision, as JSON-LD)",
            ) from exc
        return cls(store, location=str(path), max_limit=max_limit, max_queries=max_queries,
                   query_memory_bytes=query_memory_bytes)

    @classmethod
    def in_memory(
        cls,
        *,
        max_limit: int = DEFAULT_MAX_LIMIT,
        max_queries: int = DEFAULT_MAX_QUERIES,
        query_memory_bytes: int = DEFAULT_QUERY_MEMORY_BYTES,
    ) -> OxigraphBlackboard:
        """A store that lives in memory only, gone when closed; for tests and benchmarks."""
        return cls(Store(), location=":memory:", max_limit=max_limit, max_queries=max_queries,
                   query_memory_bytes=query_memory_bytes)

    @property
    def store(self) -> Store:
        """The open pyoxigraph Store (for bulk loading); raises BlackboardError once closed."""
        if self._store is None:
            raise BlackboardError(f"the blackboard {self._location} is closed")
        return self._store

    def put(self, node: Mapping[str, Any], *, graph: str) -> str:
        quads = node_to_quads(node, graph=graph)
        subject, graph_name = quads[0].subject, quads[0].graph_name
        assert isinstance(subject, NamedNode) and isinstance(graph_name, NamedNode)
        update = replace_node_update(subject, graph_name, quads)
        try:
            with self._lock:
                self.store.update(update)
        except (OSError, SyntaxError, ValueError, RuntimeError) as exc:
            raise BlackboardError(f"cannot write {subject.value} to {graph}: {exc}") from exc
        return subject.value

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        subject = NamedNode(check_iri(iri))
        graph_name = NamedNode(check_iri(graph, "graph"))
        try:
            with self._lock:
                pairs = [
                    (q.predicate, q.object)
                    for q in self.store.quads_for_pattern(subject, None, None, graph_name)
                ]
        except (OSError, RuntimeError) as exc:  # RuntimeError: a damaged store
            raise BlackboardError(f"cannot read {iri} from {graph}: {exc}") from exc
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
        checked = check_read_only_query(sparql, max_limit=self.max_limit)
        if not isolated:
            result = self._here(checked, graph, timeout_s)
            if checked.form in ("CONSTRUCT", "DESCRIBE"):
                return triple_rows(cast(list[Triple], result))
            return cast(list[dict[str, Value]], result)
        body = self._isolated(checked, graph, timeout_s)
        if checked.form in ("CONSTRUCT", "DESCRIBE"):
            return triple_rows(ntriples_triples(body, _CHILD))
        return result_rows(body, _CHILD)

    def construct(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None,
        isolated: bool = True,
    ) -> list[Triple]:
        checked = check_read_only_query(sparql, max_limit=self.max_limit)
        if checked.form not in ("CONSTRUCT", "DESCRIBE"):
            raise QueryError(f"construct takes CONSTRUCT or DESCRIBE, not {checked.form}")
        if not isolated:
            return cast(list[Triple], self._here(checked, graph, timeout_s))
        return ntriples_triples(self._isolated(checked, graph, timeout_s), _CHILD)

    def count(self, *, graph: str | None = None) -> int:
        graph_name = NamedNode(check_iri(graph, "graph")) if graph is not None else None
        try:
            with self._lock:
                if graph_name is None:
                    return len(self.store)
                return sum(1 for _ in self.store.quads_for_pattern(None, None, None, graph_name))
        except (OSError, RuntimeError) as exc:  # RuntimeError: a damaged store
            raise BlackboardError(f"cannot count the triples of {self._location}: {exc}") from exc

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None and self._location != ":memory:":
            try:
                store.flush()
            except (OSError, RuntimeError) as exc:  # RuntimeError: a damaged store
                raise BlackboardError(f"cannot flush {self._location}: {exc}") from exc

    def __enter__(self) -> OxigraphBlackboard:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OxigraphBlackboard({self._location!r})"

    def _isolated(self, checked: ReadOnlyQuery, graph: str | None, timeout_s: float) -> bytes:
        """The answer of ``checked`` as SPARQL JSON results (SELECT, ASK) or N-Triples
        (CONSTRUCT, DESCRIBE), evaluated in a child process that is gone by ``timeout_s``."""
        store = self.store
        default_graph = NamedNode(check_iri(graph, "graph")) if graph is not None else None
        deadline = time.monotonic() + timeout_s

        def work() -> bytes:  # runs in the child
            result = store.query(checked.text, default_graph=default_graph)
            if isinstance(result, QueryTriples):
                return bytes(result.serialize(format=RdfFormat.N_TRIPLES) or b"")
            return bytes(result.serialize(format=QueryResultsFormat.JSON) or b"")

        if not self._slots.acquire(timeout=max(0.0, timeout_s)):
            raise QueryTimeout(
                f"no query turn came within {timeout_s} s: other queries are running",
                hint="narrow the queries (LIMIT, fewer unbound patterns) or raise timeout_s",
            )
        try:
            return evaluate_forked(
                work, timeout_s=timeout_s, deadline=deadline,
                memory_bytes=self.query_memory_bytes, max_bytes=MAX_ANSWER_BYTES,
                fork_lock=self._lock,
            )
        finally:
            self._slots.release()

    def _here(
        self, checked: ReadOnlyQuery, graph: str | None, timeout_s: float
    ) -> list[dict[str, Value]] | list[Triple]:
        """Rows (SELECT, ASK) or triples of ``checked``, evaluated in this process."""
        store = self.store
        default_graph = NamedNode(check_iri(graph, "graph")) if graph is not None else None

        def evaluate() -> list[dict[str, Value]] | list[Triple]:
            result = store.query(checked.text, default_graph=default_graph)
            if isinstance(result, QueryBoolean):
                row: dict[str, Value] = {"boolean": bool(result)}
                return [row]
            if isinstance(result, QuerySolutions):
                return solution_rows(result, [v.value for v in result.variables])
            return [to_triple(t) for t in result]

        try:
            return self._in_thread(evaluate, timeout_s)
        except (SyntaxError, ValueError) as exc:
            raise QueryError(f"the query does not parse or evaluate: {exc}") from exc
        except (OSError, RuntimeError) as exc:
            raise BlackboardError(f"the query failed on {self._location}: {exc}") from exc

    def _in_thread(self, work: Callable[[], T], timeout_s: float) -> T:
        """Run ``work`` on a daemon thread and wait at most ``timeout_s`` for it."""
        deadline = time.monotonic() + timeout_s
        if not self._local_slots.acquire(timeout=max(0.0, timeout_s)):
            raise QueryTimeout(
                f"no query slot freed within {timeout_s} s: earlier template queries that "
                "timed out are still running",
                hint="raise timeout_s; these queries are the blackboard's own",
            )
        done = threading.Event()
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, work()))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller, who re-raises it
                outcome.append((False, exc))
            finally:
                self._local_slots.release()
                done.set()

        threading.Thread(target=run, name="blackboard-query", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            raise QueryTimeout(
                f"the query ran past {timeout_s} s",
                hint="raise timeout_s; it finishes in the background",
            )
        ok, value = outcome[0]
        if ok:
            return cast(T, value)
        raise value
