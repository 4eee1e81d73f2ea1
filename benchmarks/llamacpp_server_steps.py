"""What llama-server spends per generated token beyond its kernels: closed loops of c = 1..4 streams against one
server (`--parallel 4`), each request 64 prompt words and 64 generated tokens, streamed and not, with the
server's own account of its per-token time (`timings.predicted_per_token_ms`: decoding, plus the steps this
request waited through while other requests' prompts were processed) and, streamed, the client's median gap.

    .venv/bin/python benchmarks/llamacpp_server_steps.py [--type f16] [--threads N] [--rounds 2]

Compare with benchmarks/llamacpp_batch_cost.py (the forward pass of n tokens, no server) run the same hour: the
server's time above the bare pass of c tokens is what its loop adds (sampling, batching, the other streams'
prompts); streamed minus not streamed is what sending each token over HTTP costs the server's cores. With
`--threads 1` on a 2-core host a core is left to the HTTP threads and this client. Needs the embedded default set
up (scripts/setup.sh); the GGUF variant is made (cached) on first use, as a sweep makes it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atlas.engines.embedded import gguf_path, sha256_file  # noqa: E402
from atlas.engines.llamacpp.engine import server_binary  # noqa: E402
from atlas.engines.llamacpp.gguf import variant  # noqa: E402
from atlas.engines.llamacpp.knobs import GgufType  # noqa: E402

PROMPT = " ".join(["word"] * 64)
TOKENS = 64


def start(gguf: Path, threads: int | None) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    binary = server_binary()
    argv = [str(binary), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--ctx-size", "4096",
            "--parallel", "4", "--flash-attn", "on", "--no-webui", "--seed", "0", "--no-cache-prompt",
            "--cache-ram", "0"] + (["--threads", str(threads)] if threads else [])
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(binary.parent),
                                                                          os.environ.get("LD_LIBRARY_PATH")]))}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"llama-server exited with {proc.returncode}: {' '.join(argv)}") from None
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("llama-server did not become ready in 120 s")


def one(port: int, stream: bool) -> tuple[float, float | None]:
    """(the server's ms per generated token, the client's median gap between tokens when streamed)."""
    body = json.dumps({"prompt": PROMPT, "n_predict": TOKENS, "ignore_eos": True, "stream": stream,
                       "temperature": 0, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
    gaps: list[float] = []
    last, timings = None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        if not stream:
            timings = json.loads(r.read())["timings"]
        for line in r if stream else []:
            if not line.startswith(b"data: "):
                continue
            now = time.perf_counter()
            msg = json.loads(line[6:])
            if msg.get("content"):
                if last is not None:
                    gaps.append(now - last)
                last = now
            timings = msg.get("timings") or timings
    if not timings:
        raise SystemExit("llama-server's answer carried no timings")
    return float(timings["predicted_per_token_ms"]), statistics.median(gaps) * 1e3 if gaps else None


def closed_loop(port: int, c: int, stream: bool, per_stream: int) -> tuple[float, float | None, float]:
    out: list[tuple[float, float | None]] = []

    def worker() -> None:
        for _ in range(per_stream):
            out.append(one(port, stream))

    threads = [threading.Thread(target=worker) for _ in range(c)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t
    gaps = [g for _, g in out if g is not None]
    return (statistics.median(s for s, _ in out), statistics.median(gaps) if gaps else None,
            c * per_stream * TOKENS / wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--type", default="f16")
    ap.add_argument("--threads", type=int, default=None, help="llama-server --threads (default: its own)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-stream", type=int, default=4, help="requests each stream sends per measurement")
    args = ap.parse_args()
    src = gguf_path()
    gguf, _ = variant(src, GgufType(args.type), sha256_file(src))
    proc, port = start(gguf, args.threads)
    try:
        closed_loop(port, 1, False, 2)  # warm-up
        print(f"llama-server {args.type}, --parallel 4, threads {args.threads or 'default'}; closed loops of "
              f"{TOKENS}-token answers, {args.per_stream} per stream; medians (ms per token)")
        for r in range(args.rounds):
            for c in (1, 2, 3, 4):
                for stream in (False, True):
                    server, gap, tok_s = closed_loop(port, c, stream, args.per_stream)
                    seen = f"client gap {gap:6.1f}" if gap is not None else f"{'':17s}"
                    print(f"  round {r + 1} c={c} {'streamed' if stream else 'whole   '}  server {server:6.1f}  "
                          f"{seen}  {tok_s:6.1f} tok/s", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
