"""What a sweep reads beside the load generator's records for one point: the engine's /metrics while the
load runs, whether the engine's own counters say it served the point, and the summary pooled over repeats."""

from __future__ import annotations

import threading

from atlas.config import LoadPoint
from atlas.engines.base import Engine
from atlas.loadgen import LoadRun
from atlas.metrics import LoadSummary, pooled_run, summarize_load


class MetricsSampler(threading.Thread):
    """Polls the engine's /metrics while load runs for the peaks of its gauges (running/waiting requests,
    KV-cache usage); what its counters added comes from the scrapes just before and after (counter_deltas)."""

    def __init__(self, engine: Engine, every_s: float = 0.5):
        super().__init__(daemon=True)
        self.engine, self.every_s = engine, every_s
        self.stop_flag = threading.Event()
        self.peak: dict[str, float] = {}

    def run(self) -> None:
        while not self.stop_flag.is_set():
            for k, v in self.engine.scrape_metrics().items():
                if not k.endswith("_total"):
                    self.peak[k] = max(self.peak.get(k, v), v)
            self.stop_flag.wait(self.every_s)

    def result(self) -> dict[str, float]:
        self.stop_flag.set()
        self.join(timeout=5)
        return {f"peak_{k.split(':', 1)[-1]}": v for k, v in self.peak.items()}


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What each /metrics counter (`*_total`) added between two scrapes, named as the sampler names them."""
    return {k.split(":", 1)[-1].removesuffix("_total"): after[k] - before[k]
            for k in after if k.endswith("_total") and k in before}


def served_check(metric: str | None, before: dict[str, float], after: dict[str, float],
                 runs: list[LoadRun]) -> tuple[bool | None, str | None]:
    """Whether the engine's own counter of generated tokens says it served this point's tokens: (False,
    reason) when it generated far fewer than the client received (another server answered), (None, why)
    when it cannot tell, (True, None) when it did."""
    received = sum(r.output_tokens for run in runs for r in run.records)
    if not metric or received == 0:
        return None, None
    if metric not in before or metric not in after:
        return None, f"the engine's {metric} counter could not be read: not cross-checked with what it served"
    generated = after[metric] - before[metric]
    if generated < 0.5 * received:
        return False, (f"the engine's own counter says it served nothing like this load: {metric} rose by "
                       f"{generated:.0f} while the client received {received} tokens")
    return True, None


SHARED_SLACK = (1.2, 64)  # generated tokens above 1.2 x received + 64: others' requests were served meanwhile


def shared_check(metric: str | None, before: dict[str, float], after: dict[str, float],
                 runs: list[LoadRun]) -> tuple[bool | None, str | None]:
    """For an endpoint Atlas did not start: (True, reason) when its counter of generated tokens rose well beyond
    what this point received (other clients shared it, so the latencies are not this load's), (False, why it
    cannot tell) without a readable counter, (None, why) when the counter went down (it is not one server's, so
    it judges nothing, not even what was served), (False, None) when the point had it to itself."""
    received = sum(r.output_tokens for run in runs for r in run.records)
    if not metric:
        return False, ("the endpoint exposes no generated-token counter: other clients sharing it during this "
                       "point are not ruled out")
    if metric not in before or metric not in after:
        return False, f"the endpoint's {metric} could not be read: other clients sharing it are not ruled out"
    generated = after[metric] - before[metric]
    factor, slack = SHARED_SLACK
    if generated < 0:
        return None, (f"the endpoint's {metric} went down during this point: /metrics answers from more than one "
                       "server (replicas behind one URL?), so neither what it served nor other clients' traffic can "
                       "be judged")
    if generated > factor * received + slack:
        return True, (f"other clients shared the endpoint during this point: its {metric} rose by {generated:.0f} "
                      f"while this point received {received} tokens, so its latencies are not this load's")
    return False, None


REPEAT_METRICS = ("output_tok_s", "requests_s", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms")


def pooled_summary(runs: list[LoadRun], per_repeat: list[LoadSummary]) -> LoadSummary:
    """Latency percentiles over all repeats' requests; throughput as the mean of the repeats' throughputs
    (a pooled window would count the gaps between repeats); valid only when every repeat is."""
    pooled = summarize_load(pooled_run(runs))
    means = {}
    for f in ("output_tok_s", "input_tok_s", "requests_s", "achieved_rate_rps"):
        vals = [getattr(s, f) for s in per_repeat]
        means[f] = sum(vals) / len(vals) if vals and all(v is not None for v in vals) else None
    many = len(per_repeat) > 1
    reasons = [f"repeat {k + 1}: {r}" if many else r for k, s in enumerate(per_repeat) for r in s.invalid_reasons]
    warnings = sorted({w for s in per_repeat for w in s.warnings})
    return pooled.model_copy(update={**means, "invalid_reasons": reasons, "valid": not reasons,
                                     "warnings": warnings, "duration_s": sum(s.duration_s for s in per_repeat)})


SHORT = ("too short", "too few samples")


def extension_factor(per_repeat: list[LoadSummary], load: LoadPoint, cap: float) -> float | None:
    """How many times more requests a point needs when its only fault is a window shorter than
    min_duration_s or fewer successful requests than min_requests (25% margin, at most `cap`); None when it
    needs none, or is invalid for another reason (errors, oversaturation: more requests would not help)."""
    reasons = [r for s in per_repeat for r in s.invalid_reasons]
    if not reasons or cap <= 1.0 or not all(r.startswith(SHORT) for r in reasons):
        return None
    need = 1.0
    for s in per_repeat:
        if s.n_ok == 0 or s.duration_s <= 0:
            return None
        need = max(need, load.min_duration_s / s.duration_s, load.min_requests / s.n_ok)
    return min(need * 1.25, cap)
