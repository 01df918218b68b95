"""A ``NodeStore`` in memory for the coherence engine's tests, with failures on request."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from gliding.errors import GlidingError


@dataclass
class MemoryNodeStore:
    """Versioned values by IRI in a dict; ``fail_saves``/``fail_loads`` make the next calls fail.

    ``saves`` lists every save in order (iri, version, value). Saves must come with a higher
    version than the one held, as the directory's do; anything else is a test failure.
    """

    data: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    saves: list[tuple[str, int, str | None]] = field(default_factory=list)
    loads: int = 0
    fail_saves: int = 0
    fail_loads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def load(self, iri: str) -> tuple[int, str | None]:
        with self._lock:
            if self.fail_loads > 0:
                self.fail_loads -= 1
                raise GlidingError("the store is down (a test said so)")
            self.loads += 1
            return self.data.get(iri, (0, None))

    def save(self, iri: str, version: int, value: str | None) -> None:
        with self._lock:
            if self.fail_saves > 0:
                self.fail_saves -= 1
                raise GlidingError("the store is down (a test said so)")
            held = self.data.get(iri, (0, None))[0]
            if version <= held:
                raise AssertionError(f"{iri}: save of v{version} over v{held}")
            self.data[iri] = (version, value)
            self.saves.append((iri, version, value))
