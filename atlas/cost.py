"""Cost: an hourly price and a measured throughput give dollars per million tokens."""

from __future__ import annotations

from atlas.hardware import price_usd_per_hour
from atlas.metrics import LoadSummary
from atlas.results import CostResult


def usd_per_million(usd_per_hour: float, tokens_per_s: float | None) -> float | None:
    """$ per 1e6 tokens at a sustained rate; None when nothing was produced."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


def cost_of(gpu: str, summary: LoadSummary | None, provider: str | None = None) -> CostResult:
    price, source = price_usd_per_hour(gpu, provider)
    out_tok_s = summary.output_tok_s if summary else None
    total_tok_s = None
    if summary and summary.output_tok_s and summary.input_tok_s is not None:
        total_tok_s = summary.output_tok_s + summary.input_tok_s
    return CostResult(usd_per_hour=price, price_source=source,
                      usd_per_m_output_tokens=usd_per_million(price, out_tok_s),
                      usd_per_m_total_tokens=usd_per_million(price, total_tok_s))
