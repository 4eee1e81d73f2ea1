"""A compiled (numba) variant of atlas.nondominated's pivot cull, measured by benchmarks/frontier.py beside
Atlas's NumPy passes and `paretoset`, and not used by Atlas (README, "Frontier speed": 2.4-3.2x faster than
`paretoset` at a million rows, not the 10x issue #20 asks, while importing numba and loading these loops from
its cache cost a process about 0.46 s, and compiling them 5.4 s once per machine: more than Atlas's NumPy
frontier of a million rows takes).

Above SAMPLE rows: the frontier of an evenly spaced sample (a window, below) gives the pivots; one pass compares
each row with them until one dominates it, first with the row of least scaled sum found so far (a sample row at
first, replaced as the pass finds better), which dominates nearly every row of correlated or uniform data; the
survivors go through a block-nested-loop window in order of scaled sum while it stays within a budget of
comparisons, else through Atlas's exact pass (also used for anti-correlated data, whose sample is mostly
frontier, and for small tables). What a NumPy pass cannot do is stop comparing a row at the first pivot that
dominates it, or keep a running window of the frontier so far."""

from __future__ import annotations

import numpy as np
from numba import njit

from atlas.nondominated import _exact

SAMPLE = 4096  # rows sampled: to put the objectives on one scale, and whose frontier gives the pivots
MAX_PIVOTS = 256  # a sample frontier larger than this: the data is mostly frontier, no pivots
WINDOW_BUDGET = 50_000_000  # row comparisons the window may make before the exact pass takes over


def non_dominated_compiled(x: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of the n x k array `x` (no NaN) that no other row dominates."""
    n = len(x)
    mask = np.zeros(n, dtype=bool)
    if n <= SAMPLE:
        mask[_exact(x)] = True
        return mask
    x = np.ascontiguousarray(x, dtype=np.float64)
    sample = np.ascontiguousarray(x[:: n // SAMPLE])
    w = weights(sample)
    pivots = sample[window_frontier(sample, _by_sum(sample, w), MAX_PIVOTS)]
    if len(pivots) == 0:  # more than MAX_PIVOTS: the sample is mostly frontier, and so is the data
        mask[_exact(x)] = True
        return mask
    alive = survivors(x, pivots[_by_sum(pivots, w)], w)
    live = x[alive]
    front = window_frontier(live, _by_sum(live, w), max(1, WINDOW_BUDGET // len(alive)))
    mask[alive[front] if len(front) else alive[_exact(live)]] = True
    return mask


def _by_sum(rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Rows in order of weighted sum; a row whose sum is undefined (an infinity weighed 0) goes last."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.argsort(rows @ w)


@njit(cache=True, nogil=True, inline="always")
def _dominates(x: np.ndarray, a: int, p: np.ndarray, b: int) -> bool:  # pragma: no cover - compiled
    """Row b of p dominates row a of x: no larger in every column, smaller in one. Without branches: a
    comparison that stops at the first column decided was 1.6x slower on the one-pass cull."""
    no_larger = True
    smaller = False
    for c in range(x.shape[1]):
        no_larger &= p[b, c] <= x[a, c]
        smaller |= p[b, c] < x[a, c]
    return no_larger & smaller


@njit(cache=True, nogil=True)
def weights(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """1 / each column's range, which puts the objectives on one scale for the sum that orders rows (a row
    that dominates another has the smaller sum). Only speed depends on them: an infinite range weighs 0, an
    undefined or empty one 1. (NumPy's reductions along the short axis took 0.27 ms for 4,096 x 3.)"""
    k = x.shape[1]
    lo = np.full(k, np.inf)
    hi = np.full(k, -np.inf)
    for i in range(x.shape[0]):
        for c in range(k):
            lo[c] = min(lo[c], x[i, c])
            hi[c] = max(hi[c], x[i, c])
    w = np.ones(k)
    for c in range(k):
        span = hi[c] - lo[c]
        if span > 0:
            w[c] = 1.0 / span
    return w


@njit(cache=True, nogil=True)
def survivors(x: np.ndarray, pivots: np.ndarray, w: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """Indices of the rows of x that no pivot dominates, in one pass. Every pivot is a row of x (anything it
    dominates is off the frontier). pivots[0] is compared first and replaced, as the pass goes, by each row
    found undominated with a smaller sum weighted by `w`: the row of least such sum dominates nearly every row
    of correlated or uniform data, and a sample's best row much fewer."""
    n, k = x.shape
    piv = pivots.copy()
    best = 0.0
    for c in range(k):
        best += piv[0, c] * w[c]
    out = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if _dominates(x, i, piv, 0):
            continue
        dominated = False
        for j in range(1, piv.shape[0]):
            if _dominates(x, i, piv, j):
                dominated = True
                break
        if dominated:
            continue
        out[m] = i
        m += 1
        s = 0.0
        for c in range(k):
            s += x[i, c] * w[c]
        if s < best:  # False where the sum is undefined (an infinity weighed 0)
            best = s
            piv[0, :] = x[i, :]
    return out[:m]


@njit(cache=True, nogil=True)
def window_frontier(x: np.ndarray, order: np.ndarray, cap: int) -> np.ndarray:  # pragma: no cover - compiled
    """Indices (into x) of the non-dominated rows among x[order], by a block-nested-loop window: each row is
    compared with the rows kept so far; one that a kept row dominates is dropped, kept rows it dominates are
    dropped, else it is kept. Exact in any order (no kept row dominates another); in order of a scaled sum
    most rows are dropped against the first few kept. Empty when the window would pass `cap` rows (the
    frontier is large: the caller falls back to an O(n log^2 n) method)."""
    kept = np.empty(cap, dtype=np.int64)
    size = 0
    for r in order:
        dominated = False
        j = 0
        while j < size:
            w = kept[j]
            if _dominates(x, r, x, w):
                dominated = True
                break
            if _dominates(x, w, x, r):
                size -= 1
                kept[j] = kept[size]
                continue
            j += 1
        if not dominated:
            if size == cap:
                return np.empty(0, dtype=np.int64)
            kept[size] = r
            size += 1
    return kept[:size]
