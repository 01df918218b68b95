"""The blackboard's JSON-LD vocabulary: node types, properties, validation and the RDF mapping.

A blackboard node is a compact JSON-LD object read against the inline ``CONTEXT`` below::

    {"@id": "gliding://job/j1/step/s2", "@type": "Step", "text": "write hello.py",
     "partOf": "gliding://job/j1/plan/p1", "dependsOn": ["gliding://job/j1/step/s1"]}

``@context`` may be left out; if present it must be ``CONTEXT`` itself. Remote contexts are
never fetched: this module maps nodes to RDF quads with its own code (pyoxigraph terms), never
with a JSON-LD processor, so nothing here touches the network. The vocabulary is closed: an
unknown key, type or value kind is refused with a VocabularyError that names every problem.
``docs/vocabulary.md`` documents every type and property.
"""

from __future__ import annotations

import json
import math
import re
import typing
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyoxigraph import Literal, NamedNode, Quad

from gliding.errors import UsageError

VOCAB_VERSION = "1"
NS = "https://gliding.dev/ns/v1#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
XSD = "http://www.w3.org/2001/XMLSchema#"
MAX_IRI_CHARS = 4096
MAX_LITERAL_CHARS = 100_000
_I64 = 2**63


PropertyKind = typing.Literal["iri", "string", "datetime", "number", "integer", "boolean"]


class VocabularyError(UsageError):
    """A node, IRI or value that the blackboard vocabulary does not allow."""

    code = "vocabulary.invalid"


@dataclass(frozen=True)
class Property:
    """One property: ``iri`` values are IRIs (relations), the other kinds are literals."""

    name: str
    kind: PropertyKind
    many: bool = False

    @property
    def iri(self) -> str:
        return NS + self.name


@dataclass(frozen=True)
class NodeType:
    """One node type: the properties it requires and, for some, the statuses it allows."""

    name: str
    required: tuple[str, ...]
    statuses: frozenset[str] | None = None

    @property
    def iri(self) -> str:
        return NS + self.name


PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        Property("partOf", "iri"),
        Property("dependsOn", "iri", many=True),
        Property("doneBy", "iri", many=True),
        Property("produced", "iri", many=True),
        Property("mentions", "iri", many=True),
        Property("about", "iri", many=True),
        Property("derivedFrom", "iri", many=True),
        Property("supersedes", "iri"),
        Property("speaker", "iri"),
        Property("name", "string"),
        Property("text", "string"),
        Property("path", "string"),
        Property("status", "string"),
        Property("summary", "string"),
        Property("role", "string"),
        Property("createdAt", "datetime"),
        Property("sessionDate", "string"),
        Property("importance", "number"),
        Property("line", "integer"),
        Property("lineStart", "integer"),
        Property("lineEnd", "integer"),
        Property("source", "string"),
        Property("position", "integer"),
        Property("resolved", "boolean"),
    )
}

TYPES: dict[str, NodeType] = {
    t.name: t
    for t in (
        NodeType("Job", ("name",)),
        NodeType("Plan", ("partOf",)),
        NodeType("Step", ("text", "partOf"), frozenset({"todo", "doing", "done", "failed",
                                                          "skipped"})),
        NodeType("Artifact", ("path",)),
        NodeType("CheckReport", ("status", "about"), frozenset({"pass", "fail", "warning"})),
        NodeType("Decision", ("status",), frozenset({"done", "another_cycle", "escalate"})),
        NodeType("Turn", ("role",)),
        NodeType("ToolResult", ("name",)),
        NodeType("File", ("path",)),
        NodeType("Symbol", ("name",)),
        NodeType("Error", ("text",)),
        NodeType("Fact", ("text",)),
        NodeType("Person", ("name",)),
        NodeType("Event", ("text",)),
        NodeType("Entity", ("name",)),
    )
}

_XSD_OF_KIND = {"string": "string", "datetime": "string", "integer": "integer"}


def _context() -> dict[str, Any]:
    ctx: dict[str, Any] = {"@version": 1.1, "gl": NS, "xsd": XSD}
    for t in TYPES:
        ctx[t] = f"gl:{t}"
    for p in PROPERTIES.values():
        if p.kind == "iri":
            term: dict[str, Any] = {"@id": f"gl:{p.name}", "@type": "@id"}
        elif p.kind in _XSD_OF_KIND:
            term = {"@id": f"gl:{p.name}", "@type": f"xsd:{_XSD_OF_KIND[p.kind]}"}
        else:  # numbers and booleans keep JSON's own typing: integer, double, boolean
            term = {"@id": f"gl:{p.name}"}
        if p.many:
            term["@container"] = "@set"
        ctx[p.name] = term
    return ctx


CONTEXT: dict[str, Any] = _context()
"""The inline ``@context`` of vocabulary version ``VOCAB_VERSION``; never fetched from anywhere."""

_IRI_RE = re.compile(r"^(?:gliding|https?)://[^\s<>\"{}|\\^`]+$")
_BAD_CATEGORIES = ("C", "Z")  # control, format, surrogate, private use, unassigned; separators
_ASCII_CONTROL = re.compile(r"[\x00-\x20\x7f]")  # the only C/Z characters in ASCII


