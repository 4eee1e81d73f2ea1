"""Goodput: the throughput of the requests that met every per-request latency target of an SLO, counted
exactly like throughput (docs/metrics.md, "Goodput"; DistServe's and `vllm bench serve --goodput`'s notion)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from atlas.loadgen import LoadRun, RequestRecord
from atlas.metrics import e2e_ms, steady_window, tokens_in_window, tpot_ms, ttft_ms
from atlas.slo import SloSpec

_LATENCY = {"ttft": ttft_ms, "tpot": tpot_ms, "e2e": e2e_ms}


class Goodput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    slo: str  # SloSpec.describe() of the targets it was counted against
    requests_s: float | None
    output_tok_s: float | None
    attainment: float | None  # share of successful measured requests that met every per-request target


def request_met(r: RequestRecord, targets: dict[str, float]) -> bool:
    """Whether one request succeeded within every per-request target ({'ttft': ms, 'tpot': ms, 'e2e': ms}).
    A one-token answer has no TPOT, so a TPOT target does not judge it."""
    if r.status != "ok":
        return False
    for kind, limit in targets.items():
        v = _LATENCY[kind](r)
        if v is not None and v > limit:
            return False
    return True


def goodput(runs: Sequence[LoadRun], slo: SloSpec) -> Goodput:
    """Mean over repeats of the request-equivalents and output tokens inside the steady window that came from
    requests meeting every per-request target, each divided by the window; attainment over all repeats."""
    targets = slo.per_request_targets()
    rps, tps, met, counted = [], [], 0, 0
    for run in runs:
        window = steady_window(run)
        if window is None:
            continue
        start, end = window
        duration = max(end - start, 1e-9)
        req, tok = 0.0, 0
        for r in run.records:
            if not r.output_tokens or not request_met(r, targets):
                continue
            inside = tokens_in_window(r, start, end)
            tok += inside
            req += inside / r.output_tokens
        rps.append(req / duration)
        tps.append(tok / duration)
        measured = [r for r in run.records if r.phase == "measure" and r.status == "ok"]
        counted += len(measured)
        met += sum(request_met(r, targets) for r in measured)
    return Goodput(slo=slo.describe(), requests_s=sum(rps) / len(rps) if rps else None,
                   output_tok_s=sum(tps) / len(tps) if tps else None,
                   attainment=met / counted if counted else None)
