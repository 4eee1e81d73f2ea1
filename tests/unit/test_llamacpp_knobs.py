"""llama.cpp knobs: spec validation per engine, the llama-server argv, run ids of vLLM configs unchanged."""

import pytest

from atlas.config import SpecError, parse_spec
from atlas.engines.llamacpp.engine import build_argv
from atlas.engines.llamacpp.knobs import GgufType, LlamaCppKnobs, LlamaKV
from atlas.engines.vllm.knobs import VllmKnobs
from atlas.hardware import get_gpu
from atlas.plan import expand

MODEL = {"id": "m", "source": "embedded"}


def spec(grid, engine="llamacpp"):
    return parse_spec({"name": "t", "engine": engine, "model": MODEL, "grid": grid})


def test_argv_maps_every_knob():
    s = LlamaCppKnobs(quantization=GgufType.Q4_K_M, kv_cache_dtype=LlamaKV.Q4_0, max_num_seqs=4,
                      max_num_batched_tokens=256, n_ubatch=64)
    argv = build_argv(s, "/m.gguf", binary="/bin/llama-server", served_name="m", host="127.0.0.1", port=9,
                      max_model_len=512)
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert argv[0] == "/bin/llama-server" and pairs["--model"] == "/m.gguf"
    assert argv[argv.index("--parallel") + 1] == "4" and argv[argv.index("--ctx-size") + 1] == "2048"
    assert argv[argv.index("--cache-type-k") + 1] == "q4_0" and argv[argv.index("--cache-type-v") + 1] == "q4_0"
    assert argv[argv.index("--batch-size") + 1] == "256" and argv[argv.index("--ubatch-size") + 1] == "64"
    assert argv[argv.index("--flash-attn") + 1] == "on" and "--metrics" in argv
    auto = build_argv(LlamaCppKnobs(quantization=GgufType.F16), "/m.gguf", binary="b", served_name="m",
                      host="h", port=1, max_model_len=64)
    assert auto[auto.index("--cache-type-k") + 1] == "f16" and "--batch-size" not in auto


@pytest.mark.parametrize("grid, needle", [
    ({"quantization": ["awq"]}, "grid.quantization.0: Input should be 'f16'"),
    ({"quantization": ["q4_0"], "kv_cache_dtype": ["fp8"]}, "grid.kv_cache_dtype.0: Input should be 'auto', 'f16'"),
    ({"quantization": ["q4_0"], "dtype": ["float32"]}, "grid.dtype: llamacpp has no knob 'dtype'"),
    ({"quantization": ["q4_0"], "enable_chunked_prefill": [True]}, "llamacpp has no knob 'enable_chunked_prefill'"),
])
def test_knobs_the_engine_lacks_are_one_line_spec_errors(grid, needle):
    with pytest.raises(SpecError) as e:
        spec(grid)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_vllm_refuses_gguf_types_and_ubatch():
    with pytest.raises(SpecError, match=r"grid.quantization.0: Input should be 'none', .* \(engine vllm\)"):
        spec({"quantization": ["q4_0"]}, engine="vllm")
    with pytest.raises(SpecError, match="vllm has no knob 'n_ubatch'"):
        spec({"n_ubatch": [64]}, engine="vllm")


def test_combined_spec_and_infeasible_ubatch():
    s = spec([{"engine": "vllm", "dtype": ["float32"]},
              {"quantization": ["q8_0"], "max_num_batched_tokens": [64], "n_ubatch": [32, 128]}])
    items = expand(s, get_gpu("cpu"))
    assert [i.config.engine for i in items] == ["vllm", "llamacpp", "llamacpp"]
    assert items[2].kind == "skipped" and "n_ubatch=128 > n_batch" in items[2].reason
    gpu_items = expand(spec({"quantization": ["q8_0"]}), get_gpu("h100"))
    assert gpu_items[0].kind == "skipped" and "CPU-only" in gpu_items[0].reason


def test_run_id_forms_keep_the_flat_layout_results_were_measured_under():
    assert VllmKnobs().id_form() == {"dtype": "bfloat16", "quantization": "none", "kv_cache_dtype": "auto",
                                     "max_num_seqs": 256, "max_num_batched_tokens": None,
                                     "enable_chunked_prefill": None, "enable_prefix_caching": False,
                                     "gpu_memory_utilization": None}
    flat = LlamaCppKnobs(quantization="q8_0").id_form()
    assert flat["dtype"] == "bfloat16" and "n_ubatch" not in flat and "engine" not in flat
    assert LlamaCppKnobs(n_ubatch=8).id_form()["n_ubatch"] == 8