def check_iri(value: object, what: str = "IRI") -> str:
    """Return ``value`` if it is an absolute gliding://, http:// or https:// IRI.

    Refused: other schemes, relative IRIs, spaces and any other whitespace, ``< > " { } | ^ `
    \\``, control and format characters, lone surrogates, more than MAX_IRI_CHARS characters.

    Raises:
        VocabularyError: ``value`` is not such an IRI (the message says why).
    """
    if not isinstance(value, str):
        raise VocabularyError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_IRI_CHARS:
        raise VocabularyError(f"{what} is longer than {MAX_IRI_CHARS} characters")
    if not _IRI_RE.match(value) or (
        _ASCII_CONTROL.search(value) if value.isascii() else any(
            unicodedata.category(c).startswith(_BAD_CATEGORIES) for c in value)
    ):
        raise VocabularyError(
            f"{what} {value!r} is not an absolute IRI",
            hint="use gliding://job/<job>/... or http(s)://...; percent-encode spaces, quotes, "
            "<, >, {, }, |, ^, `, backslashes and control characters",
        )
    try:
        NamedNode(value)
    except ValueError as exc:
        raise VocabularyError(f"{what} {value!r} is not a valid IRI: {exc}") from exc
    return value


def validate_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``node`` against the vocabulary and return its normal form.

    The normal form has no ``@context``, keys in sorted order, and every many-valued property as
    a sorted list without duplicates (empty lists left out) — what ``Blackboard.get`` returns.

    Raises:
        VocabularyError: listing every problem (unknown key or type, missing required
            property, bad IRI, wrong value kind, status outside the type's list).
    """
    if not isinstance(node, Mapping):
        raise VocabularyError(f"a node must be a JSON object, got {type(node).__name__}")
    problems: list[str] = []
    if "@context" in node and node["@context"] != CONTEXT:
        problems.append(
            "@context must be left out or be vocabulary.CONTEXT (remote contexts are never "
            "fetched)"
        )
    iri = node.get("@id")
    try:
        check_iri(iri, "@id")
    except VocabularyError as exc:
        problems.append(exc.message)
    type_name = node.get("@type")
    node_type = TYPES.get(type_name) if isinstance(type_name, str) else None
    if node_type is None:
        problems.append(f"@type must be one of {', '.join(TYPES)}; got {type_name!r}")
    out: dict[str, Any] = {"@id": iri, "@type": type_name}
    for key, value in node.items():
        if key in ("@id", "@type", "@context"):
            continue
        prop = PROPERTIES.get(key)
        if prop is None:
            problems.append(f"unknown property {key!r}")
            continue
        try:
            normal = _check_value(prop, value)
        except VocabularyError as exc:
            problems.append(exc.message)
            continue
        if normal != []:
            out[key] = normal
    if node_type is not None:
        missing = [k for k in node_type.required if k not in out]
        if missing:
            problems.append(f"{node_type.name} requires {', '.join(missing)}")
        status = out.get("status")
        if node_type.statuses is not None and status is not None and (
            status not in node_type.statuses
        ):
            allowed = ", ".join(sorted(node_type.statuses))
            problems.append(f"{node_type.name} status must be one of {allowed}; got {status!r}")
    if problems:
        raise VocabularyError(
            f"node {iri!r} is invalid: " + "; ".join(problems),
            hint="see docs/vocabulary.md for the types and their properties",
        )
    return {k: out[k] for k in sorted(out)}


def _check_value(prop: Property, value: Any) -> Any:
    if prop.many:
        values = value if isinstance(value, list | tuple) else [value]
        checked = [_check_one(prop, v) for v in values]
        return sorted(set(checked), key=str)
    if isinstance(value, list | tuple):
        raise VocabularyError(f"{prop.name} takes one value, got a list")
    return _check_one(prop, value)


def _check_one(prop: Property, value: Any) -> str | int | float | bool:
    if prop.kind == "iri":
        return check_iri(value, prop.name)
    if prop.kind in ("string", "datetime"):
        text = check_text(value, prop.name)
        if prop.kind == "datetime":
            try:
                datetime.fromisoformat(text)
            except ValueError as exc:
                raise VocabularyError(
                    f"{prop.name} must be an ISO 8601 date-time, got {text!r}"
                ) from exc
        return text
    if prop.kind == "boolean":
        if not isinstance(value, bool):
            raise VocabularyError(f"{prop.name} must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise VocabularyError(f"{prop.name} must be a number, got {type(value).__name__}")
    if prop.kind == "integer" and not isinstance(value, int):
        raise VocabularyError(f"{prop.name} must be an integer, got {value!r}")
    return check_number(value, prop.name)


def check_text(value: object, what: str) -> str:
    """Return ``value`` if it is a string that can be stored (UTF-8, at most MAX_LITERAL_CHARS).

    Raises:
        VocabularyError: not a string, too long, or holds a lone surrogate.
    """
    if not isinstance(value, str):
        raise VocabularyError(f"{what} must be a string, got {type(value).__name__}")
    if len(value) > MAX_LITERAL_CHARS:
        raise VocabularyError(
            f"{what} is longer than {MAX_LITERAL_CHARS} characters",
            hint="archive long content in L0 and reference it with derivedFrom",
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise VocabularyError(f"{what} holds a lone surrogate and is not valid text") from exc
    return value


def check_number(value: int | float, what: str) -> int | float:
    """Return ``value`` if it is a finite float or an integer that fits in 64 bits.

    Raises:
        VocabularyError: NaN, infinite, or an integer outside the signed 64-bit range.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise VocabularyError(f"{what} must be a finite number, got {value!r}")
    if isinstance(value, int) and not -_I64 <= value < _I64:
        raise VocabularyError(f"{what} does not fit in a signed 64-bit integer")
    return value


def node_to_quads(node: Mapping[str, Any], *, graph: str) -> list[Quad]:
    """Validate ``node`` and map it to RDF quads in the named graph ``graph``.

    Strings become xsd:string literals, ints xsd:integer, floats xsd:double, relations IRIs;
    ``@type`` becomes one rdf:type triple.

    Raises:
        VocabularyError: the node or ``graph`` is not valid.
    """
    normal = validate_node(node)
    g = NamedNode(check_iri(graph, "graph"))
    subject = NamedNode(normal["@id"])
    quads = [Quad(subject, NamedNode(RDF_TYPE), NamedNode(NS + normal["@type"]), g)]
    for key, value in normal.items():
        prop = PROPERTIES.get(key)
        if prop is None:
            continue
        for v in value if prop.many else [value]:
            obj = NamedNode(v) if prop.kind == "iri" else Literal(v)
            quads.append(Quad(subject, NamedNode(prop.iri), obj, g))
    return quads


_PROPERTY_OF_IRI = {p.iri: p for p in PROPERTIES.values()}
_TYPE_OF_IRI = {t.iri: t.name for t in TYPES.values()}


def literal_value(term: Literal) -> str | int | float | bool | None:
    """The Python value of an xsd string, integer, double, decimal or boolean literal, else None."""
    datatype = term.datatype.value
    if term.language is not None or not datatype.startswith(XSD):
        return None
    local = datatype[len(XSD) :]
    try:
        if local == "string":
            return term.value
        if local == "boolean":
            return term.value in ("true", "1")
        if local in ("integer", "long", "int", "short", "byte", "nonNegativeInteger",
                     "positiveInteger", "negativeInteger", "nonPositiveInteger",
                     "unsignedLong", "unsignedInt", "unsignedShort", "unsignedByte"):
            return int(term.value)
        if local in ("double", "float", "decimal"):
            return float(term.value)
    except ValueError:
        return None
    return None


def node_from_terms(iri: str, pairs: Iterable[tuple[NamedNode, object]]) -> dict[str, Any] | None:
    """Rebuild the normal form of node ``iri`` from its (predicate, object) terms; None if none.

    Raises:
        VocabularyError: a term is outside the vocabulary (the graph was not written by put).
    """
    node: dict[str, Any] = {}
    for predicate, obj in pairs:
        if predicate.value == RDF_TYPE:
            type_name = _TYPE_OF_IRI.get(getattr(obj, "value", ""))
            if type_name is None or "@type" in node:
                raise VocabularyError(f"{iri} has a type outside the vocabulary: {obj}")
            node["@type"] = type_name
            continue
        prop = _PROPERTY_OF_IRI.get(predicate.value)
        if prop is None:
            raise VocabularyError(f"{iri} has a property outside the vocabulary: {predicate}")
        if prop.kind == "iri":
            if not isinstance(obj, NamedNode):
                raise VocabularyError(f"{iri} {prop.name} holds a non-IRI: {obj}")
            value: Any = obj.value
        else:
            value = literal_value(obj) if isinstance(obj, Literal) else None
            if value is None:
                raise VocabularyError(f"{iri} {prop.name} holds an unexpected term: {obj}")
        if prop.many:
            node.setdefault(prop.name, []).append(value)
        elif prop.name in node:
            raise VocabularyError(f"{iri} holds several values of {prop.name}")
        else:
            node[prop.name] = value
    if not node:
        return None
    node["@id"] = iri
    return validate_node(node)


def to_jsonld(node: Mapping[str, Any]) -> str:
    """The canonical JSON-LD document of ``node`` with the inline ``@context``, for archiving.

    Equal nodes give identical text (sorted keys, normal form), so a revision's bytes in L0
    identify it. Raises:
        VocabularyError: the node is not valid.
    """
    document = {"@context": CONTEXT, **validate_node(node)}
    return json.dumps(document, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def from_jsonld(text: str | bytes) -> dict[str, Any]:
    """Parse a document written by ``to_jsonld`` back into a node's normal form.

    Raises:
        VocabularyError: the text is not JSON or not a valid node.
    """
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise VocabularyError(f"not a JSON-LD node: {exc}") from exc
    return validate_node(document)
