"""llama.cpp's forward pass over n tokens, without a server: what its kernels cost when the weight matrices meet
n columns (as a decode step of n streams does), for each weight format of the embedded model.

    .venv/bin/python benchmarks/llamacpp_batch_cost.py [--threads 2] [--types f16,q8_0,q4_0] [--max-n 8]

One sequence, a 32-token context evaluated first, then n tokens timed; rounds interleave n = 1..max-n and the
median of `--rounds` is printed. Compare with the inter-token gaps of a recording (e.g.
benchmarks/data/cpu-smollm2-llamacpp-streams): a gap longer than the pass of its batch is time the server spent
elsewhere (sampling, HTTP, or the cores taken by the load client). Needs the embedded default set up
(scripts/setup.sh); the GGUF variants are made (cached) on first use, as a sweep makes them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atlas.engines.embedded import gguf_path, sha256_file  # noqa: E402
from atlas.engines.llamacpp.gguf import variant  # noqa: E402
from atlas.engines.llamacpp.knobs import GgufType  # noqa: E402

CONTEXT = 32


def pass_times_ms(path: Path, threads: int, max_n: int, rounds: int) -> dict[int, float]:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=threads, n_threads_batch=threads,
                          n_batch=512, n_ubatch=512, verbose=False)
    tokens = llm.tokenize(b"The quick brown fox jumps over the lazy dog and keeps running far away", add_bos=False)
    if len(tokens) < max_n:
        raise SystemExit(f"--max-n {max_n}: the probe text has only {len(tokens)} tokens")
    times: dict[int, list[float]] = {n: [] for n in range(1, max_n + 1)}
    for _ in range(rounds):
        for n in times:
            llm.reset()
            llm.eval([tokens[0]] * CONTEXT)
            start = time.perf_counter()
            llm.eval(tokens[:n])
            times[n].append(time.perf_counter() - start)
    return {n: statistics.median(v) * 1e3 for n, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("--max-n", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    src = gguf_path()
    src_sha = sha256_file(src)  # once, not once per weight type
    print(f"llama.cpp forward pass of n tokens after a {CONTEXT}-token context, {args.threads} threads, "
          f"median of {args.rounds} interleaved rounds (ms):")
    for name in args.types.split(","):
        path, _ = variant(src, GgufType(name), src_sha)
        t = pass_times_ms(path, args.threads, args.max_n, args.rounds)
        print(f"  {name:6s} " + "  ".join(f"n={n} {ms:6.2f}" for n, ms in t.items()))


if __name__ == "__main__":
    main()
