"""Per-engine step models (vLLM's preemption, llama-server's slots and micro-batches), conformal intervals, and
the machine probe that moves a calibration between machines of one kind."""

import math
from collections import deque

import pytest

from atlas.config import LoadPoint, ModelSpec
from atlas.engines.llamacpp.knobs import LlamaCppKnobs
from atlas.engines.llamacpp.simulation import SlotScheduler, micro_batches
from atlas.engines.registry import adapter
from atlas.engines.vllm.knobs import VllmKnobs
from atlas.hardware import get_gpu
from atlas.loadgen import RequestRecord
from atlas.metrics import summarize_load
from atlas.probe import HardwareProbe, cpu_probe, drift, drift_reasons
from atlas.simulator.features import Efficiencies, step_costs
from atlas.simulator.fit import interval_half_width
from atlas.simulator.queue import simulate
from atlas.simulator.scheduler import ChunkedScheduler, SimSeq, Step

MODEL = ModelSpec(id="m", source="path", path="/m", params_b=7.6, num_layers=28, num_kv_heads=4, head_dim=128,
                  max_model_len=4096)
SMALL = ModelSpec(id="s", source="embedded", params_b=0.135, num_layers=30, num_kv_heads=3, head_dim=64,
                  max_model_len=1024)
EFF = Efficiencies(overhead_s=0.004, bw_eff=0.7, compute_eff=0.5)


def lp(c=1, **kw):
    return LoadPoint(**{"concurrency": c, "num_requests": 24, "warmup_requests": 0, "prompt_tokens": 128,
                        "output_tokens": 64, "min_requests": 4, "min_duration_s": 0, "repeats": 1, **kw})


def test_each_engine_brings_its_own_scheduler():
    v = adapter("vllm").scheduler(VllmKnobs(max_num_seqs=8), 4096, 1000)
    assert type(v) is ChunkedScheduler and v.preempt and v.slots == 8 and v.budget == 2048
    assert adapter("vllm").scheduler(VllmKnobs(enable_chunked_prefill=False), 4096, None).budget == 4096
    s = adapter("llamacpp").scheduler(LlamaCppKnobs(max_num_seqs=4, n_ubatch=128), 1024, None)
    assert isinstance(s, SlotScheduler) and not s.preempt and s.kv_capacity_tokens is None
    assert (s.slots, s.budget, s.ubatch) == (4, 2048, 128)


def test_vllm_preempts_the_newest_sequence_when_kv_runs_out_and_recomputes_it():
    server = VllmKnobs(max_num_seqs=16)
    costs = step_costs(MODEL, server, get_gpu("h100"))
    roomy = simulate(costs, EFF, server, lp(8), max_model_len=4096)
    tight = simulate(costs, EFF, server, lp(8), max_model_len=4096, kv_capacity_tokens=8 * 160)
    for run in (roomy, tight):
        ok = [r for r in run.records if r.status == "ok"]
        assert len(ok) == 24 and all(r.output_tokens == 64 == len(r.token_times_s) for r in ok)
    # 8 prompts of 128 fit at once, their 64 outputs do not: someone is preempted and prefilled again
    assert summarize_load(tight).output_tok_s < summarize_load(roomy).output_tok_s
    sched = ChunkedScheduler(slots=16, budget=2048, kv_capacity_tokens=3 * 160, block_tokens=16)
    seqs = [SimSeq(rec=RequestRecord(index=i, phase="measure", scheduled_s=0, sent_s=0), prompt=150, out=40,
                   prefilled=150, generated=1) for i in range(3)]
    running, waiting = list(seqs), deque()
    for _ in range(12):
        step = sched.plan(running, waiting)
        for s in step.decode:
            s.generated += 1
    assert sched.preemptions >= 1 and waiting[0] is seqs[-1] and seqs[-1].prefilled == 0
    assert seqs[-1].target == 150 + seqs[-1].recompute > 150  # its output so far is recomputed too


