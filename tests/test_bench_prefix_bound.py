"""The stable-prefix bound of bench_recall (section v) is the true optimum of its model:
checked against an exhaustive search over every policy on small runs."""

from __future__ import annotations

import functools
import math
import random

from benchmarks.prefix_bound import any_policy_ceiling, best_prefix_share


def exhaustive(raw: list[int], masked: list[int], head: list[int], fixed: int, summary: int,
               capacity: int, keep: int) -> float:
    """Every sequence of (folded s, masked j) states, tried one by one."""
    n = len(raw)

    def total(i: int, s: int, j: int) -> int:
        return (fixed + (summary if s else 0) + sum(masked[s:j]) + sum(raw[j:i]))

    @functools.cache
    def best(i: int, s: int, j: int) -> float:
        if i == n:
            return 0.0
        before = total(i, s, j)
        found = -math.inf
        for s2 in range(s, i + 2):
            for j2 in range(max(j, s2), i + 2):
                if j2 > max(i + 1 - keep, 0) or total(i + 1, s2, j2) > capacity:
                    continue
                now = total(i + 1, s2, j2)
                if s2 > s:
                    shared = fixed
                elif j2 > j:
                    shared = fixed + (summary if s else 0) + sum(masked[s:j]) + head[j]
                else:
                    shared = before
                found = max(found, shared / now + best(i + 1, s2, j2))
        return found

    return best(0, 0, 0) / n


def test_the_bound_is_the_optimum_of_its_model_on_random_small_runs() -> None:
    rng = random.Random(14)
    checked = 0
    for _ in range(30):
        n = rng.randint(3, 9)
        raw = [rng.randint(300, 900) for _ in range(n)]
        head = [rng.randint(5, 20) for _ in range(n)]
        masked = [h + rng.randint(40, 120) for h in head]
        summary, capacity, keep = rng.choice([0, 300, 1200]), rng.randint(1_500, 3_500), \
            rng.randint(1, 2)
        want = exhaustive(raw, masked, head, 115, summary, capacity, keep)
        got = best_prefix_share(raw, masked, head, fixed=115, summary=summary,
                                capacity=capacity, keep=keep)
        if want == -math.inf:
            assert math.isnan(got)
        else:
            assert math.isclose(got, want, rel_tol=1e-12)
            checked += 1
    assert checked >= 20


def test_a_run_that_never_needs_compaction_shares_every_previous_call() -> None:
    raw, head = [100, 200, 300], [10, 10, 10]
    got = best_prefix_share(raw, [50, 50, 50], head, fixed=100, summary=0,
                            capacity=10_000, keep=2)
    assert math.isclose(got, (100 / 200 + 200 / 400 + 400 / 700) / 3)


def test_the_bound_never_exceeds_the_ceiling_of_any_compaction() -> None:
    rng = random.Random(6)
    raw = [rng.randint(400, 800) for _ in range(40)]
    head = [12] * 40
    masked = [120] * 40
    bound = best_prefix_share(raw, masked, head, fixed=115, summary=1_300, capacity=6_900,
                              keep=2)
    assert bound <= any_policy_ceiling(raw, 6_900)
    # keeping fewer groups whole allows every policy that keeping more does, and more
    assert best_prefix_share(raw, masked, head, fixed=115, summary=1_300, capacity=6_900,
                             keep=1) >= bound
