"""Request throughput three ways, from the same raw per-request records of real recorded points: Atlas's old
definition (requests that finished inside the steady window, over the window), its current one (each request
counted by the share of its tokens inside the window, like the token throughput), and `vllm bench serve`'s
(completed requests over the time from the first send to the last completion, ramp-down included). With
equal-length requests the current one equals output tok/s / tokens per request by construction.

    .venv/bin/python benchmarks/request_rate.py benchmarks/data/cpu-smollm2 benchmarks/data/cpu-smollm2-llamacpp
"""

from __future__ import annotations

import sys
from pathlib import Path

from atlas.config import LoadPoint
from atlas.loadgen import LoadRun, RequestRecord
from atlas.metrics import summarize_load
from atlas.results import ResultStore, load_results


def old_requests_s(run: LoadRun) -> float | None:
    """The definition before: finished inside the window / window (it drops a closed loop's last wave)."""
    counted = [r for r in run.records if r.phase == "measure"]
    ok = [r for r in counted if r.status == "ok" and r.end_s is not None]
    if not ok:
        return None
    start = min(r.scheduled_s for r in counted)
    last = max(r.end_s for r in ok if r.end_s is not None)
    end = run.drain_s if run.drain_s is not None and run.drain_s > start else last
    return sum(1 for r in ok if r.end_s is not None and r.end_s <= end) / max(end - start, 1e-9)


def bench_serve_requests_s(run: LoadRun) -> float | None:
    ok = [r for r in run.records if r.status == "ok" and r.end_s is not None]
    if not ok:
        return None
    t0 = min(r.sent_s if r.sent_s is not None else r.scheduled_s for r in run.records)
    return len(ok) / max(max(r.end_s for r in ok if r.end_s is not None) - t0, 1e-9)


def drain_of(records: list[RequestRecord], concurrency: int) -> float | None:
    """When the first stream ran out of work: the end of the c-th last request to finish, recomputed from
    the records (a closed loop's streams each end with one request)."""
    ends = sorted(r.done_s for r in records if r.done_s is not None)
    return ends[-concurrency] if len(ends) >= concurrency else None


def main() -> None:
    gaps: dict[str, list[float]] = {"old": [], "now": []}
    print(f"{'recording':28} {'point':44} {'old':>7} {'now':>7} {'bench':>7} {'tok/s/L':>8}  now/old")
    for folder in map(Path, sys.argv[1:]):
        results, _ = load_results(folder)
        store = ResultStore(folder.parent, folder.name)
        for r in sorted(results, key=lambda r: r.label):
            lp = r.config.load
            if r.status not in ("ok", "invalid", "quality_failed") or not r.records_file or not lp.concurrency:
                continue
            if lp.concurrency < 4:
                continue
            rows = [x for x in store.read_records(r) if x.get("repeat", 0) == 0]
            recs = [RequestRecord(**{k: v for k, v in x.items() if k != "repeat"}) for x in rows]
            run = LoadRun(point=LoadPoint(**lp.model_dump()), records=recs, started_at_unix=0.0,
                          wall_s=max((x.done_s or 0.0) for x in recs), offered_rate_rps=None,
                          drain_s=drain_of(recs, lp.concurrency))
            now = summarize_load(run, intervals=False)
            old, bench = old_requests_s(run), bench_serve_requests_s(run)
            per_l = (now.output_tok_s / now.mean_output_tokens) if now.output_tok_s and now.mean_output_tokens else None
            if old and now.requests_s and bench and per_l:
                gaps["old"].append(abs(old - bench) / bench)
                gaps["now"].append(abs(now.requests_s - bench) / bench)
                print(f"{folder.name:28} {r.label[:44]:44} {old:7.2f} {now.requests_s:7.2f} {bench:7.2f} {per_l:8.2f}"
                      f"  {now.requests_s / old:5.2f}x")
    for k, v in gaps.items():
        if v:
            v.sort()
            print(f"{k}: |difference from bench-serve's| median {100 * v[len(v) // 2]:.1f}%, max {100 * v[-1]:.1f}% "
                  f"over {len(v)} points")


if __name__ == "__main__":
    main()