def test_sequences_are_told_apart_by_identity_even_when_every_field_is_equal():
    """Preemption takes the newest running sequence itself, not the first one equal to it field by field."""
    rec = RequestRecord(index=0, phase="measure", scheduled_s=0, sent_s=0)
    seqs = [SimSeq(rec=rec, prompt=150, out=40, prefilled=150, generated=1) for _ in range(3)]
    assert seqs[0] != seqs[2] and seqs.index(seqs[2]) == 2
    sched = ChunkedScheduler(slots=16, budget=2048, kv_capacity_tokens=3 * 160, block_tokens=16)
    running, waiting = list(seqs), deque()
    while not waiting:
        for s in sched.plan(running, waiting).decode:
            s.generated += 1
    assert waiting[0] is seqs[2] and running == seqs[:2] and running[0] is seqs[0] and running[1] is seqs[1]


def test_llama_slots_queue_requests_and_micro_batches_reread_the_weights():
    server = LlamaCppKnobs(max_num_seqs=1)
    costs = step_costs(SMALL, server, get_gpu("cpu"))
    eff = Efficiencies(0.002, 0.3, 0.2)
    one = summarize_load(simulate(costs, eff, server, lp(1, prompt_tokens=64, output_tokens=16),
                                  max_model_len=1024))
    four = summarize_load(simulate(costs, eff, server, lp(4, prompt_tokens=64, output_tokens=16),
                                   max_model_len=1024))
    assert four.ttft_ms.p50.value > 2.5 * one.e2e_ms.p50.value  # three requests ahead in the one slot
    assert four.output_tok_s == pytest.approx(one.output_tok_s, rel=0.05)
    sched = SlotScheduler.of(LlamaCppKnobs(max_num_seqs=1, n_ubatch=256))  # one KV stream: split_simple
    generic = ChunkedScheduler(slots=1, budget=2048)

    def extra(tokens: int) -> float:
        seq = SimSeq(rec=RequestRecord(index=0, phase="measure", scheduled_s=0, sent_s=0), prompt=tokens, out=1)
        step = Step(decode=[], prefill=[(seq, tokens)])
        return sched.step_s(costs, eff, step) - generic.step_s(costs, eff, step)

    one_pass = eff.overhead_s + costs.weight_bytes / (costs.bandwidth_b_s * eff.bw_eff)
    assert extra(256) == pytest.approx(0, abs=1e-9)
    assert extra(512) == pytest.approx(one_pass) and extra(600) == pytest.approx(2 * one_pass)


def test_llama_micro_batches_follow_split_equal_over_consecutive_slots():
    """llama-batch.cpp's split_equal(n_ubatch, sequential=true), as the server's per-slot KV streams use it."""
    assert micro_batches([0, 1, 2, 3], [], 512) == [4]
    assert micro_batches([0, 1, 3], [], 512) == [2, 1]  # a gap in the slot ids ends a micro-batch
    assert micro_batches([0, 2], [], 512) == [1, 1]
    assert micro_batches([0, 1], [(2, 64)], 512) == [3, 63]  # the prompt gives one token to the decoding ones
    assert micro_batches([0, 1, 3], [(2, 64)], 512) == [3, 1, 63]
    assert micro_batches([2], [(0, 64)], 512) == [1, 64]  # decoding tokens come first in the batch
    assert micro_batches([], [(0, 64), (1, 64), (2, 64), (3, 64)], 512) == [256]
    assert micro_batches([], [(0, 64), (1, 32)], 512) == [64, 32]  # equal tokens per sequence
    assert micro_batches([], [(0, 600)], 512) == [512, 88]
    assert micro_batches([], [(0, 300), (1, 300)], 512) == [512, 88]  # at most n_ubatch / sequences each


def _seq(i: int, prompt: int = 64) -> SimSeq:
    return SimSeq(rec=RequestRecord(index=i, phase="measure", scheduled_s=0, sent_s=0), prompt=prompt, out=8)