def test_variants_are_made_from_f16_once_then_cached(tmp_path, monkeypatch):
    from atlas.engines.llamacpp import gguf

    monkeypatch.setenv("ATLAS_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def fake_worker(cmd, src, dst, ftype, **kw):  # stands in for llama.cpp: writes a file per type
        calls.append((src, ftype))
        open(dst, "wb").write(ftype.encode() * 10)
        return {"seconds": 0.0}

    monkeypatch.setattr(gguf, "_run_worker", fake_worker)
    src = tmp_path / "model.gguf"
    src.write_bytes(b"GGUF source")
    p4, prov4 = gguf.variant(src, GgufType.Q4_0)
    assert [f for _, f in calls] == ["LLAMA_FTYPE_MOSTLY_F16", "LLAMA_FTYPE_MOSTLY_Q4_0"]
    assert calls[1][0].endswith("f16.gguf") and prov4["made_from"] == "f16" and len(prov4["sha256"]) == 64
    again, prov_again = gguf.variant(src, GgufType.Q4_0)
    gguf.variant(src, GgufType.F16)
    assert again == p4 and prov_again == prov4 and len(calls) == 2  # nothing remade
    p4.write_bytes(b"truncated")  # a damaged cache file is remade, not served
    gguf.variant(src, GgufType.Q4_0)
    assert len(calls) == 3


def test_a_gguf_given_as_model_path_must_be_pinned(tmp_path):
    import hashlib

    from atlas.config import ModelSpec
    from atlas.engines.llamacpp.gguf import GgufError, source_gguf

    f = tmp_path / "other.gguf"
    f.write_bytes(b"GGUF-not-really")
    digest = hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(GgufError, match=f"is not pinned: add `sha256: {digest}`"):
        source_gguf(ModelSpec(id="x", source="path", path=str(f)))
    with pytest.raises(GgufError, match="is not the pinned"):
        source_gguf(ModelSpec(id="x", source="path", path=str(f), sha256="0" * 64))
    path, prov = source_gguf(ModelSpec(id="x", source="path", path=str(f), sha256=digest))
    assert path == f and prov["pinned_sha256"] == digest
    # the pin joins run ids only when given: configs measured before it existed keep theirs
    assert "sha256" not in ModelSpec(id="x", source="embedded").model_dump()


def test_prompt_cache_follows_the_prefix_caching_knob():
    """llama-server reuses a repeated prompt by default (slot cache and --cache-ram): off must mean off."""
    kw = dict(binary="b", served_name="m", host="h", port=1, max_model_len=64)
    off = build_argv(LlamaCppKnobs(), "/m.gguf", **kw)
    assert "--no-cache-prompt" in off and off[off.index("--cache-ram") + 1] == "0"
    on_knobs = LlamaCppKnobs(enable_prefix_caching=True)
    on = build_argv(on_knobs, "/m.gguf", **kw, slot_dir="/r/logs/k.slots")
    assert "--cache-prompt" in on and "--no-cache-prompt" not in on and on[on.index("--cache-ram") + 1] == "0"
    assert on[on.index("--slot-save-path") + 1] == "/r/logs/k.slots"  # so /slots/N?action=erase may empty them
    assert on_knobs.prefix_caching and on_knobs.label().endswith("prefix-cache")
    assert on_knobs.id_form()["enable_prefix_caching"] is True
    assert LlamaCppKnobs().id_form()["enable_prefix_caching"] is False  # ids of cache-off configs unchanged


def test_a_result_measured_with_the_prompt_cache_silently_on_loads_invalid_and_is_measured_again(tmp_path):
    """Results from before the prompt cache was turned off for cache-off configs replayed cached prompts."""
    from atlas.results import Provenance, ResultStore, RunResult

    s = spec({"quantization": ["q8_0"]})
    item = expand(s, get_gpu("cpu"))[0]
    store = ResultStore(tmp_path, "t")
    old_argv = build_argv(item.config.server, "/m.gguf", binary="b", served_name="m", host="h", port=1,
                          max_model_len=64)
    old_argv = [a for a in old_argv if a not in ("--no-cache-prompt", "--cache-ram", "0")]
    for argv, audited in ((old_argv, True), (old_argv + ["--no-cache-prompt", "--cache-ram", "0"], False)):
        prov = Provenance(atlas_version="0", model_id="m", host_cpu="c", python="3", started_at="t",
                          engine={"argv": argv})
        store.write(RunResult(run_id=item.run_id, sweep="t", status="ok", label="x", config=item.config,
                              provenance=prov))
        back = store.get(item.run_id)
        assert (back.status == "invalid") is audited
        assert any("prompt cache on" in x for x in back.reasons) is audited
        assert store.is_complete(item.run_id, item.config) is not audited
