"""Non-dominated set speed: Atlas's vectorized frontier beside the `paretoset` package, same data, one run.

    .venv/bin/python benchmarks/frontier.py [N]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from atlas.frontier import hypervolume, non_dominated


def best_of(fn, repeats: int = 3) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    rng = np.random.default_rng(0)
    cases = {"uniform": rng.random((n, 3)),
             "correlated": (lambda z: np.column_stack([z, z + 0.1 * rng.random(n), z + 0.1 * rng.random(n)]))(rng.random(n))}
    try:
        from paretoset import paretoset
    except ImportError:
        paretoset = None
    for name, x in cases.items():
        t_atlas, mask = best_of(lambda x=x: non_dominated(x))
        line = f"{name:10s} {n:,} points x 3 objectives: atlas {t_atlas:.3f} s ({int(mask.sum())} on the frontier)"
        if paretoset is not None:
            t_ps, ps_mask = best_of(lambda x=x: paretoset(x, sense=["min", "min", "min"]), repeats=1)
            same = bool(np.array_equal(mask, ps_mask))
            line += f"; paretoset {t_ps:.3f} s (same set: {same}); paretoset/atlas time ratio {t_ps / t_atlas:.2f}"
        print(line)
    front = cases["uniform"][non_dominated(cases["uniform"])]
    t_hv, hv = best_of(lambda: hypervolume(front, np.ones(3)))
    print(f"hypervolume of the uniform frontier ({len(front)} points): {hv:.6f} in {t_hv:.3f} s")


if __name__ == "__main__":
    main()
