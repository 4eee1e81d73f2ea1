"""The analytic core: what one engine step must move and compute, from the model, numerics and hardware.

step time = overhead + (weight bytes + KV bytes read) / (bandwidth x bw_eff) + 2 x params x tokens / (peak x compute_eff)

Prefill and decode share the formula and differ in their terms: a prefill chunk brings many tokens (compute),
a decode step one token per sequence over a long context (bytes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from atlas.config import ModelSpec
from atlas.engines.registry import ServerKnobs
from atlas.hardware import GpuSpec


class SimulatorError(ValueError):
    pass


@dataclass(frozen=True)
class StepCosts:
    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    bandwidth_b_s: float
    peak_flop_s: float

    def roofline_s(self, tokens: int, ctx_tokens: int) -> float:
        """The physical lower bound of a step: perfect bandwidth and compute, no overhead."""
        return max((self.weight_bytes + ctx_tokens * self.kv_bytes_per_token) / self.bandwidth_b_s,
                   self.flops_per_token * tokens / self.peak_flop_s)


def step_costs(model: ModelSpec, server: ServerKnobs, gpu: GpuSpec) -> StepCosts:
    missing = [f for f in ("params_b", "num_layers", "num_kv_heads", "head_dim") if getattr(model, f) is None]
    if missing:
        raise SimulatorError(f"model {model.id!r}: the simulator needs {', '.join(missing)} in the spec's model")
    assert model.params_b and model.num_layers and model.num_kv_heads and model.head_dim
    n = server.numerics()
    per_weight, kv_elem = n.bytes_per_weight, n.kv_bytes_per_elem
    params = model.params_b * 1e9
    fp8_compute = n.weights == "fp8" and gpu.fp8_native and gpu.fp8_tflops  # W8A8 on FP8 tensor cores
    peak = (gpu.fp8_tflops if fp8_compute else gpu.bf16_tflops) or gpu.bf16_tflops
    return StepCosts(weight_bytes=params * per_weight,
                     kv_bytes_per_token=2 * model.num_layers * model.num_kv_heads * model.head_dim * kv_elem,
                     flops_per_token=2 * params, bandwidth_b_s=gpu.bandwidth_gb_s * 1e9, peak_flop_s=peak * 1e12)


@dataclass(frozen=True)
class Efficiencies:
    overhead_s: float  # fixed cost of every step (scheduling, kernel launches)
    bw_eff: float  # achieved fraction of peak bandwidth
    compute_eff: float  # achieved fraction of peak FLOP/s
    sample_s: float = 0.0  # cost of each sequence that samples a token in the step (sampling, detokenizing, streaming)
    # extra weight passes a micro-batch of two or more tokens costs over a one-token step, in units of one pass
    # (llama.cpp multiplies one token by a matrix-vector kernel and more by its GEMM path; engines without
    # such a split leave it 0)
    multi_pass: float = 0.0

    def step_s(self, c: StepCosts, tokens: int, ctx_tokens: int, sampled: int = 0) -> float:
        return (self.overhead_s + self.sample_s * sampled
                + (c.weight_bytes + ctx_tokens * c.kv_bytes_per_token) / (c.bandwidth_b_s * self.bw_eff)
                + c.flops_per_token * tokens / (c.peak_flop_s * self.compute_eff))


def pooled_efficiencies(weighted: Iterable[tuple[Efficiencies, int]]) -> Efficiencies:
    """The point-weighted mean of each efficiency: what a prediction for numerics never measured uses (the
    bytes model with the other numerics' kernels)."""
    pairs = list(weighted)
    n = sum(w for _, w in pairs)
    return Efficiencies(**{f.name: sum(getattr(e, f.name) * w for e, w in pairs) / n
                           for f in dataclasses.fields(Efficiencies)})


ACTIVATION_RESERVE_GIB = 2.0  # CUDA graphs, activations and the sampler's buffers: vLLM's profiling run sees ~1-3 GiB


def kv_capacity_tokens(costs: StepCosts, gpu: GpuSpec, server: ServerKnobs) -> int | None:
    """Tokens of KV cache that fit beside the weights in the memory vLLM may use (GPUs; on the CPU engine
    the KV space is a setting, VLLM_CPU_KVCACHE_SPACE, and comes from the measured results instead)."""
    if gpu.is_cpu:
        return None
    budget = gpu.memory_gib * 2**30 * (server.memory_fraction or 0.9) - ACTIVATION_RESERVE_GIB * 2**30
    free = budget - costs.weight_bytes
    return max(0, int(free // costs.kv_bytes_per_token))
