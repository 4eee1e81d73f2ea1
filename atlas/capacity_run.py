"""Runs the capacity search of one server config on its live engine: the first guess (the simulator where it
is calibrated, else the config's own closed-loop points, else the spec's start rate), then one measured load
point per rate the search asks for, then the capacity record. Every rate is measured through the sweep's own
`measure`, so each is a normal recorded point, and a stored one is reused under --resume."""

from __future__ import annotations

from collections.abc import Callable

from atlas.capacity import CapacityResult, CapacitySearch, Trial, at_capacity, rate_point
from atlas.config import SweepSpec
from atlas.plan import PlannedRun, RunConfig
from atlas.quality import QualityResult
from atlas.results import RunResult

MEASURED_STATUSES = ("ok", "quality_failed")  # quality_failed: measured fine, gated on quality only
Guess = tuple[float, float, str]  # rate, bracketing step, where it came from


def trial_of(result: RunResult, spec: SweepSpec) -> Trial:
    """What one measured rate says: passed when the point is valid and meets every SLO target."""
    assert spec.slo is not None and result.config.load.rate_rps is not None
    rate = result.config.load.rate_rps
    m = result.metrics
    why = [] if result.status in MEASURED_STATUSES else [f"{result.status}: {'; '.join(result.reasons)}"]
    if result.status in MEASURED_STATUSES or (result.status == "invalid" and m is not None and m.n_ok):
        why += spec.slo.violations(m)
    e2e = m.value("e2e_p50_ms") if m is not None else None
    return Trial(rate_rps=rate, run_id=result.run_id, status=result.status, passed=not why, why=why,
                 in_flight=None if e2e is None else rate * e2e / 1e3)


# the verdicts (atlas.client_check, atlas.host_check) that say nothing of the server at a rate, and what a capacity
# record says when a rate given one on both tries bounds the capacity from above
TRANSIENT_BOUNDS = {
    "client-bound:": "the load client fell behind (measured twice): this host's client, not the server, may set the "
                     "capacity's upper bound (--client-procs where cores are free)",
    "host busy:": "other programs took the engine's CPU time (measured twice): they, not the server, may set the "
                  "capacity's upper bound (measure again on a quiet host)"}
TRANSIENT = tuple(TRANSIENT_BOUNDS)


def transient_only(result: RunResult) -> bool:
    """Invalid only because the load client fell behind or another program took the host's CPUs: says nothing
    of the server at this rate."""
    return (result.status == "invalid" and bool(result.reasons)
            and all(r.startswith(TRANSIENT) for r in result.reasons))


def ladder_guess(spec: SweepSpec, ladder: list[RunResult]) -> Guess | None:
    """From the config's measured load ladder: the best request rate of a valid point within the SLO (open
    loop will queue more than that, so the bracket steps by 1.5), else half the lowest measured rate."""
    assert spec.slo is not None
    valid = [r for r in ladder if r.status in MEASURED_STATUSES and r.metrics and r.metrics.requests_s]
    within = [r for r in valid if not spec.slo.violations(r.metrics)]
    if within:
        best = max(within, key=lambda r: r.metrics.requests_s or 0.0)  # type: ignore[union-attr]
        return best.metrics.requests_s, 1.5, f"{best.config.load.label()} within the SLO"  # type: ignore[union-attr,return-value]
    if valid:
        low = min(valid, key=lambda r: r.metrics.requests_s or 0.0)  # type: ignore[union-attr]
        return low.metrics.requests_s / 2, 2.0, f"half of {low.config.load.label()} (over the SLO)"  # type: ignore[union-attr,operator]
    return None


def capacity_record(spec: SweepSpec, cfg: RunConfig, status: str, reasons: list[str]) -> CapacityResult:
    """A capacity record of this server config under the spec's SLO and settings, with nothing found yet."""
    assert spec.slo is not None
    return CapacityResult(sweep=spec.name, server_key=cfg.server_key(), label=cfg.server.label(), engine=cfg.engine,
                          gpu=cfg.gpu, config=cfg, status=status, reasons=reasons, slo=spec.slo,  # type: ignore[arg-type]
                          settings=spec.capacity,
                          mode=rate_point(spec, 1.0).mode.value)


def not_searched(spec: SweepSpec, cfg: RunConfig, reason: str, status: str = "not_searched") -> CapacityResult:
    return capacity_record(spec, cfg, status, [reason])


