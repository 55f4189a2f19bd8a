"""The context benchmark's conversation, shortened: through tool loads, a description change
and a compaction, no cache break goes unexplained and the summary reuses the prefix."""

from __future__ import annotations

from bench.context import run


def test_a_long_conversation_keeps_its_prefix_through_a_compaction() -> None:
    report = run(turns=40)
    assert report["compactions"] == 1
    assert report["unexplained_cache_breaks"] == 0
    assert report["explained_cache_breaks"] >= 2  # tools loaded, and the compaction
    assert float(report["cached_input_share"]) > 0.9  # type: ignore[arg-type]
    assert float(report["summary_request_prefix_share"]) > 0.9  # type: ignore[arg-type]
    assert report["tools_registered"] == 200
