"""The archive port agents write L0 through, and its local implementation.

An agent never holds the SQLite archive itself: it writes turns, tool results and intents, and
reads them back, through ``ArchivePort`` (async, so a worker in another process can later do the
same over the bus). ``LocalArchive`` is the in-process implementation: every operation runs on
a worker thread, so an fsync never stalls the event loop.

``read_text`` also reads earlier jobs' archives of the same data directory (what recall and
kg_search point at) and, for a blackboard node's IRI, its latest revision's JSON-LD.

``LocalArchive`` keeps a read cache of this job's items, least recently used out first within
``READ_CACHE_BYTES``: an item never changes once archived (``Archive.put`` refuses other bytes
for an IRI it holds), so a cached text cannot go stale. ``warm`` fills it with the sources the
prefetch predictor expects the next step to read, while the model is still thinking. A node's
IRI is never cached (its next revision replaces what it reads), nor another job's item.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio

from gliding.core.iri import parse_iri
from gliding.errors import IRIError, NotFoundError
from gliding.memory.archive.records import DEFAULT_MEDIA_TYPE, ArchivedItem, CallRecord
from gliding.memory.archive.store import Archive, open_for_iri

READ_CACHE_BYTES = 8 * 1024 * 1024  # what one agent's read cache may hold, in archived bytes


class ArchivePort(Protocol):
    """What an agent needs of L0. Every method raises ArchiveError when the store fails."""

    @property
    def job(self) -> str: ...

    async def put(self, iri: str, content: bytes | str, *, kind: str,
                  media_type: str = DEFAULT_MEDIA_TYPE, meta: dict[str, Any] | None = None
                  ) -> None:
        """Archive ``content`` under ``iri`` (a no-op when it holds the same bytes)."""
        ...

    async def put_turn(self, iri: str, body: str, meta: dict[str, Any],
                       call: CallRecord) -> None:
        """Archive one model turn and its ledger row in one transaction. The same turn again
        (the same bytes at ``iri``) is a no-op: no second ledger row, so a write sent again
        counts once. Other bytes at ``iri`` are an ArchiveError."""
        ...

    async def find(self, iri: str) -> ArchivedItem | None:
        """The item at ``iri`` with its content, or None when nothing is archived there."""
        ...

    async def read_text(self, iri: str) -> str:
        """An item of this or an earlier job as text (a node: its latest revision).

        Raises:
            NotFoundError: nothing is archived at ``iri``. IRIError: ``iri`` is malformed.
        """
        ...

    async def warm(self, iris: Sequence[str]) -> int:
        """Prefetch: load this job's items at ``iris`` into the read cache before the reads a
        predictor expects, so ``read_text`` serves them without a store round trip. Returns
        how many it newly cached. Malformed, missing and other jobs' IRIs are skipped, and so
        are node IRIs (their latest revision changes).
        """
        ...

    async def calls(self) -> list[CallRecord]:
        """The job's LLM ledger so far."""
        ...


@dataclass
class CacheStats:
    """What the read cache did, for tests and logs."""

    hits: int = 0  # reads it served
    misses: int = 0  # reads that went to the store
    warmed: int = 0  # items ``warm`` cached


