"""A regression gate over a comparison: `--fail-on 'tpot_p50_ms:+5%'` fails when a matched point's TPOT p50 rose
by more than 5%, `--fail-on 'accuracy:-0.02'` when accuracy fell by more than 0.02 (absolute, in the metric's
own unit). A change only fails where it is also significant (or where no test applies: one repeat and no
interval), so the gate does not trip on noise it can see; a point good on the baseline and not on the new side
fails any gate, its metrics no longer standing for the config."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from atlas.compare import COMPARED, Comparison, PointComparison

_RULE = re.compile(r"^(?P<metric>[a-z0-9_]+):(?P<sign>[+-])(?P<amount>\d+(?:\.\d+)?)(?P<pct>%?)$")


class GateError(ValueError):
    pass


class FailOn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str
    direction: int  # +1: a rise fails; -1: a fall fails
    amount: float
    relative: bool  # amount is a fraction of the baseline value

    def describe(self) -> str:
        sign = "+" if self.direction > 0 else "-"
        return f"{self.metric}:{sign}{self.amount * 100:g}%" if self.relative else f"{self.metric}:{sign}{self.amount:g}"


def parse_fail_on(text: str) -> FailOn:
    m = _RULE.fullmatch(text.strip())
    if m is None:
        raise GateError(f"--fail-on {text!r}: expected METRIC:+N% or METRIC:-N (e.g. tpot_p50_ms:+5%, accuracy:-0.02)")
    metric = m["metric"]
    if metric not in (*COMPARED, "capacity_rps"):
        raise GateError(f"--fail-on {text!r}: {metric!r} is not compared (one of {', '.join(COMPARED)}, capacity_rps)")
    amount = float(m["amount"]) / (100.0 if m["pct"] else 1.0)
    return FailOn(metric=metric, direction=1 if m["sign"] == "+" else -1, amount=amount, relative=bool(m["pct"]))


def gate(comparison: Comparison, rules: list[FailOn]) -> list[str]:
    """One line per regression the rules fail on (empty: the gate passes)."""
    if not rules:
        return []
    out = []
    for p in comparison.judged():
        where = p.label if isinstance(p, PointComparison) else f"{p.label} at capacity"
        if p.status_regressed:
            why = f" ({'; '.join(p.new_reasons)})" if p.new_reasons else ""
            out.append(f"{where}: was ok, now {p.new_status}{why}")
            continue
        by = {c.metric: c for c in p.changes}
        for rule in rules:
            c = by.get(rule.metric)
            if c is None or c.significant is False:
                continue
            moved = c.change * rule.direction
            if rule.relative:
                if c.relative is None or c.relative * rule.direction <= rule.amount:
                    continue
                size = f"{c.relative * 100:+.1f}%"
            else:
                if moved <= rule.amount:
                    continue
                size = f"{c.change:+.4g}"
            out.append(f"{where}: {c.metric} {c.old:.4g} -> {c.new:.4g} ({size}, limit {rule.describe()}; {c.test})")
    return out
