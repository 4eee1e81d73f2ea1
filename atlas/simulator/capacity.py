"""Capacity under an SLO predicted by the calibrated simulator: the same search over open-loop rates as a
measured sweep, on simulated points (the discrete-event model runs the same request schedule the load
generator would). Its interval comes from the calibration's held-out error: the capacity found with every
targeted latency scaled by (1 + e) and by (1 - e). Used for configs that were not measured (labelled
simulated) and as the first guess of a measured search."""

from __future__ import annotations

import math

from atlas.capacity import CapacityResult, at_capacity, rate_point, round_rate
from atlas.capacity_run import Guess, capacity_record
from atlas.config import SweepSpec
from atlas.hardware import GpuSpec
from atlas.metrics import LoadSummary
from atlas.plan import PlannedRun, RunConfig, expand
from atlas.probe import HardwareProbe
from atlas.results import RunResult
from atlas.simulator.features import SimulatorError
from atlas.simulator.fit import CalibrationArtifact
from atlas.simulator.predict import predict_config, quality_sources, with_quality

_BASE = {"ttft": "ttft_p50_ms", "tpot": "tpot_p50_ms", "itl": "tpot_p50_ms", "e2e": "e2e_p50_ms"}


def _error_for(target: str, errors: dict[str, float]) -> float:
    """The held-out error of the metric a target is closest to (TTFT p99 has its own where judged)."""
    if target in errors:
        return errors[target]
    return errors.get(_BASE[target.split("_", 1)[0]], 0.25)


class _Predictor:
    def __init__(self, artifact: CalibrationArtifact, spec: SweepSpec, cfg: RunConfig, provider: str | None,
                 probe: HardwareProbe | None = None):
        self.artifact, self.spec, self.cfg, self.provider, self.probe = artifact, spec, cfg, provider, probe
        self.cache: dict[float, RunResult] = {}

    def at(self, rate: float) -> RunResult:
        if rate not in self.cache:
            c = self.cfg.model_copy(update={"load": rate_point(self.spec, rate)})
            self.cache[rate] = predict_config(self.artifact, c, c.run_id(), self.spec.name, self.provider, self.probe)
        return self.cache[rate]

    def passes(self, rate: float, scale: float) -> bool:
        """Whether the predicted point at `rate` is valid and meets the SLO with latencies scaled by
        (1 + scale x their held-out error)."""
        r = self.at(rate)
        m: LoadSummary | None = r.metrics
        assert self.spec.slo is not None and r.simulation is not None
        if m is None or not m.valid:
            return False
        for name, limit in self.spec.slo.targets().items():
            v = m.value(name)
            if v is None or v * (1 + scale * _error_for(name, r.simulation.relative_error)) > limit:
                return False
        return True

    def capacity(self, scale: float, precision: float = 0.01) -> float | None:
        cap = self.spec.capacity
        lo, hi, rate = None, None, 1.0
        for _ in range(60):  # bracket by doubling or halving
            if self.passes(rate, scale):
                lo = rate
                if hi is not None or rate * 2 > cap.max_rps:
                    break
                rate *= 2
            else:
                hi = rate
                if lo is not None or rate / 2 < cap.min_rps:
                    break
                rate /= 2
        if lo is None:
            return None
        if hi is None:
            return lo
        while (hi - lo) / hi > precision:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if self.passes(mid, scale) else (lo, mid)
        return lo


def predict_capacity(artifact: CalibrationArtifact, spec: SweepSpec, cfg: RunConfig,
                     price_provider: str | None = None, probe: HardwareProbe | None = None) -> CapacityResult:
    """The simulated capacity record of one server config (source simulated, with its interval); `probe`: the
    machine it is for."""
    if spec.slo is None:
        raise SimulatorError("a capacity prediction needs the spec's slo")
    p = _Predictor(artifact, spec, cfg, price_provider, probe)
    record = capacity_record(spec, cfg, "ok", []).model_copy(update={"source": "simulated"})
    mid = p.capacity(0.0)
    if mid is None:
        r = p.at(spec.capacity.min_rps)
        why = spec.slo.violations(r.metrics) or (r.metrics.invalid_reasons if r.metrics else ["no prediction"])
        return record.model_copy(update={"status": "no_capacity", "reasons": [
            f"simulated: meets the SLO at no rate: {'; '.join(why)} already at {spec.capacity.min_rps:g} rps"]})
    low, high = p.capacity(1.0) or 0.0, p.capacity(-1.0) or mid
    capacity = round_rate(mid)
    at = p.at(capacity)
    assert at.simulation is not None
    info = at.simulation
    how = (f"simulated with {info.artifact} (calibrated on {info.calibrated_on}); interval from the held-out error "
           f"of each targeted latency" + (f"; extrapolated: {'; '.join(info.extrapolation_reasons)}"
                                           if info.extrapolated else ""))
    return record.model_copy(update={
        "capacity_rps": capacity, "interval_rps": (round_rate(low) if low else 0.0, round_rate(max(high, mid))),
        "simulation": how, **at_capacity(capacity, at)})


def simulator_guess(artifact: CalibrationArtifact, spec: SweepSpec, price_provider: str | None = None):  # type: ignore[no-untyped-def]
    """A first-guess function for a measured capacity search: the simulated capacity where the artifact
    calibrates this config without extrapolating (bracket step 1.5), else None (the ladder guesses)."""

    def guess(cfg: RunConfig, probe: HardwareProbe | None = None) -> Guess | None:
        try:
            rec = predict_capacity(artifact, spec, cfg, price_provider, probe)
        except SimulatorError:
            return None
        if rec.capacity_rps is None or "extrapolated" in (rec.simulation or ""):
            return None
        return rec.capacity_rps, 1.5, f"the simulator ({artifact.name})"

    return guess


def predict_capacities(artifact: CalibrationArtifact, spec: SweepSpec, gpu: GpuSpec, measured: list[RunResult],
                       measured_keys: set[str], price_provider: str | None = None,
                       probe: HardwareProbe | None = None) -> list[tuple[CapacityResult, RunResult | None]]:
    """For every server config of `spec` on `gpu` whose capacity was not measured (`measured_keys`), the
    simulated capacity record and the simulated point at capacity (with its numerics' measured quality when
    there is one), so the report can put it on the capacity frontier, labelled simulated."""
    sources = quality_sources(measured)
    out: list[tuple[CapacityResult, RunResult | None]] = []
    seen: set[str] = set()
    for item in expand(spec, gpu):
        key = item.config.server_key()
        if not isinstance(item, PlannedRun) or key in measured_keys or key in seen:
            continue
        seen.add(key)
        rec = predict_capacity(artifact, spec, item.config, price_provider, probe)
        point = None
        if rec.capacity_rps is not None:
            c = item.config.model_copy(update={"load": rate_point(spec, rec.capacity_rps)})
            point = with_quality(predict_config(artifact, c, c.run_id(), spec.name, price_provider, probe), sources)
            rec = rec.model_copy(update={"point_run_id": point.run_id})
        out.append((rec, point))
    return out