class ReadCache:
    """Texts by canonical IRI within ``cap`` archived bytes, the least recently used evicted
    first; a text bigger than ``cap`` is not kept. Only immutable items belong here."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.size = 0
        self._texts: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._texts

    def __len__(self) -> int:
        return len(self._texts)

    def get(self, key: str) -> str | None:
        """The text at ``key`` (now the most recently used), or None."""
        entry = self._texts.get(key)
        if entry is None:
            return None
        self._texts.move_to_end(key)
        return entry[0]

    def put(self, key: str, text: str, size: int) -> bool:
        """Keep ``text`` of ``size`` bytes, evicting the least recently used to make room.
        False when it was kept already or is over the cap."""
        if key in self._texts:
            self._texts.move_to_end(key)
            return False
        if size > self.cap:
            return False
        while self.size + size > self.cap:
            _, (_, evicted) = self._texts.popitem(last=False)
            self.size -= evicted
        self._texts[key] = (text, size)
        self.size += size
        return True


class LocalArchive:
    """``ArchivePort`` over one job's ``Archive`` in this process (operations on threads).

    The read cache is touched only on the event loop, after a thread's read returned."""

    def __init__(self, archive: Archive, data_dir: Path, *,
                 cache_bytes: int = READ_CACHE_BYTES) -> None:
        self.archive = archive
        self.data_dir = data_dir
        self.read_cache = ReadCache(cache_bytes)
        self.cache_stats = CacheStats()

    @property
    def job(self) -> str:
        return self.archive.job

    async def put(self, iri: str, content: bytes | str, *, kind: str,
                  media_type: str = DEFAULT_MEDIA_TYPE, meta: dict[str, Any] | None = None
                  ) -> None:
        await anyio.to_thread.run_sync(partial(self.archive.put, iri, content, kind=kind,
                                               media_type=media_type, meta=meta))

    async def put_turn(self, iri: str, body: str, meta: dict[str, Any],
                       call: CallRecord) -> None:
        def write() -> None:
            with self.archive.batch():
                if _holds(self.archive, iri, body):  # written before: its row is there too
                    return
                self.archive.put(iri, body, kind="turn", media_type="application/json",
                                 meta=meta)
                self.archive.record_call(call)

        await anyio.to_thread.run_sync(write)

    async def find(self, iri: str) -> ArchivedItem | None:
        def get() -> ArchivedItem | None:
            try:
                return self.archive.get(iri)
            except NotFoundError:
                return None

        return await anyio.to_thread.run_sync(get)

    async def read_text(self, iri: str) -> str:
        key = str(parse_iri(iri))
        cached = self.read_cache.get(key)
        if cached is not None:
            self.cache_stats.hits += 1
            return cached
        self.cache_stats.misses += 1
        text, size = await anyio.to_thread.run_sync(self._read, iri, key)
        if size is not None:
            self.read_cache.put(key, text, size)
        return text

    def _read(self, iri: str, key: str) -> tuple[str, int | None]:
        """The text at ``iri`` and, when it is this job's item read by its own IRI (so it never
        changes), its size to cache it by; None for a node's revision or another job's item."""
        if parse_iri(key).job == self.archive.job:
            text, item = _find_text(self.archive, iri)
            return text, item.size if item.iri == key else None
        other, _ = open_for_iri(self.data_dir, iri)
        with other:
            return _find_text(other, iri)[0], None

    async def warm(self, iris: Sequence[str]) -> int:
        """One thread call reads them all; the cache is filled back here, on the event loop."""
        wanted = [key for key in dict.fromkeys(own_item(i, self.archive.job) for i in iris)
                  if key is not None and key not in self.read_cache]
        if not wanted:
            return 0
        loaded = await anyio.to_thread.run_sync(self.load_items, wanted)
        added = sum(self.read_cache.put(key, text, size) for key, text, size in loaded)
        self.cache_stats.warmed += added
        return added

    def load_items(self, keys: list[str]) -> list[tuple[str, str, int]]:
        """The items archived under ``keys`` themselves: a missing key, and a node's IRI (only
        its revisions are items), is left out."""
        loaded = []
        for key in keys:
            try:
                item = self.archive.get(key)
            except NotFoundError:
                continue
            loaded.append((key, _decode(item), item.size))
        return loaded

    async def calls(self) -> list[CallRecord]:
        return await anyio.to_thread.run_sync(self.archive.calls)


def _holds(archive: Archive, iri: str, body: str) -> bool:
    """Whether ``iri`` holds exactly ``body`` already."""
    try:
        return archive.get(iri).content == body.encode("utf-8")
    except NotFoundError:
        return False


def own_item(iri: str, job: str) -> str | None:
    """The canonical form of ``iri`` when it may name an item of ``job``, else None (malformed,
    another job's, or not an item)."""
    try:
        parsed = parse_iri(iri)
    except IRIError:
        return None
    return str(parsed) if parsed.job == job and parsed.kind else None


def _find_text(archive: Archive, iri: str) -> tuple[str, ArchivedItem]:
    """The text at ``iri`` in ``archive`` and the item it came from: the item of that IRI, or
    for a node IRI its latest revision.

    Raises:
        NotFoundError: nothing of that IRI is archived.
    """
    try:
        item = archive.get(iri)
    except NotFoundError:
        revisions = [e for e in archive.list(kind="node") if e.meta.get("node") == iri]
        if not revisions:
            raise
        item = archive.get(revisions[-1].iri)
    return _decode(item), item


def _decode(item: ArchivedItem) -> str:
    """An item's content as text; bytes that are not UTF-8 become U+FFFD."""
    return (item.content or b"").decode("utf-8", errors="replace")
