import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from atlas.frontier import (
    Constraint,
    FrontierError,
    Objective,
    compute_frontier,
    hypervolume,
    non_dominated,
    parse_constraint,
    parse_objective,
    robust_non_dominated,
)


def brute(x):
    n = len(x)
    return np.array([not any(np.all(x[j] <= x[i]) and np.any(x[j] < x[i]) for j in range(n) if j != i)
                     for i in range(n)], dtype=bool)


@settings(max_examples=150, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(0, 60), st.integers(1, 4)),
              elements=st.floats(-5, 5, allow_nan=False).map(lambda v: round(v, 1))))
def test_non_dominated_matches_brute_force(x):
    assert np.array_equal(non_dominated(x), brute(x))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 3)), elements=st.floats(0, 1)))
def test_frontier_invariants(x):
    m = non_dominated(x)
    assert m.any()  # a non-empty set always has a non-dominated point
    # adding a dominated copy changes nothing on the frontier
    worse = np.vstack([x, x[m][:1] + 1.0])
    assert np.array_equal(non_dominated(worse)[:-1], m) and not non_dominated(worse)[-1]
    # permutation invariance
    p = np.random.default_rng(0).permutation(len(x))
    assert np.array_equal(non_dominated(x[p]), m[p])


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 12), st.just(2)), elements=st.floats(0, 0.99)))
def test_hypervolume_2d_matches_grid_count(x):
    hv = hypervolume(x, np.array([1.0, 1.0]))
    g = (np.arange(200) + 0.5) / 200
    xx, yy = np.meshgrid(g, g)
    covered = np.zeros_like(xx, dtype=bool)
    for px, py in x:
        covered |= (xx >= px) & (yy >= py)
    assert hv == pytest.approx(covered.mean(), abs=0.02)


def test_hypervolume_known_values():
    assert hypervolume(np.array([[1, 2], [2, 1]]), np.array([3, 3])) == 3.0
    assert hypervolume(np.array([[0, 0, 0]]), np.array([1, 2, 3])) == 6.0
    assert hypervolume(np.array([[0.5, 0.5, 0.5], [0.0, 0.0, 0.9]]), np.ones(3)) == pytest.approx(0.125 + 0.1 - 0.025)


def test_robust_dominance_needs_separated_intervals():
    v = np.array([[1.0, 1.0], [1.1, 1.1]])
    wide_lo, wide_hi = v - 0.5, v + 0.5
    assert robust_non_dominated(v, wide_lo, wide_hi).all()  # overlapping intervals: both kept
    narrow_lo, narrow_hi = v - 0.01, v + 0.01
    assert robust_non_dominated(v, narrow_lo, narrow_hi).tolist() == [True, False]


def _frame():
    return pd.DataFrame([
        {"run_id": "a", "status": "ok", "reason": "", "cost": 1.0, "lat": 10.0, "acc": 0.8},
        {"run_id": "b", "status": "ok", "reason": "", "cost": 2.0, "lat": 5.0, "acc": 0.8},
        {"run_id": "c", "status": "ok", "reason": "", "cost": 3.0, "lat": 12.0, "acc": 0.7},
        {"run_id": "d", "status": "quality_failed", "reason": "degenerate outputs", "cost": 0.1, "lat": 1.0, "acc": 0.0},
        {"run_id": "e", "status": "ok", "reason": "", "cost": 0.5, "lat": None, "acc": 0.9},
    ])


def test_compute_frontier_excludes_with_reasons_and_applies_slo():
    objs = [Objective(metric="cost", sense="min"), Objective(metric="lat", sense="min"),
            Objective(metric="acc", sense="max")]
    fr = compute_frontier(_frame(), objs, robust=False).set_index("run_id")
    assert fr.loc["a", "on_frontier"] and fr.loc["b", "on_frontier"] and not fr.loc["c", "on_frontier"]
    assert not fr.loc["d", "eligible"] and "degenerate" in fr.loc["d", "excluded_reason"]
    assert fr.loc["e", "excluded_reason"] == "not measured: lat"
    fr = compute_frontier(_frame(), objs, [Constraint(metric="lat", max=8.0)], robust=False).set_index("run_id")
    assert "violates SLO lat <= 8" in fr.loc["a", "excluded_reason"] and fr.loc["b", "on_frontier"]


def test_parsers():
    assert parse_constraint("ttft_p99_ms<=500") == Constraint(metric="ttft_p99_ms", max=500)
    assert parse_objective("accuracy:max").sense == "max"
    for bad in ("nope<=1", "ttft_p99_ms<500", "accuracy>=x"):
        with pytest.raises(FrontierError):
            parse_constraint(bad)
    with pytest.raises(FrontierError):
        parse_objective("accuracy:up")
