"""A calibration moved to another machine of the same kind: fit the simulator on one recording, predict the
points of a recording made on another machine, once as if it were the same machine and once with that
machine's probe (atlas/probe.py), and print both errors and whether the predictions were flagged.

    .venv/bin/python benchmarks/simulator_drift.py benchmarks/data/cpu-smollm2-llamacpp \
        benchmarks/data/cpu-smollm2-llamacpp-1core

(the second recording is the same llama.cpp configs given one core of the same host: taskset -c 0, one llama.cpp
and one BLAS thread; its sweep-spec.yaml says how it was made.) A pair recorded the same hour, 2026-12-07:

    .venv/bin/python benchmarks/simulator_drift.py benchmarks/data/cpu-smollm2-llamacpp-streams \
        benchmarks/data/cpu-smollm2-llamacpp-streams-1core

(f16, q8_0, q4_0 at 4 slots, 1-4 closed-loop streams; the second under taskset -c 0 with --threads 1.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atlas.config import load_spec  # noqa: E402
from atlas.probe import median_probe  # noqa: E402
from atlas.results import load_results  # noqa: E402
from atlas.simulator.fit import _model_of, fit  # noqa: E402
from atlas.simulator.predict import predict_config  # noqa: E402

METRICS = ("tpot_p50_ms", "output_tok_s", "ttft_p50_ms", "e2e_p90_ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calibration", type=Path)
    ap.add_argument("target", type=Path)
    args = ap.parse_args()
    model = load_spec(args.calibration / "sweep-spec.yaml").model
    train = [r for r in load_results(args.calibration)[0] if r.status in ("ok", "quality_failed")]
    test = [r for r in load_results(args.target)[0] if r.status in ("ok", "quality_failed")]
    art = fit(train, "drift", model, cross_validate=False)
    here = median_probe([r.provenance.hardware_probe for r in test if r.provenance and r.provenance.hardware_probe])
    there = median_probe([g.probe for g in art.groups if g.probe])
    print(f"calibration: {len(train)} points of {args.calibration.name}, probe {there and there.model_dump(include={'bandwidth_gb_s', 'matmul_gflop_s'})}")
    print(f"target:      {len(test)} points of {args.target.name}, probe {here and here.model_dump(include={'bandwidth_gb_s', 'matmul_gflop_s'})}")
    rows = {"as the same machine": None, "moved by the probe": here}
    for name, probe in rows.items():
        errs: dict[str, list[float]] = {k: [] for k in METRICS}
        flagged = 0
        for r in test:
            cfg = r.config.model_copy(update={"model": _model_of(r, model)})
            pred = predict_config(art, cfg, r.run_id, "drift", probe=probe)
            assert pred.metrics is not None and r.metrics is not None and pred.simulation is not None
            flagged += any("probe" in x for x in pred.simulation.extrapolation_reasons)
            for k in METRICS:
                m, p = r.metrics.value(k), pred.metrics.value(k)
                if m and p is not None:
                    errs[k].append(abs(p - m) / m)
        print(f"  {name:22s} " + "  ".join(f"{k} {np.mean(v) * 100:5.1f}%" for k, v in errs.items() if v)
              + f"  flagged {flagged}/{len(test)}")


if __name__ == "__main__":
    main()
