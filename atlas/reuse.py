"""How much of a point's prompts the engine found in its prefix cache, from the engine's own account: vLLM's
/metrics counters (`prefix_cache_hits` / `prefix_cache_queries`, in tokens), else the cached token counts the
server put in each response (llama-server's `timings.cache_n`, OpenAI's `prompt_tokens_details.cached_tokens`).
Beside it the workload's structural reuse: the share of prompt tokens an earlier request of the list already
sent (what an unbounded cache could hit). Null with the reason where nothing says."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from atlas.loadgen import LoadRun


class PrefixReuse(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hit_rate: float | None = None  # cached prompt tokens / prompt tokens queried
    hit_tokens: float | None = None
    queried_tokens: float | None = None
    prefilled_tokens: float | None = None  # prompt tokens the engine computed (not found cached)
    source: str | None = None
    structural: float | None = None  # the workload's planned shareable fraction of prompt tokens
    reason: str | None = None


def prefix_reuse(server_metrics: dict[str, float], runs: Sequence[LoadRun],
                 structural: float | None = None) -> PrefixReuse:
    """The point's measured prefix reuse over all its requests (warm-up included: the cache sees them too)."""
    hits, queries = server_metrics.get("prefix_cache_hits"), server_metrics.get("prefix_cache_queries")
    if hits is not None and queries:
        return PrefixReuse(hit_rate=hits / queries, hit_tokens=hits, queried_tokens=queries,
                           prefilled_tokens=queries - hits, structural=structural,
                           source="engine /metrics: prefix_cache_hits / prefix_cache_queries")
    recs = [r for run in runs for r in run.records if r.prompt_tokens is not None]
    told = [r for r in recs if r.cached_tokens is not None]
    if told and len(told) == len(recs):
        q = float(sum(r.prompt_tokens or 0 for r in told))
        h = float(sum(r.cached_tokens or 0 for r in told))
        return PrefixReuse(hit_rate=h / q if q else None, hit_tokens=h, queried_tokens=q, prefilled_tokens=q - h,
                           structural=structural, source="cached tokens in each response")
    if queries == 0 and hits is not None:
        return PrefixReuse(hit_rate=None, hit_tokens=0.0, queried_tokens=0.0, structural=structural,
                           reason="the engine's prefix cache is off (it queried no tokens)")
    return PrefixReuse(structural=structural, reason="the engine reports no prefix-cache counts")
