"""The simulator predicts a workload from the same request list the load generator sends: its lengths, a
trace's arrivals, and with prefix caching on the prompt tokens an earlier request already sent."""

import pytest

from atlas.config import LoadPoint, ModelSpec
from atlas.engines.vllm.knobs import VllmKnobs
from atlas.hardware import get_gpu
from atlas.knobs import LoadMode
from atlas.metrics import summarize_load
from atlas.simulator.features import Efficiencies, step_costs
from atlas.simulator.queue import request_list, simulate
from atlas.workloads.requests import plan_requests

MODEL = ModelSpec(id="m", source="path", path="/m", params_b=7.6, num_layers=28, num_kv_heads=4, head_dim=128,
                  max_model_len=4096)
EFF = Efficiencies(overhead_s=0.004, bw_eff=0.7, compute_eff=0.5)
SHARED = {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 1500, "questions_per_group": 20,
          "question_tokens": 40, "output_tokens": 16}


def point(workload, **kw):
    return LoadPoint(**{"concurrency": 8, "num_requests": 40, "warmup_requests": 0, "min_requests": 4,
                        "min_duration_s": 0, "repeats": 1, "workload": workload, **kw})


def sim(p, caching=False, reuse=1.0):
    server = VllmKnobs(max_num_seqs=64, enable_prefix_caching=caching)
    return simulate(step_costs(MODEL, server, get_gpu("l4")), EFF, server, p, max_model_len=4096, reuse=reuse)


def test_the_simulated_requests_are_the_planned_ones():
    w = {"kind": "distribution", "prompt": {"dist": "lognormal", "mean": 300, "stdev": 200, "max": 2000},
         "output": {"dist": "uniform", "min": 8, "max": 64}}
    p = point(w)
    run = sim(p)
    plan = plan_requests(p, 40, 0, 4096, None)
    assert [(r.prompt_tokens, r.requested_tokens) for r in run.records] == \
        [(q.prompt_tokens, q.output_tokens) for q in plan.requests]
    assert [r.output_tokens for r in run.records] == [q.output_tokens for q in plan.requests]


def test_prefix_caching_cuts_simulated_ttft_by_the_shared_prefix():
    p = point(SHARED)
    off, on = summarize_load(sim(p)), summarize_load(sim(p, caching=True))
    half = summarize_load(sim(p, caching=True, reuse=0.5))
    assert on.ttft_ms.mean < half.ttft_ms.mean < off.ttft_ms.mean  # the less is cached, the more is prefilled
    assert off.ttft_ms.p50.value / on.ttft_ms.p50.value > 3  # 1540-token prompts, 1500 of them cached
    assert on.tpot_ms.p50.value <= off.tpot_ms.p50.value


def test_a_trace_is_simulated_at_its_own_arrivals(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("timestamp_s,input_tokens,output_tokens\n" +
                    "".join(f"{i * 0.5},{100 + i},{10}\n" for i in range(20)))
    p = LoadPoint(mode=LoadMode.TRACE, num_requests=20, min_requests=4, min_duration_s=0, repeats=1,
                  workload={"kind": "trace", "path": str(path), "time_scale": 2.0})
    run = sim(p)
    assert [r.scheduled_s for r in run.records] == pytest.approx([i * 1.0 for i in range(20)])
    assert [r.prompt_tokens for r in run.records] == [100 + i for i in range(20)]
    assert request_list(p, 20, 0, 4096)[3] == (103, 10, 0, 3.0)