def test_llama_slots_go_to_the_least_recently_released_or_to_a_short_prompts_first_used_slot():
    sched = SlotScheduler.of(LlamaCppKnobs(max_num_seqs=4))
    seqs = [_seq(i) for i in range(4)]
    running, waiting = [], deque(seqs)
    sched.plan(running, waiting)
    assert [sched._slot_of[id(s)] for s in seqs] == [3, 2, 1, 0]  # never used: a tie, the highest id wins
    running.remove(seqs[2])  # slot 1 finishes, then slot 3
    sched.plan(running, deque())
    running.remove(seqs[0])
    nxt = [_seq(4), _seq(5)]
    sched.plan(running, deque(nxt))
    assert [sched._slot_of[id(s)] for s in nxt] == [1, 3]  # released longest ago first
    short = SlotScheduler.of(LlamaCppKnobs(max_num_seqs=4))
    first = [_seq(i) for i in range(3)]
    running = []
    short.plan(running, deque(first))  # slots 3, 2, 1
    running.remove(first[1])  # slot 2 is free and used; slot 0 free and never used
    running.remove(first[0])  # slot 3 too
    s = _seq(9, prompt=40)  # the 6-token head is 15% of it: the first idle slot that has served a prompt
    short.plan(running, deque([s]))
    assert short._slot_of[id(s)] == 2
    long = _seq(10, prompt=200)  # 3%: least recently used, slot 0 (never used)
    short.plan(running, deque([long]))
    assert short._slot_of[id(long)] == 0


def test_llama_decoding_slots_with_a_gap_cost_a_second_pass_over_the_weights():
    server = LlamaCppKnobs(max_num_seqs=4)
    costs = step_costs(SMALL, server, get_gpu("cpu"))
    eff = Efficiencies(0.002, 0.3, 0.2, multi_pass=0.5)
    sched = SlotScheduler.of(server)
    seqs = [_seq(i) for i in range(4)]
    running = []
    sched.plan(running, deque(seqs))  # slots 3, 2, 1, 0
    for s in seqs:
        s.prefilled, s.generated = s.prompt, 1
    by_slot = {sched._slot_of[id(s)]: s for s in seqs}
    packed = sched.step_s(costs, eff, Step(decode=[by_slot[k] for k in (0, 1, 2)], prefill=[]))
    gap = sched.step_s(costs, eff, Step(decode=[by_slot[k] for k in (0, 1, 3)], prefill=[]))
    one_pass = eff.overhead_s + costs.weight_bytes / (costs.bandwidth_b_s * eff.bw_eff)
    assert gap - packed == pytest.approx(one_pass)  # {0, 1} and {3}: a one-token pass more, no extra GEMM cost
    # measured (2026-12-07, q8_0, two threads): 3 closed-loop streams decode in 23.8 ms steps on 3 slots and
    # 28.3 ms on 4, where the free slot sits between busy ones; the model gives the 4-slot server the longer steps
    load = lp(3, prompt_tokens=64, output_tokens=64, num_requests=24)
    tpot = {n: summarize_load(simulate(step_costs(SMALL, LlamaCppKnobs(max_num_seqs=n), get_gpu("cpu")), eff,
                                       LlamaCppKnobs(max_num_seqs=n), load, max_model_len=1024)).tpot_ms.p50.value
            for n in (3, 4)}
    assert tpot[4] > 1.05 * tpot[3]


def test_a_closed_loops_next_request_waits_for_the_llama_step_that_starts_when_it_is_sent():
    """Two streams of equal requests on a two-slot llama-server finish a step apart. The first one's next request,
    sent on its last token, misses the step the server starts at once for the other's last token, so its prompt is
    processed alone after it; the other's next request arrives during that prompt and waits for it. The streams
    stay locked: each round one request's first token takes about one prompt and the other's about two, and the
    first request's second token comes a prompt after its first (recorded: q8_0, 3 slots, 2 streams, TTFTs
    alternating ~160 and ~300-440 ms)."""
    server = LlamaCppKnobs(max_num_seqs=2)
    costs = step_costs(SMALL, server, get_gpu("cpu"))
    eff = Efficiencies(0.0005, 0.4, 0.05, 0.001, multi_pass=0.5)
    run = simulate(costs, eff, server, lp(2, prompt_tokens=64, output_tokens=16, num_requests=12), max_model_len=1024)
    recs = sorted(run.records, key=lambda r: r.sent_s)
    ttft = [r.first_token_s - r.sent_s for r in recs]
    prompt_alone = min(ttft)
    for a, b in zip(recs[2::2], recs[3::2], strict=True):  # later rounds: a pair sent a step apart
        first, second = sorted((a, b), key=lambda r: r.first_token_s)
        assert second.first_token_s - second.sent_s > 1.6 * prompt_alone
        assert first.first_token_s - first.sent_s < 1.3 * prompt_alone
        assert first.token_times_s[1] - first.token_times_s[0] > 0.8 * prompt_alone
    assert SlotScheduler.of(server).arrival_gap_s > 0


