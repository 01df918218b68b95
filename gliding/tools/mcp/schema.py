"""A server's tool listing as our tools' names, descriptions and JSON schemas (pure).

Names: ``<server>__<tool>``, with every character a model API refuses (anything but a-z, A-Z,
0-9, _ and -) replaced by ``_`` and at most 64 characters; a name cut short, or one that two
tools would share, ends in a hash of the server's own name so it stays unique and stable.

Schemas: the object schema ``Tool.check_arguments`` and the model read: ``properties`` and
``required`` kept, a property's ``type`` list (``["string", "null"]``) narrowed to its one
non-null type (or left out), draft keywords the model has no use for (``$schema``, ``$id``,
``$comment``) dropped, ``$defs`` kept for the ``$ref`` that point at it, long descriptions
clipped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from gliding.core.text import one_line

NAME_MAX = 64  # what OpenAI-compatible APIs accept for a function name
SEPARATOR = "__"
DESCRIPTION_CHARS = 600  # a tool's description, at most (the schema is paid on every call)
PROPERTY_CHARS = 240  # one argument's description, at most
JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object"})
_DROPPED = frozenset({"$schema", "$id", "$comment"})
_BAD = re.compile(r"[^A-Za-z0-9_-]")
T = TypeVar("T")


def tool_names(server: str, tools: Iterable[str]) -> dict[str, str]:
    """``{server's tool name: our tool name}``, every one unique and at most 64 characters."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for tool in tools:
        name = f"{server}{SEPARATOR}{_BAD.sub('_', tool)}"
        if len(name) > NAME_MAX or name in taken:
            digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
            name = f"{name[:NAME_MAX - 9]}_{digest}"
        out[tool] = name
        taken.add(name)
    return out


def description(title: str | None, text: str | None, server: str) -> str:
    """What the model is told a tool does, clipped, saying which server answers."""
    body = one_line(text or title or "", DESCRIPTION_CHARS - len(server) - 8)
    return f"{body} (MCP: {server})" if body else f"(MCP: {server})"


def parameters(input_schema: Any) -> dict[str, Any]:
    """A server's ``inputSchema`` as the object schema our tools declare."""
    schema: Mapping[str, Any] = input_schema if isinstance(input_schema, Mapping) else {}
    raw = schema.get("properties")
    props: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    required = schema.get("required")
    out: dict[str, Any] = {
        "type": "object",
        "properties": {str(key): _property(value) for key, value in props.items()},
        "required": [str(r) for r in required if r in props]
        if isinstance(required, list) else [],
    }
    for key in ("$defs", "definitions"):
        if isinstance(schema.get(key), Mapping):
            out[key] = dict(schema[key])
    return out


def _property(value: Any) -> dict[str, Any]:
    """One argument's schema; ``true`` (anything goes) becomes ``{}``."""
    if not isinstance(value, Mapping):
        return {}
    prop = {str(k): v for k, v in value.items() if k not in _DROPPED}
    kind = prop.get("type")
    if isinstance(kind, list):
        named = [k for k in kind if k != "null"]
        kind = named[0] if len(named) == 1 else None
    if kind in JSON_TYPES:
        prop["type"] = kind
    else:
        prop.pop("type", None)
    if isinstance(prop.get("description"), str):
        prop["description"] = one_line(prop["description"], PROPERTY_CHARS)
    return prop


def idempotent(annotations: Any) -> bool:
    """Whether running the tool twice is harmless: only when the server says it is read-only
    or idempotent (``readOnlyHint``, ``idempotentHint``); unknown tools may have effects."""
    if annotations is None:
        return False
    return bool(getattr(annotations, "read_only_hint", False)
                or getattr(annotations, "idempotent_hint", False))


def tokens(name: str, description: str, parameters: Mapping[str, Any] | None) -> int:
    """About how many prompt tokens a tool's schema costs (4 characters a token)."""
    text = json.dumps({"name": name, "description": description, "parameters": parameters},
                      ensure_ascii=False, separators=(",", ":"))
    return (len(text) + 3) // 4


def bounded(tools: Sequence[tuple[T, int]], max_tools: int,
            max_tokens: int) -> tuple[list[T], list[T]]:
    """``tools`` (each with its schema's tokens) split into those kept, in order, while both
    bounds hold (a tool too big for the tokens left is passed over, a smaller one after it
    may still fit), and those refused."""
    kept: list[T] = []
    refused: list[T] = []
    spent = 0
    for tool, cost in tools:
        if len(kept) < max_tools and spent + cost <= max_tokens:
            kept.append(tool)
            spent += cost
        else:
            refused.append(tool)
    return kept, refused
