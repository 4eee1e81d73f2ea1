"""Held-out accuracy of the simulator on measured results: a third of the server configs of each
numerics group is held out, the rest fitted, the held-out points predicted. Prints the mean absolute
percentage error per metric and per workload kind (fixed, shared_prefix, sessions, ...: each point is simulated
from its workload's own request list) and checks that no prediction beats the roofline bound.

    .venv/bin/python benchmarks/simulator_holdout.py benchmarks/data/cpu-smollm2 --spec configs/cpu-smollm2.yaml

(benchmarks/data/cpu-smollm2 holds the embedded default sweep measured on 2026-12-02, fixed workload;
benchmarks/data/cpu-smollm2-workloads the shared-prefix and sessions sweeps of configs/cpu-smollm2-prefix.yaml and
configs/cpu-smollm2-sessions.yaml measured on 2026-12-04: the prefix-cache-off server is fitted, the prefix-cached
one held out, so the prediction crosses prefix caching:

    .venv/bin/python benchmarks/simulator_holdout.py benchmarks/data/cpu-smollm2-workloads \
        --spec configs/cpu-smollm2-prefix.yaml)
"""

from __future__ import annotations

import argparse

import numpy as np

from atlas.config import load_spec
from atlas.hardware import get_gpu
from atlas.results import load_results
from atlas.simulator.features import step_costs
from atlas.simulator.fit import _model_of, fit, numerics_of
from atlas.simulator.predict import predict_config

METRICS = ("tpot_p50_ms", "output_tok_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p90_ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--spec", default=None)
    args = ap.parse_args()
    spec_model = load_spec(args.spec).model if args.spec else None
    measured = [r for r in load_results(args.results)[0] if r.source == "measured" and r.status == "ok"]
    by_group: dict[tuple, list] = {}
    for r in measured:
        by_group.setdefault(numerics_of(r), []).append(r)
    train, test = [], []
    for rs in by_group.values():
        keys = sorted({r.config.server_key() for r in rs})
        held = set(keys[::3]) if len(keys) > 1 else set()
        train += [r for r in rs if r.config.server_key() not in held]
        test += [r for r in rs if r.config.server_key() in held]
    print(f"{len(measured)} measured points: fitting on {len(train)}, holding out {len(test)} "
          f"({len({r.config.server_key() for r in test})} server configs)")
    art = fit(train, "holdout", spec_model)
    errs: dict[tuple[str, str], list[float]] = {}
    below_roofline = 0
    for r in test:
        cfg = r.config.model_copy(update={"model": _model_of(r, spec_model)})
        pred = predict_config(art, cfg, r.run_id, "holdout")
        assert pred.metrics is not None and r.metrics is not None and pred.simulation is not None
        tpot = pred.metrics.value("tpot_p50_ms")
        if tpot is not None and tpot < pred.simulation.roofline_tpot_ms:
            below_roofline += 1
        kind = r.config.load.workload_kind()
        for k in METRICS:
            m, p = r.metrics.value(k), pred.metrics.value(k)
            errs.setdefault((kind, k), [])
            if m and p is not None:
                errs[(kind, k)].append(abs(p - m) / m)
        label = r.label
        print(f"  {label:48s} TPOT {r.metrics.value('tpot_p50_ms'):8.1f} -> {tpot:8.1f} ms   "
              f"tok/s {r.metrics.output_tok_s:6.1f} -> {pred.metrics.output_tok_s:6.1f}")
    print("held-out mean absolute % error, per workload kind:")
    for (kind, k), v in sorted(errs.items()):
        print(f"  {kind:14s} {k:14s} " + (f"{np.mean(v) * 100:5.1f}% over {len(v)} points" if v else
                                          "n/a (no measured point has enough samples for it)"))
    costs = step_costs(_model_of(measured[0], spec_model), measured[0].config.server, get_gpu(measured[0].config.gpu))
    print(f"roofline: {below_roofline} predictions below the physical bound "
          f"(single-stream decode bound {costs.roofline_s(1, 100) * 1e3:.1f} ms on the spec's bandwidth)")


if __name__ == "__main__":
    main()