def test_vllms_first_closed_loop_prompt_runs_alone_and_the_streams_stay_a_step_apart():
    """vLLM V1's idle engine core wakes on the first request and steps with it alone; the loop's other requests
    join the next step, and a next request sent on its predecessor's last token misses the step already running.
    Recorded (cpu-smollm2, bfloat16, 4 seqs, 4 streams of 62-token prompts, 16 tokens): first tokens at 1.79 s and
    6.87 s (the other three prompts in one step, with the first request's second token); every later round again
    one prompt alone and three together, so one request a round carries the three-prompt step in its TPOT."""
    server = VllmKnobs(max_num_seqs=4)
    costs = step_costs(SMALL, server, get_gpu("cpu"))
    eff = Efficiencies(0.001, 0.1, 0.02, 0.001)
    run = simulate(costs, eff, server, lp(4, prompt_tokens=64, output_tokens=16, num_requests=16), max_model_len=1024)
    firsts = sorted(r.first_token_s for r in run.records)
    one = firsts[0]
    assert firsts[1] == firsts[2] == firsts[3] > 2 * one  # three prompts after the first, in one step
    (alone,) = [r for r in run.records if r.first_token_s == one]
    assert alone.token_times_s[1] == firsts[1]  # its second token comes with the other three's first
    tpot = sorted((r.token_times_s[-1] - r.token_times_s[0]) / 15 for r in run.records)
    for later in range(4, 16, 4):  # each later round: one request carries the others' prompts in its TPOT
        rnd = sorted(run.records, key=lambda r: r.sent_s)[later:later + 4]
        assert len({r.first_token_s for r in rnd}) == 2
    assert tpot[-1] > 1.2 * tpot[0]
    assert adapter("vllm").scheduler(VllmKnobs(), 1024, None).arrival_gap_s > 0


def test_conformal_half_width_takes_the_right_rank():
    errs = [math.log(1 + i / 100) for i in range(1, 20)]  # 1% .. 19%
    assert interval_half_width(errs, 0.8) == pytest.approx(errs[15])  # ceil(20 x 0.8) = 16th smallest
    assert interval_half_width(errs, 0.95) == pytest.approx(errs[18])
    assert interval_half_width(errs[:5], 0.95) == pytest.approx(errs[4])  # too few: the largest
    assert interval_half_width([], 0.8) is None


def probe(bw=20.0, mm=50.0, method="numpy x"):
    return HardwareProbe(device="cpu", bandwidth_gb_s=bw, matmul_gflop_s=mm, method=method, seconds=0.5)


def test_probes_compare_only_when_taken_the_same_way():
    assert drift(probe(), probe(bw=10.0)) == {"bandwidth": 0.5, "matmul": 1.0}
    assert drift(probe(), probe(method="numpy y")) is None and drift(None, probe()) is None
    assert drift_reasons({"bandwidth": 0.95, "matmul": 1.05}) == []
    (why,) = drift_reasons({"bandwidth": 0.5, "matmul": 1.0})
    assert "bandwidth 2.00x this one's" in why


def test_the_cpu_probe_measures_something():
    p = cpu_probe(copy_mib=8, n=64, repeats=2)
    assert p.device == "cpu" and p.bandwidth_gb_s > 0.1 and p.matmul_gflop_s > 0.01 and "best of 2" in p.method
    assert p.spread is not None and p.spread >= 0


def test_drift_is_judged_beyond_the_noise_each_probe_saw_in_itself():
    from atlas.probe import DRIFT_TOLERANCE, drift_tolerance

    quiet, noisy = probe(), probe().model_copy(update={"spread": 0.08})
    assert drift_tolerance(quiet, quiet) == DRIFT_TOLERANCE  # older probes carry no spread: the bare tolerance
    assert drift_tolerance(noisy, noisy.model_copy(update={"spread": 0.04})) == pytest.approx(DRIFT_TOLERANCE + 0.12)
    ratios = drift(noisy, probe(bw=17.0))  # 15% slower: beyond 10%, within what the noisy probe could not resolve
    assert drift_reasons(ratios) and not drift_reasons(ratios, drift_tolerance(noisy, probe(bw=17.0)))


