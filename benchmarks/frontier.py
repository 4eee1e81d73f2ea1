"""Non-dominated set speed, in one run on the same data: Atlas's frontier (atlas.nondominated: NumPy passes, a
pivot cull above 4,096 rows and an exact O(n log^2 n) pass), its first algorithm
(a row-by-row cull in order of scaled sum, kept as atlas.nondominated._cull_in_sum_order for k > 3),
a compiled (numba) variant of Atlas's cull that Atlas does not use (benchmarks/frontier_compiled.py: what
compiled loops gain, and what importing numba costs a process), and the `paretoset` package (numba-compiled
when numba is installed), on uniform, correlated and anti-correlated objectives. Compiled methods are compiled
before timing; every method is timed best of `repeats`; the sets are compared.

    .venv/bin/python benchmarks/frontier.py [N] [N_QUADRATIC] [--paretoset-anti]

N (default 1,000,000) rows x 3 objectives. Anti-correlated data put most rows on the frontier, where the
first cull and paretoset cost O(n x frontier): they run at N_QUADRATIC rows (default 20,000) beside Atlas at the
same size, and Atlas and the compiled cull also at N; --paretoset-anti runs paretoset once at N too (about two
minutes at a million rows on the development host), against Atlas's time on the same rows.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

from atlas.frontier import hypervolume, non_dominated
from atlas.nondominated import _cull_in_sum_order


def best_of(fn: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    best, out = float("inf"), np.zeros(0, dtype=bool)
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def shapes(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    z = rng.random(n)
    return {"uniform": rng.random((n, 3)),
            "correlated": np.column_stack([z, z + 0.1 * rng.random(n), z + 0.1 * rng.random(n)]),
            # near the plane where the three sum to 1 (a Dirichlet draw), a little noise off it
            "anti-correlated": rng.dirichlet(np.ones(3), n) + 0.02 * rng.random((n, 3))}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 1_000_000
    n_quad = int(args[1]) if len(args) > 1 else 20_000
    ps_anti = "--paretoset-anti" in sys.argv
    try:  # before paretoset, which imports numba too: what a process pays to use the compiled cull
        t = time.perf_counter()
        import numba  # noqa: F401

        t_import = time.perf_counter() - t
        from frontier_compiled import non_dominated_compiled

        non_dominated_compiled(np.random.default_rng(1).random((10_000, 3)))
        print(f"compiled cull: numba imported in {t_import:.2f} s, its loops compiled (first run on this machine) "
              f"or loaded from numba's cache in {time.perf_counter() - t - t_import:.2f} s")
    except ImportError:
        non_dominated_compiled = None  # type: ignore[assignment]
    try:
        from paretoset import paretoset

        paretoset(np.random.default_rng(1).random((200, 3)), sense=["min"] * 3)  # compile before timing

        def ps(x: np.ndarray) -> np.ndarray:
            return np.asarray(paretoset(x, sense=["min"] * 3))
    except ImportError:
        ps = None  # type: ignore[assignment]
    methods: dict[str, Callable[[np.ndarray], np.ndarray] | None] = {
        "atlas": non_dominated, "first atlas (sum-order cull)": _cull_in_sum_order,
        "compiled cull (not used)": non_dominated_compiled, "paretoset": ps}
    print(f"{'data':16s} {'rows':>9s} {'frontier':>8s}  " + "  ".join(f"{m:>32s}" for m in methods)
          + "  same sets  paretoset/atlas, /compiled")
    for size in sorted({n, n_quad}, reverse=True):
        for name, x in shapes(size, np.random.default_rng(0)).items():
            quadratic = name == "anti-correlated" and size > n_quad
            times, masks = {}, {}
            for m, fn in methods.items():
                once = quadratic and m == "paretoset" and ps_anti
                if fn is None or (quadratic and m not in ("atlas", "compiled cull (not used)") and not once):
                    continue
                times[m], masks[m] = best_of(lambda fn=fn, x=x: fn(x), 3 if size <= n_quad or m == "atlas" else 1)
            ref = masks["atlas"]
            same = all(np.array_equal(ref, v) for v in masks.values())
            cells = "  ".join(f"{times[m]:>30.4f} s" if m in times else f"{'(quadratic: not run)':>32s}"
                              for m in methods)
            ratio = "  ".join(f"{times['paretoset'] / times[m]:.1f}x" if "paretoset" in times and m in times else "-"
                              for m in ("atlas", "compiled cull (not used)"))
            print(f"{name:16s} {size:>9,d} {int(ref.sum()):>8,d}  {cells}  {str(same):>9s}  {ratio:>15s}")
    x = shapes(n, np.random.default_rng(0))["uniform"]
    front = x[non_dominated(x)]
    t_hv, _ = best_of(lambda: np.array([hypervolume(front, np.ones(3))]), 3)
    print(f"hypervolume of the uniform frontier ({len(front)} points): {hypervolume(front, np.ones(3)):.6f} "
          f"in {t_hv:.3f} s")


if __name__ == "__main__":
    main()
