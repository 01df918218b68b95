"""L0 over the bus: ``BusArchive`` is the ``ArchivePort`` of an agent on a worker that cannot
open the job's archive (another host), ``ArchiveServer`` carries its calls out in the job's
process.

    worker:  BusArchive.put(...) ──ArchiveRequest on archive/<job>/request──► ArchiveServer
                                 ◄──ArchiveReply on worker/<worker>/archive──  (LocalArchive)

Exactly once. Every write is idempotent in the archive itself: ``put`` of an IRI that holds the
same bytes is a no-op, and so is a ``put_turn`` whose turn is archived already (the port checks
and writes the turn and its ledger row in one transaction, so the row is there too).
A request whose reply does not come within ``timeout_s`` is therefore simply sent again, up to
``tries`` times (``bus/rpc.py``), and what the worker wrote reaches the archive once however
often it was sent. Reads (``find``, ``read_text``, ``calls``) are repeated the same way.

The server answers for its own job only: reads of another job's items are refused
(NotFoundError), so a broker client cannot read the data directory through it; writes are
checked by the archive itself (an IRI of another job is an ArchiveError). Errors keep their
kind: the server sends the error's code and message, and the worker raises
NotFoundError, IRIError or ArchiveError again. Bytes travel as base64. The worker keeps a read
cache of this job's immutable items as ``LocalArchive`` does (``warm`` fills it with one
request).
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Sequence
from typing import Any

import anyio

from gliding.bus import topics
from gliding.bus.messages import ArchiveOp, ArchiveReply, ArchiveRequest
from gliding.bus.port import Bus
from gliding.bus.rpc import RequestClient, RequestServer, Service
from gliding.core.iri import parse_iri
from gliding.errors import ArchiveError, IRIError, NotFoundError
from gliding.memory.archive.port import (
    READ_CACHE_BYTES,
    CacheStats,
    LocalArchive,
    ReadCache,
    own_item,
)
from gliding.memory.archive.records import DEFAULT_MEDIA_TYPE, ArchivedItem, CallRecord

TIMEOUT_S = 10.0  # one try of a request
TRIES = 3
_ARCHIVE = Service(
    name="archive", request=ArchiveRequest, reply=ArchiveReply,
    requests=topics.archive_requests, replies=topics.archive_replies, error=ArchiveError,
    errors={e.code: e for e in (NotFoundError, IRIError, ArchiveError)}, asked="an archive {op}")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _item_json(item: ArchivedItem) -> dict[str, Any]:
    out = dataclasses.asdict(item)
    out["content"] = None if item.content is None else _b64(item.content)
    return out


def _item_from(data: dict[str, Any]) -> ArchivedItem:
    content = data.get("content")
    return ArchivedItem(**{**data, "content": None if content is None
                           else base64.b64decode(content)})


class BusArchive(RequestClient[ArchiveOp]):
    """``ArchivePort`` of job ``job`` for an agent on worker ``worker``, over ``bus``.

    Use inside ``async with BusArchive(...) as archive:`` (it listens for its replies)."""

    def __init__(self, bus: Bus, job: str, worker: str, *, timeout_s: float = TIMEOUT_S,
                 tries: int = TRIES, cache_bytes: int = READ_CACHE_BYTES) -> None:
        super().__init__(_ARCHIVE, bus, job, worker, timeout_s=timeout_s, tries=tries)
        self.read_cache = ReadCache(cache_bytes)
        self.cache_stats = CacheStats()

    async def put(self, iri: str, content: bytes | str, *, kind: str,
                  media_type: str = DEFAULT_MEDIA_TYPE, meta: dict[str, Any] | None = None
                  ) -> None:
        data = content.encode("utf-8") if isinstance(content, str) else content
        await self.call("put", iri=iri, content=_b64(data), kind=kind, media_type=media_type,
                        meta=meta or {})

    async def put_turn(self, iri: str, body: str, meta: dict[str, Any],
                       call: CallRecord) -> None:
        await self.call("put_turn", iri=iri, body=body, meta=meta,
                        call=dataclasses.asdict(call))

    async def find(self, iri: str) -> ArchivedItem | None:
        found = await self.call("find", iri=iri)
        return None if found is None else _item_from(found)

    async def read_text(self, iri: str) -> str:
        key = str(parse_iri(iri))
        cached = self.read_cache.get(key)
        if cached is not None:
            self.cache_stats.hits += 1
            return cached
        self.cache_stats.misses += 1
        result = await self.call("read_text", iri=iri)
        text, size = str(result["text"]), result.get("cache_size")
        if isinstance(size, int):
            self.read_cache.put(key, text, size)
        return text

    async def warm(self, iris: Sequence[str]) -> int:
        wanted = [key for key in dict.fromkeys(own_item(i, self.job) for i in iris)
                  if key is not None and key not in self.read_cache]
        if not wanted:
            return 0
        loaded = await self.call("warm", iris=wanted)
        added = sum(self.read_cache.put(key, text, size) for key, text, size in loaded)
        self.cache_stats.warmed += added
        return added

    async def calls(self) -> list[CallRecord]:
        return [CallRecord(**row) for row in await self.call("calls")]


class ArchiveServer(RequestServer[ArchiveRequest]):
    """Answers the archive requests of job ``port.job`` from workers, over ``bus``."""

    def __init__(self, bus: Bus, port: LocalArchive, *, concurrency: int = 8) -> None:
        super().__init__(_ARCHIVE, bus, port.job, concurrency=concurrency)
        self.port = port

    async def handle(self, r: ArchiveRequest) -> Any:
        a, port = r.args, self.port
        if r.op in ("find", "read_text") and parse_iri(str(a["iri"])).job != port.job:
            # a worker reads this job only: earlier jobs' items stay behind the daemon's token
            raise NotFoundError(f"{a['iri']} is not an item of job {port.job}",
                                hint="a worker reads the archive of the job it works for")
        if r.op == "put":
            await port.put(str(a["iri"]), base64.b64decode(a["content"]), kind=str(a["kind"]),
                           media_type=str(a.get("media_type") or DEFAULT_MEDIA_TYPE),
                           meta=dict(a.get("meta") or {}))
            return None
        if r.op == "put_turn":  # sent again: a no-op in the port, its ledger row is in already
            await port.put_turn(str(a["iri"]), str(a["body"]), dict(a["meta"]),
                                CallRecord(**a["call"]))
            return None
        if r.op == "find":
            item = await port.find(str(a["iri"]))
            return None if item is None else _item_json(item)
        if r.op == "read_text":
            iri = str(a["iri"])
            text = await port.read_text(iri)
            key = own_item(iri, port.job)
            size = None
            if key is not None and key == str(parse_iri(iri)):
                item = await port.find(key)
                size = item.size if item is not None and item.iri == key else None
            return {"text": text, "cache_size": size}
        if r.op == "warm":
            keys = [k for k in (own_item(str(i), port.job) for i in a.get("iris") or []) if k]
            return await anyio.to_thread.run_sync(port.load_items, keys)
        if r.op == "calls":
            return [dataclasses.asdict(c) for c in await port.calls()]
        raise ArchiveError(f"unknown archive operation {r.op!r}")
