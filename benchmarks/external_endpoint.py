"""Atlas measuring a server it did not start, against the same server config started by Atlas, on this host.

The spec's first server config is measured three ways, interleaved: (A) `atlas sweep SPEC` (Atlas starts the
engine), (B) the same engine command line started here by hand as someone else's deployment would be, with an
API key, and measured with `atlas sweep SPEC --endpoint URL` (engine kind external), (A2) Atlas-started again.
Prints per load point the output tok/s, TTFT p50 and TPOT p50 of each, B over the mean of A and A2, the status,
what the endpoint reported about itself and whether the key reached any written file. Machines differ by 2.5x:
compare only within one run.

    .venv/bin/python benchmarks/external_endpoint.py [--engine llamacpp|vllm] [--out /tmp/ext-bench]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SPECS = {"llamacpp": ROOT / "configs" / "cpu-smollm2-llamacpp.yaml", "vllm": ROOT / "configs" / "cpu-smollm2.yaml"}
ONE = {"llamacpp": {"engine": "llamacpp", "quantization": ["q8_0"], "kv_cache_dtype": ["f16"], "max_num_seqs": [4]},
       "vllm": {"engine": "vllm", "dtype": ["float32"], "kv_cache_dtype": ["auto"], "max_num_seqs": [16]}}


def small_spec(engine: str, out: Path) -> Path:
    spec = yaml.safe_load(SPECS[engine].read_text())
    spec.update(name=f"ext-bench-{engine}", grid=ONE[engine], api_key_env="ATLAS_BENCH_KEY")
    spec.pop("slo", None)
    spec.pop("capacity", None)
    spec["quality"]["objective"] = "accuracy"
    path = out / f"{engine}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def atlas(*args: str) -> None:
    r = subprocess.run([str(Path(sys.executable).parent / "atlas"), "sweep", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"atlas sweep {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def results(folder: Path) -> dict[str, dict]:
    out = {}
    for p in folder.glob("*.json"):
        x = json.loads(p.read_text())
        out[x["config"]["load"]["concurrency"]] = x
    return out


def deployment_argv(engine: str, measured: dict, port: int, key: str) -> list[str]:
    """The command line Atlas used for that config (its provenance), on another port, under a fixed name, with an
    API key, as a person deploying it would type it."""
    argv = list(measured["provenance"]["engine"]["argv"])
    for flag, value in (("--port", str(port)), ("--alias", "smollm2"), ("--served-model-name", "smollm2")):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
    binary = (str(Path(sys.prefix) / "lib" / "atlas-llama-server" / "llama-server") if engine == "llamacpp"
              else sys.executable)
    return [binary, *argv, "--api-key", key]


def wait_ready(url: str, key: str, timeout_s: float, server: subprocess.Popen) -> None:  # type: ignore[type-arg]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if server.poll() is not None:
            sys.exit(f"the hand-started server exited ({server.returncode}); see its log")
        try:
            req = urllib.request.Request(url + "/v1/models", headers={"Authorization": f"Bearer {key}"})
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    sys.exit(f"the hand-started server at {url} was not ready in {timeout_s:g} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--engine", choices=sorted(SPECS), default="llamacpp")
    ap.add_argument("--out", type=Path, default=Path("/tmp/atlas-external-bench"))
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    a.out.mkdir(parents=True)
    spec = small_spec(a.engine, a.out)
    key = "sk-bench-" + secrets.token_hex(8)
    os.environ["ATLAS_BENCH_KEY"] = key
    name = f"ext-bench-{a.engine}"
    t = time.monotonic()
    atlas(str(spec), "--results", str(a.out / "A"))
    first = results(a.out / "A" / name)
    print(f"A  (Atlas-started): {time.monotonic() - t:.0f} s")
    from atlas.engines.procs import free_port

    port = free_port("127.0.0.1")
    env = {**os.environ, **yaml.safe_load(spec.read_text()).get("engine_env", {})}
    argv = deployment_argv(a.engine, next(iter(first.values())), port, key)
    if a.engine == "llamacpp":  # llama-server's shared libraries lie beside it
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(Path(argv[0]).parent),
                                                                env.get("LD_LIBRARY_PATH", "")]))
    log = (a.out / "deployment.log").open("w")
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, key, 600, server)
        t = time.monotonic()
        atlas(str(spec), "--endpoint", url, "--model", "smollm2", "--results", str(a.out / "B"))
        print(f"B  (external endpoint, started by hand): {time.monotonic() - t:.0f} s")
    finally:
        server.terminate()
        server.wait(timeout=60)
    ext_folder = next((a.out / "B").iterdir())
    ext = results(ext_folder)
    t = time.monotonic()
    atlas(str(spec), "--results", str(a.out / "A2"))
    again = results(a.out / "A2" / name)
    print(f"A2 (Atlas-started again): {time.monotonic() - t:.0f} s\n")
    eng = next(iter(ext.values()))["provenance"]["engine"]
    print(f"endpoint reported: version {eng.get('version')}, metrics: {eng.get('metrics')}, "
          f"server header {eng.get('server_header')!r}, engine_version "
          f"{next(iter(ext.values()))['provenance']['engine_version']!r}")
    print(f"{'load':>5} {'metric':>10} {'A':>9} {'B ext':>9} {'A2':>9} {'B/mean(A,A2)':>13}  B status")
    for c in sorted(ext):
        for label, get in (("tok/s", lambda x: x["metrics"]["output_tok_s"]),
                           ("TTFT p50", lambda x: x["metrics"]["ttft_ms"]["p50"]["value"]),
                           ("TPOT p50", lambda x: x["metrics"]["tpot_ms"]["p50"]["value"])):
            va, vb, va2 = get(first[c]), get(ext[c]), get(again[c])
            print(f"{'c=' + str(c):>5} {label:>10} {va:9.2f} {vb:9.2f} {va2:9.2f} {vb / ((va + va2) / 2):13.3f}  "
                  f"{ext[c]['status']} {'; '.join(ext[c]['reasons'] + ext[c]['metrics']['warnings'])[:120]}")
    acc = [next(iter(r.values()))["quality"]["accuracy"] for r in (first, ext, again)]
    print(f"accuracy (arith+mc): A {acc[0]:.3f}, B {acc[1]:.3f}, A2 {acc[2]:.3f}")
    written = b"".join(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
                       for p in (a.out / "B").rglob("*") if p.is_file())
    print(f"API key in any file Atlas wrote for B: {'YES' if key.encode() in written else 'no'} "
          f"({len(written):,} bytes checked)")


if __name__ == "__main__":
    main()
