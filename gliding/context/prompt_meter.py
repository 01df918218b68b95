"""What one model call's prompt weighs, for the ``turn`` event (the dashboard's token curves):
the prompt the context engine built against the naive one (the session's whole history,
appended), and what a provider's prefix cache would have held of it.

The cache is simulated as OpenAI's automatic prompt caching, simplified: a session's previous
prompt stays cached; a prompt reads the longest run of its leading messages equal to the
previous prompt's, counted in tokens and rounded down to MIN_TOKENS, then INCREMENT steps
(nothing under MIN_TOKENS). No expiry: a session's calls come seconds apart. The benchmark's
simulator (``gliding bench cache``) models both providers on the exact request bodies; this
one needs only the messages, so a job can report it as it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gliding.context.engine import EngineStats
from gliding.context.tokens import TokenCounter
from gliding.core.messages import Message

MIN_TOKENS = 1024  # a shorter prefix is never cached
INCREMENT = 128  # past it, the cached prefix grows in steps of this many tokens


@dataclass(frozen=True)
class PromptWeight:
    built: int  # the prompt's tokens
    naive: int  # the append-only prompt's tokens at this call
    cached: int  # the simulated cache's hit, in tokens
    compactions: int  # the session's compactions so far


class PromptMeter:
    """One session's prompts, measured one after the other (``measure`` after each
    ``ContextEngine.prompt``); ``last``: the latest one's weight."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.last: PromptWeight | None = None
        self._previous: Sequence[Message] = ()
        self._baseline = 0  # the engine's Σ baseline_tokens at the last call

    def measure(self, prompt: Sequence[Message], stats: EngineStats) -> PromptWeight:
        same = 0
        for now, before in zip(prompt, self._previous, strict=False):
            if now != before:
                break
            same += 1
        self._previous = tuple(prompt)
        naive, self._baseline = stats.baseline_tokens - self._baseline, stats.baseline_tokens
        self.last = PromptWeight(stats.last_prompt_tokens, naive,
                                 cached_prefix(self.counter.messages(prompt[:same])),
                                 stats.compactions)
        return self.last


def cached_prefix(shared: int) -> int:
    """The tokens a cache reads of a prefix of ``shared`` tokens it holds."""
    if shared < MIN_TOKENS:
        return 0
    return MIN_TOKENS + (shared - MIN_TOKENS) // INCREMENT * INCREMENT
