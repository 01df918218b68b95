"""Blackboard on an embedded pyoxigraph Store: on disk (RocksDB) by default, in memory for tests.

One process owns an on-disk store (RocksDB takes a lock on the directory); for several processes
or hosts, serve the directory with ``oxigraph serve`` and use ``sparql_endpoint``. Writes are
single SPARQL updates, which Oxigraph applies as one transaction, one at a time (a lock: see
``_write_lock``). A write that returned is in
RocksDB's write-ahead log and survives a killed process; after a power loss the blackboard is
rebuilt from the revisions archived in L0.

Queries are evaluated on daemon threads so ``timeout_s`` holds for the caller: pyoxigraph cannot
cancel a running query, so one that times out finishes in the background while holding one of
``query_threads`` slots; when every slot is held, new queries wait for a slot within their own
timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, cast

from pyoxigraph import NamedNode, QueryBoolean, QuerySolutions, Store

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
    ReadOnlyQuery,
    Triple,
    Value,
    check_read_only_query,
)
from gliding.memory.vocabulary import VocabularyError, check_iri, node_from_terms, node_to_quads

T = TypeVar("T")


class OxigraphBlackboard:
    """The embedded Blackboard. Open it with ``open(path)`` or ``in_memory()``; close it."""

    def __init__(
        self, store: Store, *, location: str, max_limit: int, query_threads: int = 4
    ) -> None:
        self._store: Store | None = store
        self._location = location
        self.max_limit = max_limit
        self._slots = threading.BoundedSemaphore(query_threads)
        # Oxigraph's update transactions do not conflict with each other: two concurrent puts
        # of one node could both delete the old triples and both insert, merging two
        # revisions. This process owns the store, so one lock serialises every put.
        self._write_lock = threading.Lock()

    @classmethod
    def open(
        cls, path: Path | str, *, max_limit: int = DEFAULT_MAX_LIMIT, query_threads: int = 4
    ) -> OxigraphBlackboard:
        """Open (creating if needed) the store in directory ``path``.

        Raises:
            BlackboardError: the directory cannot be used, e.g. another process holds it.
        """
        try:
            store = Store(str(path))
        except OSError as exc:
            raise BlackboardError(
                f"cannot open the blackboard store in {path}: {exc}",
                hint="if another process holds it, share it with `oxigraph serve --location "
                f"{path}` and the SPARQL endpoint backend",
            ) from exc
        return cls(store, location=str(path), max_limit=max_limit, query_threads=query_threads)

    @classmethod
    def in_memory(
        cls, *, max_limit: int = DEFAULT_MAX_LIMIT, query_threads: int = 4
    ) -> OxigraphBlackboard:
        """A store that lives in memory only, gone when closed; for tests and benchmarks."""
        return cls(Store(), location=":memory:", max_limit=max_limit, query_threads=query_threads)

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
            with self._write_lock:
                self.store.update(update)
        except (OSError, SyntaxError, ValueError, RuntimeError) as exc:
            raise BlackboardError(f"cannot write {subject.value} to {graph}: {exc}") from exc
        return subject.value

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        subject = NamedNode(check_iri(iri))
        graph_name = NamedNode(check_iri(graph, "graph"))
        try:
            pairs = [
                (q.predicate, q.object)
                for q in self.store.quads_for_pattern(subject, None, None, graph_name)
            ]
        except OSError as exc:
            raise BlackboardError(f"cannot read {iri} from {graph}: {exc}") from exc
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
        result = self._evaluate(checked, graph, timeout_s)
        if checked.form in ("CONSTRUCT", "DESCRIBE"):
            return triple_rows(cast(list[Triple], result))
        return cast(list[dict[str, Value]], result)

    def construct(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None
    ) -> list[Triple]:
        checked = check_read_only_query(sparql, max_limit=self.max_limit)
        if checked.form not in ("CONSTRUCT", "DESCRIBE"):
            raise QueryError(f"construct takes CONSTRUCT or DESCRIBE, not {checked.form}")
        return cast(list[Triple], self._evaluate(checked, graph, timeout_s))

    def count(self, *, graph: str | None = None) -> int:
        try:
            if graph is None:
                return len(self.store)
            graph_name = NamedNode(check_iri(graph, "graph"))
            return sum(1 for _ in self.store.quads_for_pattern(None, None, None, graph_name))
        except OSError as exc:
            raise BlackboardError(f"cannot count the triples of {self._location}: {exc}") from exc

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None and self._location != ":memory:":
            try:
                store.flush()
            except OSError as exc:
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

    def _evaluate(
        self, checked: ReadOnlyQuery, graph: str | None, timeout_s: float
    ) -> list[dict[str, Value]] | list[Triple]:
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
        if not self._slots.acquire(timeout=max(0.0, timeout_s)):
            raise QueryTimeout(
                f"no query slot freed within {timeout_s} s: earlier queries that timed out are "
                "still running",
                hint="narrow the queries (LIMIT, fewer unbound patterns) or raise timeout_s",
            )
        done = threading.Event()
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, work()))
            except BaseException as exc:  # handed to the waiting caller, who re-raises it
                outcome.append((False, exc))
            finally:
                self._slots.release()
                done.set()

        threading.Thread(target=run, name="blackboard-query", daemon=True).start()
        if not done.wait(max(0.0, deadline - time.monotonic())):
            raise QueryTimeout(
                f"the query ran past {timeout_s} s",
                hint="narrow the query (LIMIT, fewer unbound patterns) or raise timeout_s",
            )
        ok, value = outcome[0]
        if ok:
            return cast(T, value)
        raise value
