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


def brute_blocked(x):
    """Every pair compared, a column at a time (n^2 booleans in blocks of rows)."""
    dom = np.zeros(len(x), dtype=bool)
    for s in range(0, len(x), 256):
        a = x[s:s + 256]
        le = np.ones((len(a), len(x)), dtype=bool)
        lt = np.zeros((len(a), len(x)), dtype=bool)
        for j in range(x.shape[1]):
            le &= a[:, j, None] <= x[None, :, j]
            lt |= a[:, j, None] < x[None, :, j]
        dom |= np.any(le & lt, axis=0)
    return ~dom


def _shaped(rng, n, k, shape, levels):
    if shape == "uniform":
        x = rng.random((n, k))
    elif shape == "correlated":
        x = rng.random(n)[:, None] + 0.1 * rng.random((n, k))
    else:  # anti-correlated: near the plane where the objectives sum to a constant (most rows on the frontier)
        x = rng.dirichlet(np.ones(k), n) + 0.02 * rng.random((n, k))
    return np.round(x * levels) / levels if levels else x  # few levels: many ties and exact copies


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(65, 1500), st.integers(2, 4),
       st.sampled_from(["uniform", "correlated", "anti"]), st.sampled_from([0, 4, 20, 1000]))
def test_non_dominated_matches_brute_force_past_the_pivots_and_across_levels(seed, n, k, shape, levels):
    """Sizes where the pivot cull runs and the 3-objective divide and conquer has many levels, on the three
    shapes of data, with and without heavy ties."""
    x = _shaped(np.random.default_rng(seed), n, k, shape, levels)
    assert np.array_equal(non_dominated(x), brute_blocked(x))


@pytest.mark.parametrize("shape", ["uniform", "correlated", "anti"])
@pytest.mark.parametrize("levels", [0, 12])
@pytest.mark.parametrize("sample", [4096, 64])
def test_non_dominated_matches_brute_force_where_both_pivot_rounds_run(shape, levels, sample, monkeypatch):
    """Above atlas.nondominated.SAMPLE rows: the least-sum pivot, then (where more than SAMPLE rows survive it)
    a sample's frontier as pivots, then the exact pass; with 12 levels most rows have exact copies."""
    from atlas import nondominated

    monkeypatch.setattr(nondominated, "SAMPLE", sample)  # 64: the second round runs at this size too
    x = _shaped(np.random.default_rng(7), 4800, 3, shape, levels)
    assert np.array_equal(non_dominated(x), brute_blocked(x))
    x2 = _shaped(np.random.default_rng(8), 4800, 2, shape, levels)
    assert np.array_equal(non_dominated(x2), brute_blocked(x2))


def test_a_large_table_of_integers_infinities_and_strided_columns(monkeypatch):
    """Above the sample size (here 64) the pivot cull takes any numeric array: integers, a column slice of a
    wider table; infinities (no finite sum to order by) go to the exact pass."""
    from atlas import nondominated

    monkeypatch.setattr(nondominated, "SAMPLE", 64)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 40, (5000, 5))[:, 1:4]
    assert not x.flags.c_contiguous
    assert np.array_equal(non_dominated(x), brute_blocked(x))
    f = rng.random((5000, 3))
    f[rng.random(5000) < 0.05, 0] = np.inf
    f[rng.random(5000) < 0.01, 2] = -np.inf
    assert np.array_equal(non_dominated(f), brute_blocked(f))


def test_non_dominated_rejects_nan_and_handles_infinities():
    with pytest.raises(FrontierError, match="NaN"):
        non_dominated(np.array([[1.0, np.nan]]))
    x = np.array([[np.inf, 0.0, 1.0], [0.0, np.inf, 1.0], [1.0, 1.0, -np.inf], [2.0, 2.0, -np.inf]] * 30)
    assert np.array_equal(non_dominated(x), brute_blocked(x))


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


@pytest.mark.parametrize("k", range(2, 9))
def test_a_pivot_compared_in_one_pass_reads_each_rows_booleans_as_one_word(k):
    """atlas.nondominated._at_least on a row-major table (blocks of TILE rows and a ragged end, values equal to
    the pivot's, every word width and the masked ones) says what the column-by-column comparison says."""
    from atlas.nondominated import TILE, _at_least

    rng = np.random.default_rng(k)
    x = np.round(rng.random((2 * TILE + 37, k)) * 5) / 5  # few levels: many values equal to the pivot's
    p = x[rng.integers(len(x))]
    assert x.flags.c_contiguous
    assert np.array_equal(_at_least(x, p), np.all(x >= p, axis=1))
    strided = np.asfortranarray(x)  # not row-major: the column-by-column path
    assert np.array_equal(_at_least(strided, p), np.all(x >= p, axis=1))
