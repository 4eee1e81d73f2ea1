"""llama-server's batching, for the simulator. From `update_slots` in the server sources llama-cpp-python 0.3.36
vendors: each iteration adds one token for every generating slot, then prompt tokens of slots processing a
prompt until the batch holds n_batch (--batch-size, 2048 by default) tokens, a prompt continuing in the next
iteration when it does not fit; a request waits (deferred) while every slot (--parallel) is busy; each slot's
context is reserved when the server starts, so nothing is ever preempted; the first request to reach an idle
server is processed alone. llama_decode then runs the batch in
physical micro-batches of n_ubatch (--ubatch-size, 512) tokens, each a full pass over the weights.

A micro-batch of one token is multiplied by ggml's matrix-vector kernels; two or more go to its matrix-matrix
path (llamafile_sgemm declines n < 2), which costs more than a second token's arithmetic: a bare llama-server
(q8_0, --parallel 4) stepped 8.6 / 15.5 / 22.0 ms for 1 / 2 / 4 decoding streams: 6.9 ms more for the second
stream, 3.25 ms for each after it. The step model prices that as `multi_pass`,
the extra weight passes of a multi-token micro-batch (shared by the engine's numerics, fitted by least squares
with the other engine-wide costs, atlas.simulator.joint), each pass at the roofline bandwidth rather than at
the numerics' fitted bandwidth efficiency: that efficiency is its matrix-vector kernel's, and pricing the GEMM
path with it made the fit trade one kind of step for the other (q4_0's one-token steps predicted at 4.4 ms against
6.0-6.5 measured, to match its cheap second stream: 3.9 ms against q8_0's 8.1). Held out, the capacity
recording's TPOT error went from 18.5% to 13.3% and `-p99`'s from 14.6% to 11.2% (README, Simulator).

Not modelled: how each weight type's kernel tiles the tokens of a micro-batch. In the vendored sources, on an
AVX2 build, Q8_0 goes to llamafile's tinyBLAS_Q0_AVX, whose tiles are 4 weight rows x 2 tokens (VECTOR_REGISTERS
16; up to 4 tokens with AVX-512), so 3 tokens cost two tiles like 4 (the bare pass, 2026-12-07: q8_0 10.2 / 15.6 /
19.9 / 20.4 / 24.8 / 24.2 ms for 1-6 tokens); Q4_0 is repacked (q4_0_8x8) and multiplies groups of 4 tokens with
its GEMM, the rest one token at a time with its GEMV; F16 goes to tinyBLAS in tiles of up to 3; the K-quants to
ggml's generic dot products. Charging Q8_0's compute per tile of two tokens was tried (2026-12-07, held out): TPOT
moved down a point on the ladder and capacity recordings (10.3 -> 9.3%, 13.8 -> 12.7%), TTFT and E2E up 1-3.4 points
on the open-loop ones (capacity error 16.9 -> 19.3%), numerics never measured better on the ladder (TPOT 9.4 ->
7.4%) and streams recordings: a wash within the fit's own 2-point jitter, and the tile depends on the build's SIMD
width, which the probe does not record. Not landed."""

from __future__ import annotations

from dataclasses import dataclass

from atlas.engines.llamacpp.knobs import LlamaCppKnobs
from atlas.simulator.features import Efficiencies, StepCosts
from atlas.simulator.scheduler import ChunkedScheduler, Step

N_BATCH, N_UBATCH = 2048, 512  # llama.cpp's defaults (common.h: n_batch, n_ubatch)
# The idle server's loop wakes on the first task posted and runs update_slots with it alone; the other requests
# of a closed loop (each on its own connection, parsed and tokenized on an HTTP thread) join the next iteration.
# Modelled as arrivals 0.1 ms apart; on the recorded llama.cpp sweep it cut the held-out TPOT error from 16.3% to
# 14.0% and TTFT from 12.2% to 10.9% (on vLLM-CPU's recordings the same gap fitted worse, so vLLM keeps none).
ARRIVAL_GAP_S = 1e-4


@dataclass
class SlotScheduler(ChunkedScheduler):
    ubatch: int = N_UBATCH

    @classmethod
    def of(cls, server: LlamaCppKnobs) -> SlotScheduler:
        batch = server.max_num_batched_tokens or N_BATCH
        return cls(slots=server.max_num_seqs, budget=batch, chunked=True, kv_capacity_tokens=None, preempt=False,
                   ubatch=min(server.n_ubatch or N_UBATCH, batch), arrival_gap_s=ARRIVAL_GAP_S)

    def step_s(self, costs: StepCosts, eff: Efficiencies, step: Step) -> float:
        passes = max(1, -(-step.tokens // self.ubatch))
        multi = step.tokens // self.ubatch + (step.tokens % self.ubatch >= 2)  # micro-batches of two or more tokens
        weights = costs.weight_bytes / (costs.bandwidth_b_s * eff.bw_eff)
        gemm_pass = costs.weight_bytes / costs.bandwidth_b_s  # at the roofline: bw_eff is the matrix-vector kernel's
        return passes * (eff.overhead_s + weights) + multi * eff.multi_pass * gemm_pass + eff.sample_s * step.sampled + (
            step.ctx_tokens * costs.kv_bytes_per_token / (costs.bandwidth_b_s * eff.bw_eff)
            + costs.flops_per_token * step.tokens / (costs.peak_flop_s * eff.compute_eff))
