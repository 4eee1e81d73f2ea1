"""The GPU's measured ceilings against the datasheet numbers in configs/gpus.yaml that the simulator's roofline
uses: device-to-device copy bandwidth (bytes read + written), dense bf16 and (where native) fp8 matrix rates.
Needs torch with CUDA; prints one table. Run on a GPU host (scripts/device_check.sh runs it):

    python benchmarks/gpu_ceilings.py [--size 8192] [--copy-gib 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atlas.hardware import gpu_named, nvidia_gpu_details  # noqa: E402


def _time_ms(fn, repeats: int = 10, warmup: int = 3) -> float:  # type: ignore[no-untyped-def]
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_gb_s(gib: float) -> float:
    import torch

    n = int(gib * 2**30)
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    assert torch.equal(dst[:4096], src[:4096])
    return 2 * n / (ms / 1e3) / 1e9


def bf16_tflops(size: int) -> float:
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    ms = _time_ms(lambda: a @ b)
    return 2 * size**3 / (ms / 1e3) / 1e12


def fp8_tflops(size: int) -> float | None:
    """torch._scaled_mm (FP8 tensor cores: Ada/Hopper and later); None where the GPU or torch has none."""
    import torch

    if torch.cuda.get_device_capability() < (8, 9) or not hasattr(torch, "_scaled_mm"):
        return None
    a = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn).t()  # column-major second operand
    one = torch.tensor(1.0, device="cuda")
    ms = _time_ms(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    return 2 * size**3 / (ms / 1e3) / 1e12


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--copy-gib", type=float, default=4.0)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_ceilings: torch is not installed")
        return 2
    if not torch.cuda.is_available():
        print("gpu_ceilings: no CUDA GPU visible to torch")
        return 2
    name = torch.cuda.get_device_name()
    spec = gpu_named(name)
    details = nvidia_gpu_details()
    print(f"GPU {name} (NVML: {details[0] if details else 'unavailable'}); torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}; gpus.yaml: {spec.key if spec else 'no entry'}")
    rows = [("copy bandwidth GB/s", copy_gb_s(args.copy_gib), spec.bandwidth_gb_s if spec else None),
            (f"bf16 matmul {args.size}^3 TFLOP/s", bf16_tflops(args.size), spec.bf16_tflops if spec else None),
            (f"fp8 matmul {args.size}^3 TFLOP/s", fp8_tflops(args.size), spec.fp8_tflops if spec else None)]
    print(f"{'ceiling':32} {'measured':>10} {'gpus.yaml':>10} {'ratio':>7}")
    for label, measured, sheet in rows:
        m = f"{measured:10.0f}" if measured is not None else f"{'n/a':>10}"
        s = f"{sheet:10.0f}" if sheet else f"{'-':>10}"
        r = f"{measured / sheet:7.2f}" if measured is not None and sheet else f"{'-':>7}"
        print(f"{label:32} {m} {s} {r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
