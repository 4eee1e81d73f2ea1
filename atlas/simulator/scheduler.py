"""What an engine puts into its next step, and what that step costs: the part of the discrete-event model
that differs between engines. The generic loop (atlas.simulator.queue) owns time, arrivals and records; an
engine adapter's `scheduler()` returns one of these, configured from its server knobs.

ChunkedScheduler is continuous batching with a token budget per step, as vLLM (V1) and llama-server both do
it: one decode token for every running sequence first, then prompt tokens (chunked across steps when they do
not fit), admitting waiting requests while fewer than `slots` run. Engines differ in the budget's default,
in how KV memory runs out (vLLM preempts the newest running request and recomputes it later; llama-server
reserves each slot's context up front and never preempts), and in the step's cost (llama.cpp decodes a batch
in physical micro-batches, each reading the weights again)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from atlas.loadgen import RequestRecord
from atlas.simulator.features import Efficiencies, StepCosts


@dataclass(eq=False)  # an entity: compared (and found in lists) by identity, not field by field
class SimSeq:
    rec: RequestRecord
    prompt: int
    out: int
    prefilled: int = 0  # starts at the cached prefix
    generated: int = 0
    times: list[float] = field(default_factory=list)
    recompute: int = 0  # output tokens to prefill again after a preemption

    @property
    def target(self) -> int:
        """Tokens that must be in the KV cache before this sequence decodes again."""
        return self.prompt + self.recompute

    @property
    def in_prefill(self) -> bool:
        return self.prefilled < self.target

    @property
    def kv_tokens(self) -> int:
        return self.prefilled + (self.generated - self.recompute if not self.in_prefill else 0)


@dataclass
class Step:
    decode: list[SimSeq]
    prefill: list[tuple[SimSeq, int]]

    @property
    def tokens(self) -> int:
        return len(self.decode) + sum(k for _, k in self.prefill)

    @property
    def sampled(self) -> int:
        """Sequences that sample a token at the end of this step (every decode, and prompts it completes)."""
        return len(self.decode) + sum(1 for s, k in self.prefill if s.prefilled + k >= s.target)

    @property
    def ctx_tokens(self) -> int:
        return sum(s.kv_tokens for s in self.decode) + sum(s.prefilled + k for s, k in self.prefill)


def _blocks(tokens: int, block: int) -> int:
    return -(-tokens // block)


@dataclass
class ChunkedScheduler:
    slots: int  # sequences running at once (vLLM max_num_seqs, llama.cpp --parallel)
    budget: int  # tokens per step (vLLM max_num_batched_tokens, llama.cpp n_batch)
    chunked: bool = True  # a prompt may be split across steps
    kv_capacity_tokens: int | None = None  # KV cache size; None: never the limit
    block_tokens: int = 16  # KV is allocated in blocks of this many tokens
    preempt: bool = True  # out of KV blocks: preempt the newest running sequence (vLLM) or make arrivals wait
    # between the closed loop's first requests reaching the engine: 0 puts them all in its first step, which keeps
    # their streams in lockstep (every later prefill shared by all) for the whole point. A closed loop's next
    # request reaches the engine this long after its predecessor's last token: above 0 it misses the step that
    # starts at that instant (atlas.simulator.queue)
    arrival_gap_s: float = 0.0
    preemptions: int = 0
    _used: int = 0  # KV blocks in use by the running sequences and the step being planned (plan() keeps it)

    def plan(self, running: list[SimSeq], waiting: deque[SimSeq]) -> Step:
        """Chooses the next step's work; moves sequences between waiting and running (admission, preemption).
        The KV blocks in use are counted once per step and kept up to date as work is added (recounting every
        running sequence for each one made a big GPU dry run quadratic in the batch)."""
        left = self.budget
        extra: dict[int, int] = {}  # tokens each scheduled sequence adds to the KV cache this step
        bt = self.block_tokens
        held = {id(s): _blocks(s.kv_tokens, bt) for s in running} if self.kv_capacity_tokens is not None else {}
        self._used = sum(held.values())

        def add(s: SimSeq, k: int) -> None:
            extra[id(s)] = k
            if self.kv_capacity_tokens is not None:
                now = _blocks(s.kv_tokens + k, bt)
                self._used += now - held.get(id(s), 0)
                held[id(s)] = now

        decode: list[SimSeq] = []
        prefill: list[tuple[SimSeq, int]] = []
        preempted = False
        gone: set[int] = set()  # ids of the sequences preempted this step (a list lookup per sequence was quadratic)
        for s in list(running):
            if left <= 0:
                break
            if id(s) in gone:
                continue
            want = min(s.target - s.prefilled, left) if s.in_prefill else 1
            if s.in_prefill and not self.chunked and want < s.target - s.prefilled:
                continue
            add(s, want)
            while self.preempt and not self._fits_used():
                victim = running.pop()
                gone.add(id(victim))
                extra.pop(id(victim), None)
                self._used -= held.pop(id(victim), 0)
                decode = [d for d in decode if d is not victim]
                prefill = [(p, k) for p, k in prefill if p is not victim]
                victim.recompute, victim.prefilled = victim.generated, 0
                waiting.appendleft(victim)
                self.preemptions += 1
                preempted = True
                if victim is s:
                    break
            if id(s) in gone:
                break
            left -= want
            if s.in_prefill:
                prefill.append((s, want))
            else:
                decode.append(s)
        while not preempted and waiting and len(running) < self.slots and left > 0:
            s = waiting[0]
            todo = s.target - s.prefilled
            take = min(todo, left) if self.chunked else todo
            if take > left:
                break
            if not self.admit(s, running, extra, take):
                break
            waiting.popleft()
            running.append(s)
            add(s, take)
            prefill.append((s, take))
            left -= take
        return Step(decode, prefill)

    def _fits_used(self) -> bool:
        return self.kv_capacity_tokens is None or self._used * self.block_tokens <= self.kv_capacity_tokens

    def admit(self, s: SimSeq, running: list[SimSeq], extra: dict[int, int], take: int) -> bool:
        """Whether a waiting sequence may start: vLLM needs KV blocks for the chunk it prefills now (decode
        blocks come later, by preemption if need be)."""
        if self.kv_capacity_tokens is None or not running:
            return True
        return (self._used + _blocks(s.kv_tokens + take, self.block_tokens)) * self.block_tokens <= \
            self.kv_capacity_tokens

    def step_s(self, costs: StepCosts, eff: Efficiencies, step: Step) -> float:
        return eff.step_s(costs, step.tokens, step.ctx_tokens, step.sampled)


def budget_scheduler(server: object, max_model_len: int, kv_capacity_tokens: int | None,
                     default_budget: int, arrival_gap_s: float = 0.0) -> ChunkedScheduler:
    """vLLM V1's (and SGLang's, and the mock's) batching: `default_budget` tokens per step with chunked prefill,
    a whole prompt per step without it; out of KV blocks the newest running request is preempted."""
    chunked = server.chunked_prefill is not False  # type: ignore[attr-defined]
    budget = server.batch_tokens or (default_budget if chunked else max_model_len)  # type: ignore[attr-defined]
    return ChunkedScheduler(slots=server.slots, budget=max(1, budget), chunked=chunked,  # type: ignore[attr-defined]
                            kv_capacity_tokens=kv_capacity_tokens, block_tokens=16, preempt=True,
                            arrival_gap_s=arrival_gap_s)