def test_a_probe_that_drifts_is_taken_again_and_keeps_each_best_rate(monkeypatch):
    from atlas import probe as probe_mod
    from atlas.hardware import get_gpu

    taken = iter([probe(bw=14.0, mm=50.0), probe(bw=19.5, mm=44.0), probe(bw=18.0, mm=49.0)])
    monkeypatch.setattr(probe_mod, "measure", lambda gpu: next(taken))
    calibrated = probe()
    here = probe_mod.probe_if_here(get_gpu("cpu"), [calibrated, None])
    assert (here.bandwidth_gb_s, here.matmul_gflop_s) == (19.5, 50.0)  # a busy neighbour slowed the first copy
    assert not drift_reasons(drift(calibrated, here))
    assert next(taken).bandwidth_gb_s == 18.0  # it stopped once within tolerance: the third was never taken
    slow = iter([probe(bw=10.0)] * 3)
    monkeypatch.setattr(probe_mod, "measure", lambda gpu: next(slow))
    assert drift(calibrated, probe_mod.probe_if_here(get_gpu("cpu"), [calibrated]))["bandwidth"] == 0.5  # 3 probes
    assert next(slow, None) is None


def test_a_calibration_moves_to_a_machine_that_probes_differently():
    from atlas.config import parse_spec
    from atlas.plan import expand
    from atlas.results import Provenance, RunResult
    from atlas.simulator.fit import fit
    from atlas.simulator.predict import predict_config

    spec = parse_spec({"name": "p", "engine": "llamacpp", "gpu": "cpu", "model": SMALL.model_dump(mode="json"),
                       "grid": {"quantization": ["q8_0"], "max_num_seqs": [1, 4]},
                       "load": {"concurrency": [1, 4], "num_requests": 12, "warmup_requests": 0,
                                "prompt_tokens": 64, "output_tokens": 16, "min_requests": 4, "min_duration_s": 0}})
    here = probe()
    prov = Provenance(atlas_version="0", model_id="s", host_cpu="c", python="3", started_at="t", hardware_probe=here)
    eff = Efficiencies(0.002, 0.3, 0.2)
    measured = []
    for item in expand(spec, get_gpu("cpu")):
        costs = step_costs(SMALL, item.config.server, get_gpu("cpu"))
        m = summarize_load(simulate(costs, eff, item.config.server, item.config.load, max_model_len=1024))
        measured.append(RunResult(run_id=item.run_id, sweep="p", status="ok", label="x", config=item.config,
                                  metrics=m, provenance=prov))
    art = fit(measured, "p")
    assert art.groups[0].probe == here and set(art.groups[0].intervals["tpot_p50_ms"]) == {"80", "95"}
    cfg = measured[0].config
    same = predict_config(art, cfg, "a", "p", probe=probe(bw=21.0, mm=52.0))
    slow = predict_config(art, cfg, "a", "p", probe=probe(bw=10.0, mm=25.0))
    unknown = predict_config(art.model_copy(update={"groups": [art.groups[0].model_copy(update={"probe": None})]}),
                             cfg, "a", "p", probe=here)
    assert not same.simulation.extrapolated and same.simulation.probe_ratios["bandwidth"] == pytest.approx(1.05)
    assert slow.simulation.extrapolated and any("probed bandwidth 2.00x" in r for r in
                                                 slow.simulation.extrapolation_reasons)
    # half the bandwidth and matrix rate: every step costs about twice as much
    assert slow.metrics.tpot_ms.p50.value == pytest.approx(2 * 1.045 * same.metrics.tpot_ms.p50.value, rel=0.03)
    assert any("not probed" in r for r in unknown.simulation.extrapolation_reasons)


def _llama_measured(name, grid, truth):
    """Synthetic llama.cpp measurements: each planned point of `grid` simulated with its weight type's `truth`."""
    from atlas.config import parse_spec
    from atlas.plan import expand
    from atlas.results import RunResult

    spec = parse_spec({"name": name, "engine": "llamacpp", "gpu": "cpu", "model": SMALL.model_dump(mode="json"),
                       "grid": grid,
                       "load": {"concurrency": [1, 4], "num_requests": 12, "warmup_requests": 0,
                                "prompt_tokens": 64, "output_tokens": 16, "min_requests": 4, "min_duration_s": 0}})
    out = []
    for item in expand(spec, get_gpu("cpu")):
        s = item.config.server
        costs = step_costs(SMALL, s, get_gpu("cpu"))
        m = summarize_load(simulate(costs, truth[s.quantization.value], s, item.config.load, max_model_len=1024))
        out.append(RunResult(run_id=item.run_id, sweep=name, status="ok", label="x", config=item.config, metrics=m))
    return out