def quality_blocks(spec: SweepSpec, quality: QualityResult | str | None) -> str | None:
    """Why a config is not searched for its numerics' quality (None: it is searched)."""
    if spec.capacity.search_quality_failed:
        return None
    if isinstance(quality, str):
        return f"not searched: {quality}"
    if quality is not None and not quality.gate_passed:
        return f"not searched: its numerics failed the quality gate ({'; '.join(quality.gate_reasons)})"
    return None


def search_capacity(spec: SweepSpec, cfg: RunConfig, ladder: list[RunResult],
                    measure: Callable[[PlannedRun], RunResult], say: Callable[[str], None] = lambda m: None,
                    guess: Guess | None = None) -> tuple[CapacityResult, list[RunResult]]:
    """The capacity record of one server config and the points measured for it. `cfg`: any planned config of
    the server (its load is replaced per rate); `ladder`: the server's points already measured; `guess`: a
    first guess from elsewhere (the simulator)."""
    assert spec.slo is not None
    cap = spec.capacity
    guess = guess or ladder_guess(spec, ladder) or (cap.start_rps or 1.0, 2.0, "the spec's start rate"
                                                    if cap.start_rps else "a default of 1 rps (no better guess)")
    search = CapacitySearch(cap, guess[0], guess[1])
    trials: list[Trial] = []
    points: list[RunResult] = []
    by_run: dict[str, RunResult] = {}
    while (rate := search.next_rate(trials)) is not None:
        c = cfg.model_copy(update={"load": rate_point(spec, rate)})
        result = measure(PlannedRun(run_id=c.run_id(), config=c))
        if transient_only(result):  # the client's or the host's delay says nothing of the server's: again
            say(f"capacity {cfg.server.label()}: {rate:g} rps was {result.reasons[0][:120]}; measuring it again")
            result = measure(PlannedRun(run_id=c.run_id(), config=c))
        points.append(result)
        by_run[result.run_id] = result
        trials.append(t := trial_of(result, spec))
        if result.status == "failed":  # the engine died or could not be verified: nothing more to learn
            break
        say(f"capacity {cfg.server.label()}: {rate:g} rps {'meets' if t.passed else 'misses'} the SLO"
            + ("" if t.passed else f" ({'; '.join(t.why)[:140]})"))
    record = capacity_record(spec, cfg, "ok", []).model_copy(update={
        "trials": trials, "guess_rps": search.guess, "guess_from": guess[2]})
    lo, hi = search.bracket(trials)
    if lo is None:
        last = trials[-1] if trials else None
        if last is not None and last.status == "failed":
            return record.model_copy(update={"status": "failed", "reasons": last.why}), points
        low = min(trials, key=lambda t: t.rate_rps)
        why = f"meets the SLO at no rate: {'; '.join(low.why)} already at {low.rate_rps:g} rps"
        if low.in_flight is not None and low.in_flight < 1:
            why += f" ({low.in_flight:.2f} requests in flight on average: the engine all but idle)"
        elif low.rate_rps / search.step < cap.min_rps:
            why += f" (lower rates are not searched: capacity.min_rps is {cap.min_rps:g})"
        return record.model_copy(update={"status": "no_capacity", "reasons": [why]}), points
    at = by_run.get(next(t.run_id for t in trials if t.rate_rps == lo and t.passed))
    assert at is not None and at.metrics is not None
    notes = []
    if hi is None:
        notes.append(f"no rate up to {max(t.rate_rps for t in trials):g} rps missed the SLO: the capacity is at "
                     f"least this ({'search budget spent' if len(trials) >= cap.max_measurements else 'max_rps'})")
    elif (hi - lo) / hi > cap.precision:
        notes.append(f"precision {(hi - lo) / hi:.0%} > {cap.precision:.0%} asked: the search budget "
                     f"({cap.max_measurements} rates) was spent first")
    if trials[-1].status == "failed":
        notes.append(f"the search stopped early: {'; '.join(trials[-1].why)}")
    upper = next((t for t in trials if t.rate_rps == hi and not t.passed), None)
    if upper is not None:
        notes += [f"at {hi:g} rps {note}" for mark, note in TRANSIENT_BOUNDS.items()
                  if any(mark in w for w in upper.why)]
    return record.model_copy(update={
        "reasons": notes, "capacity_rps": lo, "upper_rps": hi, "point_run_id": at.run_id,
        "achieved_precision": None if hi is None else (hi - lo) / hi, **at_capacity(lo, at)}), points
