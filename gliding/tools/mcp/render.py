"""A tool result as the text the model reads (pure).

    text                 as it is
    image, audio         [image image/png, 1234 bytes]
    embedded resource    [resource <uri> (text/plain)] then its text; a blob by size only
    resource link        [resource link <uri> "name" (mime): description]
    structured content   as JSON, when the result has no content blocks besides it

Blocks are joined with newlines. The text is then capped at ``max_bytes`` of UTF-8 (cut at a
character boundary) with a line saying how much there was; the agent loop archives and routes
it like any tool's output, so a long result costs the prompt only its summary and IRI.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from mcp import types

EMPTY = "(no output)"


def render(content: Sequence[Any], structured: Any = None) -> str:
    """The content blocks of a result (and its structured content) as text."""
    parts = [_block(block) for block in content]
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, indent=1))
    return "\n".join(parts) if parts else EMPTY


def _block(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        mime = f" ({res.mime_type})" if res.mime_type else ""
        if isinstance(res, types.TextResourceContents):
            return f"[resource {res.uri}{mime}]\n{res.text}"
        return f"[resource {res.uri}{mime}, {_decoded_size(res.blob)} bytes]"
    if isinstance(block, types.ResourceLink):
        mime = f" ({block.mime_type})" if block.mime_type else ""
        size = f", {block.size} bytes" if block.size is not None else ""
        about = f": {block.description}" if block.description else ""
        return f"[resource link {block.uri} {json.dumps(block.name)}{mime}{size}{about}]"
    kind = getattr(block, "type", type(block).__name__)
    return f"[{kind} content]"


def _decoded_size(data: str) -> int:
    """Bytes a base64 string holds (its length if it is not base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)


def cap(text: str, max_bytes: int, *, setting: str = "mcp.max_result_bytes") -> tuple[str, bool]:
    """``text`` within ``max_bytes`` of UTF-8 plus a notice, and whether it was cut."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text, False
    kept = data[:max_bytes].decode("utf-8", errors="ignore")
    return (f"{kept}\n[cut: the result was {len(data)} bytes; only the first {max_bytes} "
            f"were kept ({setting})]"), True