def test_the_engine_wide_fit_lets_a_numerics_measured_at_one_slot_count_predict_another():
    """Per-sequence cost is the engine's on this machine: learnt from q4_0 at 1 and 4 slots, it predicts q8_0 at
    4 slots, which was measured only at 1 slot (a per-numerics fit cannot see it there)."""
    from atlas.simulator.fit import fit
    from atlas.simulator.predict import predict_config

    truth = {"q8_0": Efficiencies(0.0005, 0.5, 0.3, 0.004, 0.8), "q4_0": Efficiencies(0.0005, 0.4, 0.25, 0.004, 0.8)}
    measured, held = [], []
    for r in _llama_measured("j", {"quantization": ["q8_0", "q4_0"], "max_num_seqs": [1, 4]}, truth):
        s = r.config.server
        (held if (s.quantization.value, s.max_num_seqs) == ("q8_0", 4) else measured).append(r)
    art = fit(measured, "j")
    assert {g.sample_s for g in art.groups} == {art.groups[0].sample_s}  # one per-sequence cost per engine
    assert art.groups[0].sample_s == pytest.approx(0.004, rel=0.15)
    # and so is the extra cost of llama.cpp's multi-token GEMM path, learnt where sequences decoded together
    assert {g.multi_pass for g in art.groups} == {art.groups[0].multi_pass}
    assert art.groups[0].multi_pass == pytest.approx(0.8, rel=0.2)
    for r in held:
        pred = predict_config(art, r.config, r.run_id, "j")
        assert pred.metrics.value("tpot_p50_ms") == pytest.approx(r.metrics.value("tpot_p50_ms"), rel=0.05)
        assert pred.metrics.output_tok_s == pytest.approx(r.metrics.output_tok_s, rel=0.05)


def test_llamacpp_prices_a_multi_token_micro_batch_above_a_one_token_step():
    """One token goes through ggml's matrix-vector kernels, two or more through its GEMM path, which costs
    `multi_pass` extra weight passes per micro-batch, each at the roofline bandwidth (not at the format's fitted
    matrix-vector efficiency): the second decoding stream costs more than the third."""
    from atlas.simulator.scheduler import SimSeq, Step

    server = LlamaCppKnobs(engine="llamacpp", quantization="q8_0", max_num_seqs=4)
    sched = SlotScheduler.of(server)
    costs = step_costs(SMALL, server, get_gpu("cpu"))
    eff = Efficiencies(0.0005, 0.5, 0.3, 0.002, multi_pass=0.7)
    weights = costs.weight_bytes / costs.bandwidth_b_s  # one pass at the roofline

    def decoding(n: int) -> float:
        seqs = [SimSeq(rec=None, prompt=1, out=8, prefilled=1) for _ in range(n)]  # type: ignore[arg-type]
        sched = SlotScheduler.of(server)
        sched.plan([], deque(seqs))  # into slots 3, 2, 1: consecutive, one micro-batch
        return sched.step_s(costs, eff, Step(decode=seqs, prefill=[]))

    one, two, three = decoding(1), decoding(2), decoding(3)
    assert two - one == pytest.approx(0.7 * weights + (three - two), rel=1e-6)
    eff = Efficiencies(0.0005, 0.25, 0.3, 0.002, multi_pass=0.7)  # half the matrix-vector efficiency:
    one, two, three = decoding(1), decoding(2), decoding(3)
    assert (two - one) - (three - two) == pytest.approx(0.7 * weights, rel=1e-6)  # the extra passes cost the same
    eff = Efficiencies(0.0005, 0.5, 0.3, 0.002, multi_pass=0.7)
    plain = Efficiencies(0.0005, 0.5, 0.3, 0.002)  # other engines' default: no split
    assert sched.step_s(costs, plain, Step(decode=[], prefill=[])) < one
    empty = Step(decode=[], prefill=[])  # no tokens: no micro-batch of two or more
    assert sched.step_s(costs, eff, empty) == sched.step_s(costs, plain, empty)
    # a prompt of ubatch + 1 tokens: two micro-batches, the second of one token (matrix-vector)
    seq = SimSeq(rec=None, prompt=sched.ubatch + 1, out=8)  # type: ignore[arg-type]
    sched = SlotScheduler.of(server)
    sched.plan([], deque([seq]))
    split = sched.step_s(costs, eff, Step(decode=[], prefill=[(seq, sched.ubatch + 1)]))
    assert split - sched.step_s(costs, plain, Step(decode=[], prefill=[(seq, sched.ubatch + 1)])) == pytest.approx(
        0.7 * weights, rel=1e-6)


