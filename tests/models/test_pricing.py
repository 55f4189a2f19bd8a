"""The price table: list prices by model prefix, operator overrides, and costs in USD."""

from __future__ import annotations

import pytest

from nightowl.messages import Usage
from nightowl.models.pricing import Price, PriceTable


def test_the_longest_matching_prefix_prices_a_model() -> None:
    table = PriceTable()
    assert table.price_of("openai:gpt-4o-mini-2024-07-18") == Price(0.15, 0.075, 0.0, 0.6)
    assert table.price_of("openai:gpt-4o-2024-08-06") == Price(2.5, 1.25, 0.0, 10.0)
    assert table.price_of("local:qwen2.5-coder-1.5b") == Price(0.0)
    assert table.price_of("openai-compatible:http://x#llama") is None


def test_cost_counts_every_kind_of_token() -> None:
    usage = Usage(
        input_tokens=1000, cache_read_tokens=10_000, cache_write_tokens=2000, output_tokens=500
    )
    # 1000 * 3 + 10000 * 0.3 + 2000 * 3.75 + 500 * 15 = 3000 + 3000 + 7500 + 7500 per million
    assert PriceTable().cost("anthropic:claude-sonnet-4-5", usage) == pytest.approx(0.021)
    assert PriceTable().cost("openai-compatible:http://x#m", usage) is None


def test_overrides_win_and_bad_ones_are_refused_with_what_is_wrong() -> None:
    table = PriceTable(
        {"scripted": {"input": 10_000, "output": 1}, "openai-compatible": {"input": 1}}
    )
    assert table.cost("scripted:/tmp/s.json", Usage(input_tokens=100)) == pytest.approx(1.0)
    assert table.cost("openai-compatible:http://x#m", Usage(input_tokens=1_000_000)) == 1.0
    with pytest.raises(ValueError, match="needs 'input'"):
        PriceTable({"x": {"output": 1}})
    with pytest.raises(ValueError, match="got \\['input', 'outptu'\\]"):
        PriceTable({"x": {"input": 1, "outptu": 2}})
    with pytest.raises(ValueError, match="negative"):
        PriceTable({"x": {"input": -1}})
