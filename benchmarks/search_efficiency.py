"""How much of the full grid's Pareto frontier a search finds when it measures a quarter of the grid:
grid order vs random vs Optuna (with and without simulator seeds), replayed on recorded full-grid sweeps.

    .venv/bin/python benchmarks/search_efficiency.py [--fraction 0.25] [--seeds 10]

Each recording is a folder of results from a full sweep (benchmarks/data/<sweep>/) with the spec it was
measured with; a search "measures" a point by reading its recorded result, so every strategy sees exactly
the numbers a real sweep saw. Prints the hypervolume fraction (goal: >= 0.95) per strategy and objectives.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

from atlas.frontier import DEFAULT_OBJECTIVES, Objective
from atlas.hardware import get_gpu
from atlas.plan import PlannedRun, expand
from atlas.results import load_results
from atlas.search.driver import Worker
from atlas.search.replay import ReplayMeasurer, hypervolume_fraction, recording_spec
from atlas.search.settings import SearchSettings
from atlas.search.space import SearchSpace
from atlas.search.study import create_study

ROOT = Path(__file__).resolve().parent.parent
# recording folder, and a spec whose model sizes feed the simulator (grid and load: the recording's own)
RECORDINGS = [
    ("benchmarks/data/cpu-smollm2", "configs/cpu-smollm2.yaml"),
    ("benchmarks/data/cpu-smollm2-llamacpp", "configs/cpu-smollm2-llamacpp.yaml"),
]
PERPLEXITY = [Objective(metric="usd_per_m_output", sense="min"), Objective(metric="e2e_p90_ms", sense="min"),
              Objective(metric="perplexity", sense="min")]
STRATEGIES = {  # name: settings beyond strategy/budget/seed/objectives
    "grid": {"strategy": "grid"},
    "random": {"strategy": "random"},
    "optuna-tpe": {"strategy": "optuna", "simulator": False},
    "optuna-nsga2": {"strategy": "optuna", "simulator": False, "sampler": "nsga2"},
    "optuna-tpe+sim": {"strategy": "optuna"},  # the default: simulator seeds, the sampler when they run out
}


def run_one(spec, space, recorded, settings: SearchSettings) -> float:  # type: ignore[no-untyped-def]
    handle = create_study(spec, spec.gpu, settings)
    measurer = ReplayMeasurer(recorded)
    Worker(handle, space, measurer).run()
    got = [measurer.by_id[i] for i in measurer.measured]
    return hypervolume_fraction(got, list(measurer.by_id.values()), settings.objectives)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    for folder, spec_path in RECORDINGS:
        if not (ROOT / folder).exists():
            print(f"{folder}: not recorded here, skipped")
            continue
        spec = recording_spec(ROOT / folder, ROOT / spec_path)
        recorded, errors = load_results(ROOT / folder)
        planned = [i for i in expand(spec, get_gpu(spec.gpu)) if isinstance(i, PlannedRun)]
        space = SearchSpace(planned)
        budget = max(1, math.ceil(args.fraction * len(space)))
        ok = sum(r.status == "ok" for r in recorded)
        print(f"\n{folder}: {len(space)} planned points ({ok} ok in the recording), budget {budget} "
              f"({args.fraction:.0%})")
        for objs_name, objs in (("cost, p90 E2E, accuracy", list(DEFAULT_OBJECTIVES)),
                                ("cost, p90 E2E, perplexity", PERPLEXITY)):
            print(f"  objectives: {objs_name}")
            for name, extra in STRATEGIES.items():
                seeds = [0] if name == "grid" else list(range(args.seeds))
                t0 = time.perf_counter()
                fr = [run_one(spec, space, recorded, SearchSettings(budget=budget, seed=s, objectives=objs, **extra))
                      for s in seeds]
                dt = (time.perf_counter() - t0) / len(seeds)
                print(f"    {name:15s} hypervolume fraction mean {statistics.mean(fr):.3f}  min {min(fr):.3f}  "
                      f"max {max(fr):.3f}  (>= 0.95 in {sum(f >= 0.95 for f in fr)}/{len(fr)} seeds; "
                      f"{dt:.1f} s per search)")


if __name__ == "__main__":
    main()
