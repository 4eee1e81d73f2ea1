"""Held-out accuracy of the simulator on every recorded sweep: in each recording a third of the server configs of
each numerics group is held out (every third in sorted order), the rest fitted, the held-out points
predicted. Prints one row per recording and workload kind: the mean absolute percentage error of each metric,
the share of held-out values inside the predictions' 80% and 95% intervals (from the fit's own
leave-one-config-out errors), and how many predictions fall below the roofline. Where a recording holds
capacity searches (capacity/*.capacity.json), each held-out config's capacity under the recorded SLO is
predicted too (the same search on simulated points) and compared with the measured one: its error, and whether
the predicted interval meets the measured bracket [highest rate that passed, lowest that failed).

    .venv/bin/python benchmarks/simulator_holdout.py                 # every recording in benchmarks/data/
    .venv/bin/python benchmarks/simulator_holdout.py benchmarks/data/cpu-smollm2-llamacpp -v
    .venv/bin/python benchmarks/simulator_holdout.py --hold-out numerics   # numerics never measured
    .venv/bin/python benchmarks/simulator_holdout.py --folds 3   # each third held out in turn, pooled (3x the time)

A recording is a results folder with the sweep-spec*.yaml its sweep wrote; the model's facts (parameters,
layers, KV heads) come from that spec, or from a spec in configs/ for the same model where the recording's
has none. Targets (issue #19): TPOT p50 and output tok/s <= 5%, TTFT p50/p90/p99 and E2E p90 <= 15%.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atlas.config import ModelSpec, load_spec  # noqa: E402
from atlas.results import RunResult, load_capacities, load_results  # noqa: E402
from atlas.simulator.capacity import predict_capacity  # noqa: E402
from atlas.simulator.fit import LEVELS, CalibrationArtifact, _model_of, fit, numerics_of, with_facts  # noqa: E402
from atlas.simulator.predict import predict_config  # noqa: E402

METRICS = ("tpot_p50_ms", "output_tok_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "e2e_p90_ms")
TARGET = {"tpot_p50_ms": 0.05, "output_tok_s": 0.05}  # the rest: 0.15
HEAD = ("TPOT p50", "tok/s", "TTFT p50", "TTFT p90", "TTFT p99", "E2E p90")


def model_facts(folder: Path) -> tuple[ModelSpec | None, str]:
    """The recording's model with the simulator's facts, and where they came from."""
    own = sorted(folder.glob("sweep-spec*.yaml"))
    models = [load_spec(p).model for p in own]
    for p, m in zip(own, models, strict=True):
        if m.params_b is not None:
            return m, str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p)
    ids = {m.id for m in models}
    for p in sorted((ROOT / "configs").glob("*.yaml")):
        try:
            m = load_spec(p).model
        except Exception:  # noqa: BLE001 - a config this check cannot read is not a source of facts
            continue
        if m.id in ids and m.params_b is not None:
            return m, f"{p.relative_to(ROOT)} (the recording's spec has no model facts)"
    return None, "none"


def split(measured: list[RunResult], unit: str = "configs", fold: int = 0) -> tuple[list[RunResult], list[RunResult]]:
    """configs: every third server config of each numerics held out; numerics: every third numerics of each
    engine held out whole (never measured: predicted from the engine's other numerics). `fold` 0, 1 or 2: which
    third (the one starting at the first, second or third in sorted order)."""
    if unit == "numerics":
        by_engine: dict[str, set[tuple[str, str, str]]] = {}
        for r in measured:
            by_engine.setdefault(r.config.engine, set()).add(numerics_of(r))
        gone = {(e, n) for e, ns in by_engine.items() if len(ns) > 1 for n in sorted(ns)[fold::3]}
        return ([r for r in measured if (r.config.engine, numerics_of(r)) not in gone],
                [r for r in measured if (r.config.engine, numerics_of(r)) in gone])
    by_group: dict[tuple, list[RunResult]] = {}
    for r in measured:
        by_group.setdefault((r.config.engine, numerics_of(r)), []).append(r)
    train, test = [], []
    for rs in by_group.values():
        keys = sorted({r.config.server_key() for r in rs})
        held = set(keys[fold::3]) if len(keys) > 1 else set()
        train += [r for r in rs if r.config.server_key() not in held]
        test += [r for r in rs if r.config.server_key() in held]
    return train, test


def repeatability(measured: list[RunResult]) -> dict[str, float] | None:
    """How far apart two measurements of the same work are on this recording's host: points at concurrency 1
    of servers that differ only in slot count (one request at a time: the same steps) measured minutes apart.
    The mean absolute difference over their mean, per metric; a perfect model's expected error against one
    measurement is about 0.71x this (E|X - mu| / E|X1 - X2| for normal noise)."""
    same: dict[tuple, list[RunResult]] = {}  # type: ignore[type-arg]
    for r in measured:
        lp = r.config.load
        if lp.concurrency == 1:  # a seeded workload gives both the same requests
            ident = r.config.server.model_dump(exclude={"max_num_seqs"})
            same.setdefault((r.config.engine, repr(sorted(ident.items())), lp.model_dump_json()), []).append(r)
    diffs: dict[str, list[float]] = {k: [] for k in METRICS}
    for rs in same.values():
        for a, b in zip(rs, rs[1:], strict=False):
            assert a.metrics is not None and b.metrics is not None
            for k in METRICS:
                x, y = a.metrics.value(k), b.metrics.value(k)
                if x and y:
                    diffs[k].append(abs(x - y) / ((x + y) / 2))
    return {k: float(np.mean(v)) for k, v in diffs.items() if v} or None


def capacity_row(folder: Path, art: CalibrationArtifact, model: ModelSpec | None, held: set[str], verbose: bool) -> dict | None:  # type: ignore[type-arg]
    """Each held-out config's measured capacity against the capacity the calibration predicts for it under the
    same SLO and search settings (the recording's spec with the record's own SLO and settings)."""
    records = [c for c in load_capacities(folder)[0] if c.source == "measured" and c.server_key in held]
    if not records:
        return None
    spec = load_spec(sorted(folder.glob("sweep-spec*.yaml"))[0])
    row: dict = {"err": [], "meets": [], "n": 0, "none": []}  # type: ignore[type-arg]
    for c in records:
        s = spec.model_copy(update={"slo": c.slo, "capacity": c.settings})
        cfg = c.config.model_copy(update={"model": with_facts(c.config.model, model)})
        p = predict_capacity(art, s, cfg)
        row["n"] += 1
        if c.capacity_rps is None or p.capacity_rps is None:
            row["none"].append(f"{c.label}: measured {c.capacity_rps}, predicted {p.capacity_rps}")
            continue
        lo, hi = p.interval_rps or (p.capacity_rps, p.capacity_rps)
        upper = c.upper_rps if c.upper_rps is not None else math.inf
        row["err"].append(abs(p.capacity_rps - c.capacity_rps) / c.capacity_rps)
        row["meets"].append(lo < upper and hi >= c.capacity_rps)
        if verbose:
            print(f"  capacity {c.label:40s} measured {c.capacity_rps:6.3g} (next failed {c.upper_rps}) -> "
                  f"predicted {p.capacity_rps:6.3g} [{lo:.3g}, {hi:.3g}]")
    return row


def evaluate(folder: Path, verbose: bool, unit: str = "configs", fold: int = 0, folds: int = 1) -> tuple[list[tuple[str, dict]], dict | None]:  # type: ignore[type-arg]
    """The held-out rows of one recording (one per workload kind) and its capacity row (None: no searches)."""
    model, source = model_facts(folder)
    results = load_results(folder)[0]
    measured = [r for r in results if r.source == "measured" and r.status in ("ok", "quality_failed")]
    invalid = [r for r in results if r.source == "measured" and r.status == "invalid"]
    train, test = split(measured, unit, fold)
    print(f"\n{folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}"
          f"{f' (fold {fold + 1} of {folds})' if folds > 1 else ''}: {len(measured)} ok points"
          f"{f' ({len(invalid)} invalid, not used)' if invalid else ''}; fitting on {len(train)}, holding out "
          f"{len(test)} ({len({r.config.server_key() for r in test})} server configs, "
          f"{len({numerics_of(r) for r in test})} numerics); model facts from {source}")
    floor = repeatability(measured) if fold == 0 else None
    if floor:
        print("  repeatability (identical work on two servers, c=1): " + ", ".join(
            f"{k} {v * 100:.1f}%" for k, v in floor.items()) + "; a perfect model would err about 0.71x this")
    if not test or not train:
        print("  nothing to hold out")
        return [], None
    art = fit(train, "holdout", model)
    rows: dict[str, dict] = {}  # type: ignore[type-arg]
    for r in test:
        cfg = r.config.model_copy(update={"model": _model_of(r, model)})
        pred = predict_config(art, cfg, r.run_id, "holdout")
        assert pred.metrics is not None and r.metrics is not None and pred.simulation is not None
        row = rows.setdefault(r.config.load.workload_kind(), {"err": {k: [] for k in METRICS}, "cover": {
            lvl: [] for lvl in LEVELS}, "below": 0, "n": 0, "configs": set()})
        row["n"] += 1
        row["configs"].add(r.config.server_key())
        tpot = pred.metrics.value("tpot_p50_ms")
        if tpot is not None and tpot < pred.simulation.roofline_tpot_ms:
            row["below"] += 1
        for k in METRICS:
            m, p = r.metrics.value(k), pred.metrics.value(k)
            if m and p is not None:
                row["err"][k].append(abs(p - m) / m)
                for lvl, w in pred.simulation.intervals.get(k, {}).items():
                    row["cover"][lvl].append(abs(math.log(p / m)) <= w + 1e-12)
        if verbose:
            print(f"  {r.label:52s} TPOT {r.metrics.value('tpot_p50_ms'):7.1f} -> {tpot:7.1f} ms  tok/s "
                  f"{r.metrics.output_tok_s:6.1f} -> {pred.metrics.output_tok_s:6.1f}  TTFT p50 "
                  f"{r.metrics.value('ttft_p50_ms'):7.1f} -> {pred.metrics.value('ttft_p50_ms'):7.1f}")
    cap = capacity_row(folder, art, model, {r.config.server_key() for r in test}, verbose)
    return [(f"{folder.name} [{kind}]", row) for kind, row in sorted(rows.items())], cap


def fmt(row: dict) -> list[str]:  # type: ignore[type-arg]
    out = []
    for k in METRICS:
        v = row["err"][k]
        if not v:
            out.append("n/a")
            continue
        e = float(np.mean(v))
        out.append(f"{e * 100:.1f}%" + ("" if e <= TARGET.get(k, 0.15) else " ✗"))
    for lvl in LEVELS:
        c = row["cover"][lvl]
        out.append(f"{np.mean(c) * 100:.0f}% of {len(c)}" if c else "n/a")
    out.append(str(row["below"]))
    return out


def _pool(into: list[tuple[str, dict]], name: str, row: dict) -> None:  # type: ignore[type-arg]
    """Adds `row` to the row of the same name (another fold's held-out points of the same recording)."""
    for other_name, other in into:
        if other_name == name:
            for k, v in row.items():
                if isinstance(v, dict):
                    for kk, vv in v.items():
                        other[k][kk] += vv
                elif isinstance(v, set):
                    other[k] |= v
                else:
                    other[k] += v
            return
    into.append((name, row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recordings", nargs="*", type=Path, help="results folders (default: each in benchmarks/data/)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per held-out point")
    ap.add_argument("--hold-out", choices=("configs", "numerics"), default="configs",
                    help="what is held out: a third of each numerics' server configs (default), or a third of "
                         "each engine's numerics whole (predictions for numerics never measured)")
    ap.add_argument("--folds", type=int, choices=(1, 3), default=1,
                    help="3: hold out each third in turn and pool every held-out prediction (three times the "
                         "held-out points, and the time; a change's effect then stands out of one split's luck)")
    args = ap.parse_args()
    folders = args.recordings or sorted(p for p in (ROOT / "benchmarks" / "data").iterdir()
                                        if p.is_dir() and any(p.glob("sweep-spec*.yaml")))
    table: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    capacity: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    for f in folders:
        for fold in range(args.folds):
            rows, cap = evaluate(f.resolve(), args.verbose, args.hold_out, fold, args.folds)
            for name, row in rows:
                _pool(table, name, row)
            if cap is not None:
                _pool(capacity, f.name, cap)
    print("\nheld-out mean absolute % error (✗: over the target), interval coverage, predictions below the roofline:")
    head = ["recording [workload]", *HEAD, "80% covers", "95% covers", "< roofline"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, row in table:
        print(f"| {name} ({row['n']} points, {len(row['configs'])} configs) | " + " | ".join(fmt(row)) + " |")
    if capacity:
        print("\ncapacity under the recorded SLO, held-out configs: mean absolute % error (target 15%), predicted "
              "interval meeting the measured bracket:")
        print("| recording | configs | capacity error | interval meets the measured bracket | no capacity (either side) |")
        print("|---|---|---|---|---|")
        for name, row in capacity:
            err = f"{np.mean(row['err']) * 100:.1f}%" if row["err"] else "n/a"
            meets = f"{sum(row['meets'])} of {len(row['meets'])}" if row["meets"] else "n/a"
            print(f"| {name} | {row['n']} | {err} | {meets} | {'; '.join(row['none']) or '-'} |")


if __name__ == "__main__":
    main()
