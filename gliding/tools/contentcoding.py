"""Bounded decoding of an HTTP body's content coding (RFC 9110 §8.4), for ``web_fetch``.

httpx inflates each network chunk whole and nothing counts the output, so a 1.8 KB page sent
with ``Content-Encoding: gzip, gzip`` became 1.65 GB before a byte cap on the decoded body saw
any of it. Here the caller reads the raw bytes (under a cap of its own) and feeds them to an
``Inflater``, which inflates in steps of at most ``STEP`` bytes of output and never past
``limit`` bytes in all: memory and CPU are bounded by the limit, whatever the ratio.

One coding at most: ``gzip`` (``x-gzip``) or ``deflate`` (zlib-wrapped, or raw as some servers
send it); ``identity`` is no coding. A stacked coding (``gzip, gzip``) has no honest use and is
the bomb's trick, so it is refused, like any coding this module does not decode (``br``,
``zstd``, ``compress``: ``web_fetch`` asks for gzip and deflate only).

Pure logic, no I/O: the caller awaits a checkpoint between steps so a large body does not hold
the event loop.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from gliding.errors import ToolError

STEP = 64 * 1024  # decoded bytes one step yields at most
ACCEPTED = "gzip, deflate"  # what web_fetch asks for (identity is always acceptable)
_GZIP = ("gzip", "x-gzip")


def codings(header: str) -> tuple[str, ...]:
    """The codings a ``Content-Encoding`` header lists, in the order applied, lower-cased,
    without ``identity``."""
    return tuple(c for c in (part.strip().lower() for part in header.split(","))
                 if c and c != "identity")


class Inflater:
    """Decodes one body's coding in bounded steps: ``feed`` each raw chunk, then ``end``.

    ``cut`` is true once more decoded bytes were there than ``limit`` allowed."""

    def __init__(self, coding: str, limit: int) -> None:
        """Raises:
            ToolError: a coding that is not gzip or deflate.
        """
        if coding not in (*_GZIP, "deflate"):
            raise ToolError(f"the page came with Content-Encoding {coding!r}, which web_fetch "
                            f"does not decode (it asks for {ACCEPTED})")
        self.coding = coding
        self.limit = limit
        self.decoded = 0
        self.cut = False
        self._done = False  # the stream ended (trailing bytes are ignored)
        self._raw_deflate = False
        self._fresh = True  # no byte of the current stream has been decoded yet
        self._member = False  # the current stream follows a gzip member that ended
        self._z = self._decompressor()

    def _decompressor(self) -> zlib._Decompress:
        if self.coding in _GZIP:
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if self._raw_deflate else zlib.MAX_WBITS)

    def feed(self, raw: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``raw``, in pieces of at most ``STEP`` bytes; nothing once the
        limit is reached (``cut`` then says whether more was there).

        Raises:
            ToolError: the bytes are not valid data of the coding.
        """
        data = raw
        while not (self._done or self.cut):
            room = min(STEP, self.limit - self.decoded)
            try:
                piece = self._step(data, max(room, 1))
            except zlib.error as exc:
                raise ToolError(f"the page is not valid {self.coding} data: {exc}") from exc
            data = self._z.unconsumed_tail
            if room <= 0:  # a probe past the limit: anything more means the page was cut
                self.cut = bool(piece or data)
                return
            if piece:
                self.decoded += len(piece)
                yield piece
            if self._z.eof:
                data = self._next_member()
            elif not data and len(piece) < room:
                return  # the input is used up and zlib holds no more output for now

    def end(self) -> Iterator[bytes]:
        """What is left once the raw body has ended (a stream cut short decodes as far as it
        goes)."""
        yield from self.feed(b"")

    def _step(self, data: bytes, room: int) -> bytes:
        """One bounded ``decompress``; the first bytes of a stream decide a deflate body's
        framing, and after a gzip member's end, whether another member follows."""
        fresh, self._fresh = self._fresh and bool(data), self._fresh and not data
        if not fresh:
            return self._z.decompress(data, room)
        try:
            return self._z.decompress(data, room)
        except zlib.error:
            if self.coding == "deflate" and not self._raw_deflate and not self._member:
                self._raw_deflate = True  # no zlib header: raw deflate, as some servers send
                self._z = self._decompressor()
                return self._z.decompress(data, room)
            if self._member:  # bytes after the last gzip member that are not one: ignored
                self._done = True
                return b""
            raise

    def _next_member(self) -> bytes:
        """After the end of one stream: a gzip body may hold more members (a fresh stream
        reads what follows); anything after a deflate stream is ignored."""
        rest = self._z.unused_data
        if self.coding not in _GZIP:
            self._done = True
            return b""
        self._z = self._decompressor()
        self._fresh = self._member = True
        return rest
