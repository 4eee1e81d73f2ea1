"""One notion of numerics and one baseline rule, used alike by the sweep order, the search, the simulator's
groups and the report's speed-up chart, for every engine."""

from pathlib import Path

from atlas.config import parse_spec
from atlas.engines.llamacpp.knobs import LlamaCppKnobs
from atlas.engines.vllm.knobs import VllmKnobs
from atlas.frontier import DEFAULT_OBJECTIVES, compute_frontier
from atlas.hardware import get_gpu
from atlas.numerics import baselines
from atlas.plan import PlannedRun, expand
from atlas.report.site import speedups
from atlas.results import load_results
from atlas.search.driver import baseline_keys
from atlas.search.space import SearchSpace
from atlas.sweep import order_groups
from atlas.table import results_frame

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def test_the_baseline_is_the_most_precise_unquantized_numerics_of_each_engine():
    ns = [VllmKnobs(dtype="bfloat16").numerics(), VllmKnobs(dtype="float32").numerics(),
          VllmKnobs(dtype="float32", kv_cache_dtype="fp8").numerics(),
          LlamaCppKnobs(quantization="q8_0").numerics(), LlamaCppKnobs(quantization="f16", kv_cache_dtype="f16").numerics()]
    b = baselines(ns)
    assert b["vllm"].key == ("vllm", "float32", "none", "auto")
    assert b["llamacpp"].key == ("llamacpp", "-", "f16", "f16")
    assert ns[0] == VllmKnobs(dtype="bfloat16", max_num_seqs=4).numerics()  # scheduling knobs are not numerics


def test_sweep_order_and_search_agree_on_the_baseline():
    spec = parse_spec({"name": "t", "model": {"id": "m", "source": "embedded"},
                       "grid": [{"dtype": ["bfloat16", "float32"], "kv_cache_dtype": ["fp8", "auto"]},
                                {"engine": "llamacpp", "quantization": ["q4_0", "f16"]}]})
    planned = [i for i in expand(spec, get_gpu("cpu")) if isinstance(i, PlannedRun)]
    groups: dict[str, list[PlannedRun]] = {}
    for p in planned:
        groups.setdefault(p.config.server_key(), []).append(p)
    first = [g[0].config.server.numerics().key for g in order_groups(groups)]
    keys = baseline_keys(SearchSpace(planned))
    assert first[:2] == [keys["vllm"], keys["llamacpp"]]
    assert keys == {"vllm": ("vllm", "float32", "none", "auto"), "llamacpp": ("llamacpp", "-", "f16", "auto")}


def test_the_speedup_chart_has_a_baseline_for_every_engine_recorded():
    for name in ("cpu-smollm2", "cpu-smollm2-llamacpp"):
        results, _ = load_results(DATA / name)
        sp = speedups(compute_frontier(results_frame(results), DEFAULT_OBJECTIVES))
        assert len(sp) > 0, name
        assert sp["baseline"].nunique() == 1
    assert sp["baseline"].iloc[0] == "w:f16 · kv:f16"  # llama.cpp's F16 weights and f16 cache
