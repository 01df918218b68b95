"""Token counting with a real, offline tokenizer (tiktoken's cl100k_base).

The BPE file comes from litellm's wheel, which bundles tiktoken's files: we point
``TIKTOKEN_CACHE_DIR`` there before tiktoken first loads, so nothing is downloaded. If neither is
installed, counting falls back to 4 characters a token and says so once in the log.

A message costs its content's tokens plus ``MESSAGE_OVERHEAD`` (4), the usual chat framing.
Counts are cached by content, so re-assembling a prompt costs a dictionary lookup per message.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

import structlog

from gliding.core.messages import Message

MESSAGE_OVERHEAD = 4
log = structlog.get_logger("gliding.context")


def _point_tiktoken_at_bundled_files() -> None:
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return
    spec = importlib.util.find_spec("litellm")
    if spec and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils"
        if (folder / "tokenizers").is_dir():
            os.environ["TIKTOKEN_CACHE_DIR"] = str(folder / "tokenizers")


@lru_cache(maxsize=4)
def _encoder(name: str) -> Callable[[str], int] | None:
    _point_tiktoken_at_bundled_files()
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # noqa: BLE001 - not installed, or its file is missing and cannot be fetched
        log.warning("tokenizer.fallback", encoding=name, error=str(exc),
                    using="4 characters a token")
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


class TokenCounter:
    """Counts tokens of texts and messages; remembers what it counted."""

    def __init__(self, encoding: str = "cl100k_base", *, cache_size: int = 65536) -> None:
        self.encoding = encoding
        encode = _encoder(encoding)
        self.exact = encode is not None
        self._encode = encode or (lambda text: (len(text) + 3) // 4)
        self._cache: dict[str, int] = {}
        self._cache_size = cache_size

    def count(self, text: str) -> int:
        cached = self._cache.get(text)
        if cached is None:
            cached = self._encode(text)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[text] = cached
        return cached

    def message(self, message: Message) -> int:
        """Tokens of one chat message: content, tool-call arguments, and the framing."""
        total = self.count(message.content) + MESSAGE_OVERHEAD
        for call in message.tool_calls:
            total += self.count(call.name) + self.count(call.arguments_json())
        return total

    def messages(self, messages: Iterable[Message]) -> int:
        return sum(self.message(m) for m in messages)
