"""What a model call costs: a price table per model (USD per million tokens), overridable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nightowl.messages import Usage

MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """USD per million tokens of each kind."""

    input: float
    cache_read: float = 0.0
    cache_write: float = 0.0
    output: float = 0.0

    def cost(self, usage: Usage) -> float:
        """The call's cost in USD."""
        return (
            usage.input_tokens * self.input
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
            + usage.output_tokens * self.output
        ) / MILLION


# Public list prices (USD / million tokens), by model-name prefix; the longest prefix wins.
DEFAULT_PRICES: dict[str, Price] = {
    "anthropic:claude-opus-4": Price(15.0, 1.5, 18.75, 75.0),
    "anthropic:claude-sonnet-4": Price(3.0, 0.3, 3.75, 15.0),
    "anthropic:claude-3-7-sonnet": Price(3.0, 0.3, 3.75, 15.0),
    "anthropic:claude-3-5-sonnet": Price(3.0, 0.3, 3.75, 15.0),
    "anthropic:claude-haiku-4": Price(1.0, 0.1, 1.25, 5.0),
    "anthropic:claude-3-5-haiku": Price(0.8, 0.08, 1.0, 4.0),
    "openai:gpt-4o-mini": Price(0.15, 0.075, 0.0, 0.6),
    "openai:gpt-4o": Price(2.5, 1.25, 0.0, 10.0),
    "openai:gpt-4.1-nano": Price(0.1, 0.025, 0.0, 0.4),
    "openai:gpt-4.1-mini": Price(0.4, 0.1, 0.0, 1.6),
    "openai:gpt-4.1": Price(2.0, 0.5, 0.0, 8.0),
    "openai:o4-mini": Price(1.1, 0.275, 0.0, 4.4),
    # Models on this machine cost electricity, not tokens.
    "local": Price(0.0),
    "scripted": Price(0.0),
}


class PriceTable:
    """Prices by model-name prefix: the defaults, then the operator's overrides."""

    def __init__(self, overrides: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self._prices = dict(DEFAULT_PRICES)
        for prefix, fields in (overrides or {}).items():
            unknown = set(fields) - {"input", "cache_read", "cache_write", "output"}
            if unknown or "input" not in fields:
                raise ValueError(
                    f"price for {prefix!r} needs 'input' and may have 'cache_read', "
                    f"'cache_write', 'output' (USD per million tokens); got {sorted(fields)}"
                )
            if any(value < 0 for value in fields.values()):
                raise ValueError(f"price for {prefix!r} has a negative value")
            self._prices[prefix] = Price(**{k: float(v) for k, v in fields.items()})

    def price_of(self, model: str) -> Price | None:
        """The price of a model (`provider:name`), or None when the table has none."""
        matches = [p for p in self._prices if model == p or model.startswith(p)]
        return self._prices[max(matches, key=len)] if matches else None

    def cost(self, model: str, usage: Usage) -> float | None:
        """The call's cost in USD, or None for a model without a price."""
        price = self.price_of(model)
        return None if price is None else round(price.cost(usage), 8)
