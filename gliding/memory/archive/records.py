"""The archive's values and their rows: what ``store.Archive`` returns and how it is stored.

``ArchivedItem`` (one entry) and ``CallRecord`` (one LLM call in the ledger) are frozen values
that ports and callers use without the SQLite file (``port.py``, ``bus.py`` and the test fakes
hand them around too). The functions turn content and metadata into column values and back, each
failure an ``ArchiveError``: ``encode_content`` (text as UTF-8), ``dump_json`` and ``load_json``
(meta and job metadata), ``content_problem`` (the size and SHA-256 check behind verified reads)
and ``item_from_row`` (a row of ``schema.ENTRY_COLUMNS`` as an ``ArchivedItem``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from gliding.errors import ArchiveError

DEFAULT_MEDIA_TYPE = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class ArchivedItem:
    """One archived entry; ``content`` is None when listed, the verified bytes when read."""

    iri: str
    kind: str
    sha256: str
    size: int
    created_at: float
    media_type: str
    meta: dict[str, Any] = field(default_factory=dict, hash=False)
    content: bytes | None = None

    def text(self, encoding: str = "utf-8") -> str:
        """The content decoded as text.

        Raises:
            ArchiveError: the item was listed without content, or the bytes do not decode.
        """
        if self.content is None:
            raise ArchiveError(
                f"{self.iri} was listed without its content", hint="read it with Archive.get"
            )
        try:
            return self.content.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ArchiveError(
                f"{self.iri} is not {encoding} text ({self.media_type})",
                hint="read it as bytes with Archive.read",
            ) from exc


@dataclass(frozen=True)
class CallRecord:
    """One LLM call in the job's ledger; ``id`` is given by the archive when recorded.

    ``created_at`` left as None is filled in with the archive's clock when recorded.
    """

    job: str
    role: str
    turn: int
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    created_at: float | None = None
    turn_iri: str | None = None
    id: int | None = None
    priced: bool = True  # False: nobody knows what the call cost (cost_usd is 0)


def encode_content(content: bytes | str, key: str) -> bytes:
    if isinstance(content, str):
        try:
            return content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ArchiveError(
                f"content for {key} is not encodable as UTF-8: {exc.reason}",
                hint="archive the bytes instead of the text",
            ) from exc
    if isinstance(content, bytes | bytearray | memoryview):
        return bytes(content)
    raise ArchiveError(f"content for {key} is {type(content).__name__}, not bytes or str")


def dump_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ArchiveError(
            f"{what} is not JSON: {exc}", hint="use str, numbers, bools, None, lists and dicts"
        ) from exc


def load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ArchiveError(f"stored {what} is not JSON: {exc}", hint="run verify()") from exc


def content_problem(digest: str, size: int, content: bytes) -> str | None:
    if len(content) != size:
        return f"size is {len(content)} B, recorded {size} B"
    actual = hashlib.sha256(content).hexdigest()
    if actual != digest:
        return f"sha256 is {actual}, recorded {digest}"
    return None


def item_from_row(row: tuple[Any, ...], content: bytes | None) -> ArchivedItem:
    iri, kind, digest, size, created_at, media_type, meta = row
    return ArchivedItem(
        iri=iri,
        kind=kind,
        sha256=digest,
        size=size,
        created_at=created_at,
        media_type=media_type,
        meta=load_json(meta, f"meta of {iri}"),
        content=content,
    )
