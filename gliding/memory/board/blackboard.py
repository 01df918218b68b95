"""L2 blackboard port: the agents' shared RDF working memory, read with SPARQL.

Nodes are JSON-LD objects of ``vocabulary.py``; each ``put`` replaces the node's triples in one
named graph (a job's graph, usually ``gliding://job/<job>``). Backends live in
``memory/backends/``: ``oxigraph_embedded`` (on-disk pyoxigraph, the default) and
``sparql_endpoint`` (any SPARQL 1.1 endpoint, e.g. ``oxigraph serve``, over HTTP).

Writes happen only through ``put``. Queries are read-only by construction (backends evaluate
them as queries, never as updates) and, before that, ``check_read_only_query`` refuses update
keywords and SERVICE (which would make the store fetch remote data) and caps the LIMIT. Values
go into query templates only through ``sparql_iri`` and ``sparql_literal``, which escape or
refuse, so no value can change a query's structure.

A query that runs past its ``timeout_s`` is stopped there, with whatever it allocated: the
embedded backend evaluates each query in a child process it kills at the deadline, with a
memory cap (``backends/query_process.py``); the endpoint backend stops waiting at the deadline
and leaves the server to stop the evaluation (``oxigraph serve --timeout-s``). Only the
blackboard's own template queries (recall's graph step, loading what earlier jobs wrote) may
ask for ``isolated=False``: cheaper, evaluated in this process, and only waited for until
their timeout.

The blackboard keeps the current state only; the caller archives every revision in L0
(``vocabulary.to_jsonld`` gives its canonical bytes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gliding.errors import GlidingError, UsageError
from gliding.memory.board.vocabulary import (
    XSD,
    VocabularyError,
    check_iri,
    check_number,
    check_text,
)

DEFAULT_MAX_LIMIT = 1000
DEFAULT_TIMEOUT_S = 10.0
MAX_QUERY_CHARS = 100_000


class BlackboardError(GlidingError):
    """The blackboard store could not be opened, read or written (I/O, endpoint, bad reply)."""

    code = "blackboard.failed"


class QueryTimeout(BlackboardError):
    """A query ran past its ``timeout_s``; it has been stopped, not left running."""

    code = "blackboard.timeout"


class QueryTooLarge(BlackboardError):
    """A query needed more memory than a backend gives one query, or answered too many bytes;
    it has been stopped."""

    code = "blackboard.too_large"


class QueryError(UsageError):
    """A query that is refused (not read-only, SERVICE, bad LIMIT) or does not parse."""

    code = "blackboard.query_invalid"


@dataclass(frozen=True)
class Ref:
    """An IRI (or a blank node, ``_:label``) in a query result."""

    iri: str


@dataclass(frozen=True)
class TypedLiteral:
    """A literal without a plain Python value: a language tag or another datatype."""

    value: str
    datatype: str
    language: str | None = None


Value = Ref | TypedLiteral | str | int | float | bool
"""A result term: xsd strings, integers, doubles, decimals and booleans become Python values."""


@dataclass(frozen=True)
class Triple:
    subject: Ref
    predicate: Ref
    object: Value


class Blackboard(Protocol):
    """The L2 store. Backends are safe to share between threads."""

    def put(self, node: Mapping[str, Any], *, graph: str) -> str:
        """Validate ``node`` and replace its triples in ``graph`` atomically; return its IRI.

        Only the node's own triples (those with its IRI as subject) in ``graph`` are replaced;
        triples of other nodes pointing at it and other graphs are left alone.

        Raises:
            VocabularyError: the node or ``graph`` is not valid.
            BlackboardError: the store could not be written; nothing was changed.
        """
        ...

    def get(self, iri: str, *, graph: str) -> dict[str, Any] | None:
        """The node ``iri`` in ``graph`` in normal form (``vocabulary.validate_node``), or None.

        Raises:
            VocabularyError: ``iri`` or ``graph`` is not a valid IRI.
            BlackboardError: the store could not be read, or holds triples put did not write.
        """
        ...

    def query(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None,
        isolated: bool = True,
    ) -> list[dict[str, Value]]:
        """Run a read-only SELECT, ASK, CONSTRUCT or DESCRIBE query.

        SELECT gives one dict per solution (variable name without ``?`` -> Value; unbound
        variables left out); ASK gives ``[{"boolean": bool}]``; CONSTRUCT and DESCRIBE give one
        ``{"subject", "predicate", "object"}`` dict per triple. With ``graph`` the query's
        default graph is that named graph; without it, the store's default graph (named graphs
        are reached with GRAPH). The LIMIT is added or capped to the backend's ``max_limit``.

        ``isolated`` (the default: any query a model, a user or a client wrote) evaluates the
        query where it can be stopped — past ``timeout_s``, and past the backend's memory bound
        for one query. ``isolated=False`` is for our own template queries, written to be cheap:
        a backend may evaluate them in this process, where one that times out is only no longer
        waited for.

        Raises:
            QueryError: refused by ``check_read_only_query`` or rejected by the parser.
            VocabularyError: ``graph`` is not a valid IRI.
            QueryTimeout: the query ran past ``timeout_s``; it no longer runs here.
            QueryTooLarge: the query needed more memory than the backend allows one query, or
                its answer was too long; it no longer runs here.
            BlackboardError: the store could not be read.
        """
        ...

    def construct(
        self, sparql: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, graph: str | None = None,
        isolated: bool = True,
    ) -> list[Triple]:
        """Run a read-only CONSTRUCT or DESCRIBE query and return its triples (``isolated`` as
        for ``query``).

        Raises:
            QueryError: not a CONSTRUCT or DESCRIBE, refused, or rejected by the parser.
            VocabularyError: ``graph`` is not a valid IRI.
            QueryTimeout: the query ran past ``timeout_s``; it no longer runs here.
            QueryTooLarge: as for ``query``.
            BlackboardError: the store could not be read.
        """
        ...

    def count(self, *, graph: str | None = None) -> int:
        """How many triples the store holds in all graphs, or in the named graph ``graph``.

        Raises:
            VocabularyError: ``graph`` is not a valid IRI.
            BlackboardError: the store could not be read.
        """
        ...

    def close(self) -> None:
        """Release the store; further calls raise BlackboardError. Closing twice is a no-op."""
        ...


@dataclass(frozen=True)
class ReadOnlyQuery:
    """A query that passed ``check_read_only_query``: its text with the LIMIT in place."""

    text: str
    form: str  # SELECT, ASK, CONSTRUCT or DESCRIBE
    limit: int | None  # None for ASK


_FORMS = frozenset({"SELECT", "ASK", "CONSTRUCT", "DESCRIBE"})
_FORBIDDEN = frozenset(
    {"INSERT", "DELETE", "LOAD", "CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY", "WITH",
     "USING", "SERVICE"}
)
# One SPARQL token per match. Strings and IRIs are whole tokens, so keywords inside them do not
# count; escapes inside them are skipped the way the SPARQL grammar reads them.
_TOKEN_RE = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<comment>\#[^\n\r]*)
    | (?P<string>'''(?:[^'\\]|\\.|'(?!''))*'''|\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\"
                 |'(?:[^'\\\n\r]|\\.)*'|"(?:[^"\\\n\r]|\\.)*")
    | (?P<iri><(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*>)
    | (?P<word>[^\s{}()\[\],;<>=!|&+*/^"'\#]+)
    | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_CODEPOINT_RE = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    start: int
    depth: int  # brace depth the token sits at


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    depth = 0
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup or "punct"
        if kind in ("space", "comment"):
            continue
        tok = m.group()
        if tok == "}":
            depth -= 1
        tokens.append(_Token(kind, tok, m.start(), depth))
        if tok == "{":
            depth += 1
    return tokens


def _form_of(tokens: list[_Token], seen_as: str) -> str:
    """The query form, after refusing updates and SERVICE anywhere outside strings and IRIs."""
    form = None
    for tok in tokens:
        if tok.kind in ("string", "iri"):
            continue
        if "\\u" in tok.text or "\\U" in tok.text:
            raise QueryError(
                f"refused{seen_as}: a \\u escape outside a string or IRI",
                hint="write keywords and names out; escapes belong inside strings",
            )
        word = tok.text.upper()
        if tok.kind == "word" and word in _FORBIDDEN:
            raise QueryError(
                f"refused{seen_as}: {word} is not allowed; the blackboard answers read-only "
                "queries and never runs SERVICE",
                hint="queries only read: use SELECT, ASK, CONSTRUCT or DESCRIBE",
            )
        if form is None and tok.kind == "word" and word not in ("PREFIX", "BASE") and not (
            tok.text.endswith(":")
        ):
            form = word
    if form not in _FORMS:
        shown = form if form is None or len(form) <= 40 else form[:39] + "…"
        raise QueryError(
            f"not a read-only query{seen_as}: it starts with {shown!r}",
            hint="use SELECT, ASK, CONSTRUCT or DESCRIBE",
        )
    return form


def _decode_codepoint(match: re.Match[str]) -> str:
    code = int(match.group(1) or match.group(2), 16)
    return chr(code) if code <= 0x10FFFF else match.group()  # not a code point: left as text


def check_read_only_query(text: str, *, max_limit: int) -> ReadOnlyQuery:
    """Refuse anything but a read-only query and put a LIMIT of at most ``max_limit`` on it.

    Refused: update operations (INSERT, DELETE, LOAD, CLEAR, DROP, CREATE, ADD, MOVE, COPY,
    WITH, USING), SERVICE clauses, ``\\u`` escapes outside strings and IRIs, and — for endpoints
    that decode ``\\u`` escapes before parsing, as the SPARQL text allows — any of these once
    the escapes are decoded. An outer LIMIT above ``max_limit`` is lowered to it; a missing
    one is added (before a trailing VALUES block). ASK queries get no LIMIT.

    Raises:
        QueryError: the query is refused, too long, or its LIMIT is not a whole number.
    """
    if not isinstance(text, str) or not text.strip():
        raise QueryError("empty query")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"query longer than {MAX_QUERY_CHARS} characters")
    if max_limit < 1:
        raise QueryError(f"max_limit must be at least 1, got {max_limit}")
    tokens = _tokens(text)
    form = _form_of(tokens, "")
    decoded = _CODEPOINT_RE.sub(_decode_codepoint, text)
    if decoded != text:
        _form_of(_tokens(decoded), " (with \\u escapes decoded)")
    if form == "ASK":
        return ReadOnlyQuery(text, form, None)
    for i, tok in enumerate(tokens):
        if tok.depth != 0 or tok.kind != "word" or tok.text.upper() != "LIMIT":
            continue
        value = tokens[i + 1] if i + 1 < len(tokens) else None
        if value is None or value.kind != "word" or not value.text.isascii() or not (
            value.text.isdigit()
        ):
            raise QueryError("LIMIT must be followed by a whole number")
        limit = min(int(value.text), max_limit)
        end = value.start + len(value.text)
        return ReadOnlyQuery(text[: value.start] + str(limit) + text[end:], form, limit)
    values = next(
        (t for t in tokens if t.depth == 0 and t.kind == "word" and t.text.upper() == "VALUES"),
        None,
    )
    if values is not None:
        capped = text[: values.start] + f"LIMIT {max_limit}\n" + text[values.start :]
    else:
        capped = text + f"\nLIMIT {max_limit}"
    return ReadOnlyQuery(capped, form, max_limit)


def sparql_iri(value: str) -> str:
    """``<value>`` for a query template, if ``value`` is an IRI the vocabulary allows.

    Raises:
        VocabularyError: not an absolute gliding:// or http(s):// IRI (see vocabulary.check_iri).
    """
    return f"<{check_iri(value)}>"


_ESCAPES = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r",
            ord("\t"): "\\t", ord("\b"): "\\b", ord("\f"): "\\f"}
for _c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029]:
    _ESCAPES.setdefault(_c, f"\\u{_c:04X}")


def sparql_literal(value: str | int | float | bool) -> str:
    """A SPARQL literal that denotes exactly ``value``, typed the way ``put`` stores it.

    Strings are quoted with every ``\\``, ``"`` and control character escaped; ints are
    xsd:integer, floats xsd:double, bools xsd:boolean.

    Raises:
        VocabularyError: another type, a NaN or infinite float, an int past 64 bits, a string
            with a lone surrogate or longer than vocabulary.MAX_LITERAL_CHARS.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + check_text(value, "value").translate(_ESCAPES) + '"'
    if isinstance(value, int):
        return f'"{check_number(value, "value")}"^^<{XSD}integer>'
    if isinstance(value, float):
        return f'"{check_number(value, "value")!r}"^^<{XSD}double>'
    raise VocabularyError(
        f"cannot put a {type(value).__name__} into a query",
        hint="pass a str, int, float or bool; IRIs go through sparql_iri",
    )
