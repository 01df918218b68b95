"""What one model call costs: a model's prices per million tokens and the arithmetic from usage.

Pure. The prices come from settings (``llm.prices``) or litellm's cost map; looking them up is
``gliding.llm.prices``'s business, this module only multiplies. A cost nobody knows is None,
never 0: a local model's $0 is known, a hosted model without a price is not (docs/config.md,
"Prices and costs").
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """USD per million tokens. ``cache_read`` / ``cache_write``: prompt tokens read from or
    written to a provider's prompt cache; None charges them at ``input``."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None


def call_cost(price: Price, *, prompt_tokens: int, completion_tokens: int,
              cache_read_tokens: int = 0, cache_write_tokens: int = 0) -> float:
    """USD of one call. ``prompt_tokens`` counts every prompt token, the cached ones included
    (OpenAI's convention, which litellm follows for every provider); the cache counts are
    clamped to it, so a provider that reports more cached than prompt tokens is not paid twice.
    """
    prompt = max(0, prompt_tokens)
    read = min(max(0, cache_read_tokens), prompt)
    write = min(max(0, cache_write_tokens), prompt - read)
    plain = prompt - read - write
    read_price = price.input if price.cache_read is None else price.cache_read
    write_price = price.input if price.cache_write is None else price.cache_write
    return (plain * price.input + read * read_price + write * write_price
            + max(0, completion_tokens) * price.output) / PER_MILLION


def per_million(per_token: float | None) -> float | None:
    """A price per token (litellm's unit) as a price per million tokens (ours), without the
    float noise of the multiplication (1e-07 is 0.1, not 0.09999999999999999)."""
    return None if per_token is None else round(float(per_token) * PER_MILLION, 9)


@dataclass(frozen=True)
class CostTotal:
    """The cost of several calls: the sum of those with a known cost, and how many had none.

    ``usd`` is exact when ``unpriced == 0``; otherwise the true cost is at least ``usd``.
    """

    usd: float = 0.0
    unpriced: int = 0

    @property
    def known(self) -> bool:
        return self.unpriced == 0

    def text(self, *, free: str | None = None, digits: int = 4) -> str:
        """``$0.0123``; ``$0 (local model)`` for the known zero of a model that costs nothing by
        nature (``free``: ``local``, ``scripted``); ``unknown (2 calls unpriced)`` or
        ``at least $0.0123 (2 calls unpriced)`` when some call had no price."""
        if self.unpriced:
            calls = f"{self.unpriced} call{'s' if self.unpriced != 1 else ''} unpriced"
            if self.usd == 0:
                return f"unknown ({calls})"
            return f"at least ${self.usd:.{digits}f} ({calls})"
        if free and self.usd == 0:
            return f"$0 ({free} model)"
        return f"${self.usd:.{digits}f}"

    def cell(self, *, free: str | None = None, digits: int = 4) -> str:
        """The same for a table column: ``0.0123``, ``0 (local)``, ``unknown``, ``>=0.0123``."""
        if self.unpriced:
            return "unknown" if self.usd == 0 else f">={self.usd:.{digits}f}"
        if free and self.usd == 0:
            return f"0 ({free})"
        return f"{self.usd:.{digits}f}"
