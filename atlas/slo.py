"""Latency SLOs: the targets a configuration must meet (spec `slo:` or `--slo`) and whether a measured point
meets them, with the reason when it does not. Goodput (requests that met every target) is atlas/goodput.py."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from atlas.models import Frozen

if TYPE_CHECKING:
    from atlas.metrics import LoadSummary

_TARGET = re.compile(r"(ttft|tpot|itl|e2e)_p(\d+)_ms")
_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E"}


class SloError(ValueError):
    """An SLO that cannot be used (unknown metric, not a number)."""


class SloSpec(Frozen):
    """Latency targets in ms (each an upper bound on that percentile) and a maximum error rate. An unset
    target is not checked; an SLO with no target at all holds everywhere."""

    ttft_p50_ms: float | None = Field(None, gt=0)
    ttft_p90_ms: float | None = Field(None, gt=0)
    ttft_p99_ms: float | None = Field(None, gt=0)
    tpot_p50_ms: float | None = Field(None, gt=0)
    tpot_p90_ms: float | None = Field(None, gt=0)
    tpot_p99_ms: float | None = Field(None, gt=0)
    itl_p99_ms: float | None = Field(None, gt=0)
    e2e_p90_ms: float | None = Field(None, gt=0)
    e2e_p99_ms: float | None = Field(None, gt=0)
    max_error_rate: float | None = Field(None, ge=0.0, le=1.0)

    def targets(self) -> dict[str, float]:
        """{'ttft_p99_ms': 1000.0, ...}: the latency targets that are set, in field order."""
        return {k: v for k, v in self.model_dump().items() if v is not None and k != "max_error_rate"}

    def is_empty(self) -> bool:
        return not self.targets() and self.max_error_rate is None

    def describe(self) -> str:
        parts = [f"{_pretty(k)} <= {v:g} ms" for k, v in self.targets().items()]
        if self.max_error_rate is not None:
            parts.append(f"errors <= {self.max_error_rate:.0%}")
        return ", ".join(parts) or "no latency target"

    def samples_needed(self) -> int:
        """Successful requests a point needs before its highest targeted percentile is reported (p99: 100)."""
        ps = [int(m.group(2)) for k in self.targets() if (m := _TARGET.fullmatch(k))]
        return max((math.ceil(1.0 / (1.0 - p / 100.0) - 1e-9) for p in ps), default=1)

    def violations(self, summary: LoadSummary | None) -> list[str]:
        """Why a measured point does not meet the SLO ([] when it does). A targeted percentile the point could
        not report (too few samples, every request failed) is a violation: it was not shown to hold."""
        if summary is None:
            return ["not measured"]
        out = []
        for name, limit in self.targets().items():
            v = summary.value(name)
            if v is None:
                out.append(f"{_pretty(name)} not measured ({_why_missing(summary, name)})")
            elif v > limit:
                out.append(f"{_pretty(name)} {v:.4g} ms > {limit:g} ms")
        if self.max_error_rate is not None and summary.error_rate > self.max_error_rate:
            out.append(f"error rate {summary.error_rate:.1%} > {self.max_error_rate:.0%}")
        return out

    def per_request_targets(self) -> dict[str, float]:
        """{'ttft': 1000.0, 'tpot': 50.0, ...}: a p-th percentile target of X ms bounds each request's own
        TTFT / TPOT / E2E by X ms (the tightest target per latency). ITL has no single per-request value (a request
        has many gaps), so an ITL target is judged on its percentile only."""
        out: dict[str, float] = {}
        for name, limit in self.targets().items():
            m = _TARGET.fullmatch(name)
            if m and m.group(1) != "itl":
                out[m.group(1)] = min(limit, out.get(m.group(1), limit))
        return out


def _pretty(name: str) -> str:
    m = _TARGET.fullmatch(name)
    return f"{_NAMES[m.group(1)]} p{m.group(2)}" if m else name


def _why_missing(summary: LoadSummary, name: str) -> str:
    m = _TARGET.fullmatch(name)
    stat = summary.stat(f"{m.group(1)}_ms", int(m.group(2))) if m else None
    return (stat.reason if stat is not None and stat.reason else "no successful request")


def parse_slo(items: Sequence[str]) -> SloSpec:
    """`--slo ttft_p99_ms<=1000 --slo tpot_p99_ms<=50 --slo max_error_rate<=0.01` as an SloSpec."""
    values: dict[str, float] = {}
    for text in items:
        name, op, value = (t.strip() for t in text.partition("<="))
        if not op:
            raise SloError(f"--slo {text!r}: expected TARGET<=VALUE, e.g. ttft_p99_ms<=1000")
        if name not in SloSpec.model_fields:
            raise SloError(f"--slo {text!r}: unknown target {name!r}; known: {', '.join(SloSpec.model_fields)}")
        try:
            values[name] = float(value)
        except ValueError:
            raise SloError(f"--slo {text!r}: {value!r} is not a number") from None
    try:
        return SloSpec(**values)
    except ValueError as e:
        raise SloError(f"--slo: {str(e).splitlines()[-1].strip()}") from None