def test_llamacpp_fits_efficiencies_per_weight_type_and_prices_an_unmeasured_kv_type_by_its_bytes():
    """llama.cpp's kernels are the weight type's; a KV-cache type changes only the bytes attention reads. Its
    efficiencies are fitted once over every KV type measured with those weights, so a KV type never measured is
    predicted from them with its own bytes (flagged as not measured), not from an average over other weights."""
    from atlas.simulator.fit import fit
    from atlas.simulator.predict import predict_config

    truth = {"q8_0": Efficiencies(0.0005, 0.5, 0.3, 0.004, 0.8), "q4_0": Efficiencies(0.0005, 0.2, 0.1, 0.004, 0.8)}
    grid = {"quantization": ["q8_0", "q4_0"], "kv_cache_dtype": ["f16", "q8_0", "q4_0"], "max_num_seqs": [1, 4]}
    measured, held = [], []
    for r in _llama_measured("k", grid, truth):
        s = r.config.server
        unmeasured = (s.quantization.value, s.kv_cache_dtype.value) == ("q8_0", "q4_0")
        (held if unmeasured else measured).append(r)
    art = fit(measured, "k", cross_validate=False)
    q8 = [g for g in art.groups if g.numerics[1] == "q8_0"]
    assert sorted(g.numerics[2] for g in q8) == ["f16", "q8_0"]  # one group per measured numerics
    assert {g.efficiency_key for g in q8} == {("-", "q8_0", "*")}
    assert len({(g.bw_eff, g.compute_eff) for g in q8}) == 1  # fitted together
    assert q8[0].bw_eff == pytest.approx(0.5, rel=0.1)
    for r in held:
        pred = predict_config(art, r.config, r.run_id, "k")
        assert pred.simulation.extrapolated
        assert any("same weights with kv f16, q8_0" in x for x in pred.simulation.extrapolation_reasons)
        assert pred.metrics.value("tpot_p50_ms") == pytest.approx(r.metrics.value("tpot_p50_ms"), rel=0.05)
    # a weight type never measured takes the pooled efficiencies of the others, with the interval that predicting
    # each measured weight type from the other gave here: q8_0 and q4_0 differ 2.5x in bandwidth efficiency, so
    # it is wide, not the held-out interval of a measured numerics doubled
    g = q8[0]
    assert g.transfer_intervals["tpot_p50_ms"]["95"] > 0.3  # x1.35 and more
    q6 = LlamaCppKnobs.model_validate({**held[0].config.server.model_dump(), "quantization": "q6_k",
                                       "kv_cache_dtype": "f16"})
    other = held[0].config.model_copy(update={"server": q6})
    p6 = predict_config(art, other, "x", "k")
    assert any("bytes model with its other fits" in x for x in p6.simulation.extrapolation_reasons)
    assert p6.simulation.intervals == g.transfer_intervals
    assert p6.simulation.relative_error["tpot_p50_ms"] == pytest.approx(g.transfer_mape["tpot_p50_ms"])
    # from a calibration of one weight type that was never checked: said so, the doubled interval kept
    one = fit([r for r in measured if r.config.server.quantization.value == "q8_0"], "one", cross_validate=False)
    assert not one.groups[0].transfer_intervals
    guess = predict_config(one, other, "x", "one")
    assert any("interval is a guess" in x for x in guess.simulation.extrapolation_reasons)
    # vLLM's KV formats keep their own kernels (an fp8 KV cache runs other attention kernels): no pooling
    from atlas.simulator.fit import efficiency_key_of

    assert efficiency_key_of("vllm")(("bfloat16", "none", "fp8")) == ("bfloat16", "none", "fp8")
