"""llama-server's batching, for the simulator. From `update_slots` in the server sources llama-cpp-python 0.3.36
vendors: each iteration adds one token for every generating slot, then prompt tokens of slots processing a
prompt until the batch holds n_batch (--batch-size, 2048 by default) tokens, a prompt continuing in the next
iteration when it does not fit; a request waits (deferred) while every slot (--parallel) is busy; each slot's
context is reserved when the server starts, so nothing is ever preempted; the first request to reach an idle
server is processed alone. llama_decode then runs the batch in physical micro-batches, each a full pass over the
weights. With one slot the KV cache is one stream and a micro-batch is the next n_ubatch (--ubatch-size, 512)
tokens. With more (--parallel N without --kv-unified, the server's default) each slot has its own KV stream
and the batch is cut by `split_equal(n_ubatch, sequential=true)` (llama-batch.cpp, llama-kv-cache.cpp
init_batch): a micro-batch holds only sequences (slots) with consecutive ids, the same number of tokens from
each. Slots 0, 1 and 3 decoding are two passes, {0, 1} then {3}, where 0, 1 and 2 are one; a prompt beside
decoding tokens is a pass of its own. Which slot a request gets decides it: get_available_slot takes the idle
slot whose last prompt shares over 10% of the new one (Atlas's prompts share only their head, so prompts under
60 tokens), else the one released longest ago, so slots rotate. Measured (2026-12-07, a closed loop of 64/64
tokens, the median gap between tokens, `cpu-smollm2-llamacpp-threads2`): 3 streams decode in 23.8 ms steps
(q8_0) on 3 slots and 28.3 on 4, 21.5 and 34.6 (f16); on 4 slots 3 streams are slower than 4 (q8_0 28.3 against
23.6 ms), which only the split explains. Held out, it took TPOT error from 10.3% to 6.9% (`-ladder`), 11.1% to
8.6% (`-threads2`), 10.4% to 9.2% (`-threads1`) and 10.4% to 9.2% (`-open`); the capacity recording's held-out
capacity error went from 16.9% to 22.4% (README, Simulator). A spec that passes --kv-unified in
extra_engine_args (one stream: no split) is not seen here; its steps are priced as split.

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
width, which the probe does not record. Not landed.

Nor which kernel each tensor goes to. On an AVX2 build llama-server repacks Q4_0 tensors (also Q4_K and IQ4_NL)
when it loads them (CPU_REPACK: 56 of SmolLM2 q4_0's 86 MiB; repack.cpp): a repacked matrix multiplies groups of
4 tokens with its GEMM and the rest one token at a time with its GEMV, chunk by chunk with the chunk still in
cache, so it has no costlier path to switch to at 2 tokens; only the Q8_0 embedding that SmolLM2 shares with its
output layer goes through tinyBLAS there. The records agree: a second decoding stream adds 8.4 ms to q8_0's
7.5 ms step and 4.3 ms to q4_0's 5.8 (`-ladder`). Charging `multi_pass` on the bytes of the tensors tinyBLAS
takes (F16, Q8_0, Q5_0 and unrepacked Q4_0; from the files' tensor types: q8_0 and f16 all of them, q6_k 84%,
q4_k_m 83%, q3_k_m 43%, q2_k 35%, q4_0 34%) was tried (2026-12-07, held out): capacity recording TPOT 15.2 ->
11.9%, `-p99` 11.3 -> 8.7% (TTFT p50 8.9 -> 3.2%), but `-open` 9.2 -> 11.4%, the grid 12.2 -> 12.6%, one core 5.8 ->
6.2%, capacity error 22.4 -> 20.8% with neither interval meeting its bracket (1 of 2 before). A wash; not landed.
Rerun over three folds (2026-12-08): capacity and ladder recordings better, `-open` and `-p99` TTFT worse; still a
wash (README, Simulator)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from atlas.engines.llamacpp.knobs import LlamaCppKnobs
from atlas.simulator.features import Efficiencies, StepCosts
from atlas.simulator.scheduler import ChunkedScheduler, SimSeq, Step

N_BATCH, N_UBATCH = 2048, 512  # llama.cpp's defaults (common.h: n_batch, n_ubatch)
# The idle server's loop wakes on the first task posted and runs update_slots with it alone; the other requests
# of a closed loop (each on its own connection, parsed and tokenized on an HTTP thread) join the next iteration.
# Modelled as arrivals 0.1 ms apart; on the recorded llama.cpp sweep it cut the held-out TPOT error from 16.3% to
# 14.0% and TTFT from 12.2% to 10.9% (vLLM's engine core does the same: atlas.engines.vllm.adapter).
# The same holds for every later request of a closed loop: sent when its predecessor's last token arrives, it is
# still being read when the loop starts its next iteration (at once, for the slots still decoding), so it waits
# for the one after. Streams that finish a step apart then stay locked: the first's prompt is processed alone, the
# second arrives during it and waits (recorded, `-threads2`, q8_0 at 3 slots, 2 streams: TTFTs alternate ~160 and
# ~300-440 ms, the first request's second token ~150-230 ms after its first). Joining the step at once, as the
# simulator had it until 2026-12-07, puts them a prompt apart for good; held out, the change took closed-loop TTFT
# p50 from 16.6% to 10.5% (`-threads1`) and 16.8% to 13.8% (`-threads2`), TPOT up 1.1-1.6 points (README).
ARRIVAL_GAP_S = 1e-4
# get_available_slot first looks for an idle slot whose last prompt shares more than --slot-prompt-similarity
# (0.1 by default) of the new prompt: Atlas's prompts share only the load generator's head ("Continue this list of
# words: ", 6 tokens in SmolLM2's tokenizer; the server's log says f_sim 0.094-0.109 for 64-token prompts), so a
# prompt under 60 tokens goes to the first idle slot that has served one, a longer one to the least recently used
SLOT_PROMPT_SIMILARITY, PROMPT_HEAD_TOKENS = 0.1, 6


def micro_batches(decode: list[int], prefill: list[tuple[int, int]], ubatch: int) -> list[int]:
    """The token counts of the micro-batches llama_decode runs for one batch with a KV stream per slot (the
    server's default, `kv_unified = false`, with --parallel above 1): `split_equal(n_ubatch, sequential=true)`
    in llama-batch.cpp, called until every token is placed. The batch holds each generating slot's token in
    slot order, then the prompt tokens of each slot processing one, in slot order (`update_slots`). A
    micro-batch takes sequences whose ids rise by one from the first unplaced token's, in batch order (a gap
    in the slot ids ends it), and the same number of tokens from each: the fewest any of them has left, at most
    n_ubatch / sequences. So slots 0, 1 and 3 decoding run two passes over the weights ({0, 1}, then {3}),
    and a prompt beside decoding tokens gives up one token to the first."""
    order = [(slot, 1) for slot in sorted(decode)] + sorted(prefill)
    left = dict(order)
    sizes = []
    while any(left.values()):
        chosen: list[int] = []
        for slot, _ in order:
            if left[slot] and (not chosen or slot == chosen[-1] + 1):
                chosen.append(slot)
        k = max(1, min(min(left[c] for c in chosen), ubatch // len(chosen)))
        for c in chosen:
            left[c] -= k
        sizes.append(k * len(chosen))
    return sizes


@dataclass
class SlotScheduler(ChunkedScheduler):
    ubatch: int = N_UBATCH
    # which slot (and so which KV stream, the sequence id) each running request holds: get_available_slot gives
    # a new request the idle slot released longest ago (never used first; a tie goes to the highest id)
    _holder: dict[int, SimSeq] = field(default_factory=dict)  # slot -> the request in it
    _slot_of: dict[int, int] = field(default_factory=dict)  # id(request) -> slot
    _released: dict[int, int] = field(default_factory=dict)  # slot -> when it was released (absent: never)
    _clock: int = 0
    _splits: dict[tuple, list[int]] = field(default_factory=dict)  # type: ignore[type-arg]

    @classmethod
    def of(cls, server: LlamaCppKnobs) -> SlotScheduler:
        batch = server.max_num_batched_tokens or N_BATCH
        return cls(slots=server.max_num_seqs, budget=batch, chunked=True, kv_capacity_tokens=None, preempt=False,
                   ubatch=min(server.n_ubatch or N_UBATCH, batch), arrival_gap_s=ARRIVAL_GAP_S)

    def plan(self, running: list[SimSeq], waiting: deque[SimSeq]) -> Step:
        # between plans `running` only loses the requests that finished; plan() appends the ones it admits
        if len(running) < len(self._holder):
            alive = {id(s) for s in running}
            for slot in sorted(k for k, s in self._holder.items() if id(s) not in alive):  # released in slot order
                self._clock += 1
                self._released[slot] = self._clock
                del self._slot_of[id(self._holder.pop(slot))]
        before = len(running)
        step = super().plan(running, waiting)
        for s in running[before:]:
            free = [k for k in range(self.slots) if k not in self._holder]
            used = [k for k in free if k in self._released]  # idle slots still holding their last prompt
            if used and PROMPT_HEAD_TOKENS / max(1, s.prompt) > SLOT_PROMPT_SIMILARITY:
                slot = min(used)  # every such slot shares the same head: the first wins
            else:
                slot = min(free, key=lambda k: (self._released.get(k, -1), -k))
            self._holder[slot], self._slot_of[id(s)] = s, slot
        return step

    def micro_batches(self, step: Step) -> list[int]:
        if self.slots == 1:  # one KV stream: split_simple, n_ubatch tokens at a time
            return [min(self.ubatch, step.tokens - i) for i in range(0, step.tokens, self.ubatch)]
        key = (tuple(self._slot_of[id(s)] for s in step.decode),
               tuple((self._slot_of[id(s)], k) for s, k in step.prefill))
        sizes = self._splits.get(key)
        if sizes is None:  # a simulation repeats a handful of slot patterns thousands of times
            sizes = self._splits[key] = micro_batches(list(key[0]), list(key[1]), self.ubatch)
        return sizes

    def step_s(self, costs: StepCosts, eff: Efficiencies, step: Step) -> float:
        sizes = self.micro_batches(step)
        multi = sum(1 for n in sizes if n >= 2)  # micro-batches of two or more tokens: the GEMM path
        weights = costs.weight_bytes / (costs.bandwidth_b_s * eff.bw_eff)
        gemm_pass = costs.weight_bytes / costs.bandwidth_b_s  # at the roofline: bw_eff is the matrix-vector kernel's
        return len(sizes) * (eff.overhead_s + weights) + multi * eff.multi_pass * gemm_pass + (
            eff.sample_s * step.sampled + step.ctx_tokens * costs.kv_bytes_per_token / (costs.bandwidth_b_s * eff.bw_eff)
            + costs.flops_per_token * step.tokens / (costs.peak_flop_s * eff.compute_eff))
