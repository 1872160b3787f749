"""The benchmarks' prompt-caching price model (:mod:`benchmarks.pricing`), shared by every
wire's benchmark: a prefix identical with the previous call is read at 0.1×, the rest is
written at 1.25×."""

from __future__ import annotations

import pytest

from benchmarks.pricing import PricedCall, billed_input, shared_prefix_tokens


def _call(*units: str, each: int = 100) -> PricedCall:
    return PricedCall.of(list(units), [each] * len(units))


def test_a_growing_call_reads_what_the_previous_one_wrote() -> None:
    first = _call("tools", "sys", "u1")
    second = _call("tools", "sys", "u1", "a1", "u2")
    assert shared_prefix_tokens(first, second) == 300
    assert billed_input([first, second]) == pytest.approx(300 * 1.25 + 300 * 0.1 + 200 * 1.25)


def test_a_changed_unit_ends_the_cached_prefix_there() -> None:
    first = _call("tools", "sys", "u1", "a1")
    second = _call("tools", "sys", "summary", "a1")
    assert shared_prefix_tokens(first, second) == 200
    # Units are compared as JSON, key order included: a reordered message is another one.
    a = PricedCall.of([{"role": "user", "content": "x"}], [5])
    b = PricedCall.of([{"content": "x", "role": "user"}], [5])
    assert shared_prefix_tokens(a, b) == 0


def test_units_and_counts_must_pair_up() -> None:
    with pytest.raises(ValueError, match="one count per unit"):
        PricedCall.of(["a", "b"], [1])
