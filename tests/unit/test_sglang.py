"""The SGLang adapter: its knobs, plan and command lines, the latter parsed by SGLang's own argument parser
(sglang 0.5.23's ServerArgs.add_cli_args, installed by scripts/setup.sh without SGLang's dependencies into
.venv/sglang-parser and run in a subprocess, since importing SGLang patches transformers)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from atlas.config import SpecError, parse_spec
from atlas.hardware import get_gpu
from atlas.plan import PlannedRun, expand
from atlas.serving import default_engine

PARSER_SITE = Path(sys.prefix) / "sglang-parser"
SPEC = {"name": "sgl", "engine": "sglang",
        "model": {"id": "qwen", "source": "hub", "path": "Qwen/Qwen2.5-7B-Instruct", "params_b": 7.6,
                  "num_layers": 28, "num_kv_heads": 4, "head_dim": 128, "max_model_len": 8192,
                  "checkpoints": {"awq": "Qwen/Qwen2.5-7B-Instruct-AWQ", "gptq": "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"}},
        "grid": {"quantization": ["none", "fp8", "awq", "gptq"], "kv_cache_dtype": ["auto", "fp8_e4m3"],
                 "max_running_requests": [64, 256], "chunked_prefill_size": [None, 4096], "radix_cache": [True, False]},
        "load": {"concurrency": [8]}}
PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = []
for argv in json.load(sys.stdin):
    ns = parser.parse_args(argv)  # exits on an unknown flag or a value SGLang refuses
    out.append({k: getattr(ns, k) for k in ("quantization", "kv_cache_dtype", "max_running_requests",
                                            "chunked_prefill_size", "disable_radix_cache", "served_model_name",
                                            "port", "dtype", "context_length", "model_path", "enable_metrics")})
print(json.dumps(out))
"""


def planned(gpu="h100"):
    spec = parse_spec(SPEC)
    return spec, [i for i in expand(spec, get_gpu(gpu)) if isinstance(i, PlannedRun)]


def test_sglang_is_planned_on_gpus_only_and_refuses_other_engines_knobs():
    spec, items = planned()
    assert len(items) == 64 and {i.config.engine for i in items} == {"sglang"}
    assert all(i.kind == "skipped" and "GPUs only" in i.reason for i in expand(spec, get_gpu("cpu")))
    with pytest.raises(SpecError, match="sglang has no knob 'max_num_seqs'"):
        parse_spec({**SPEC, "grid": {"max_num_seqs": [4]}})
    with pytest.raises(SpecError, match=r"kv_cache_dtype.0: .*\(engine sglang\)"):
        parse_spec({**SPEC, "grid": {"kv_cache_dtype": ["fp8"]}})  # that is vLLM's name
    base = [i for i in items if i.config.server.numerics().is_baseline_candidate]
    assert base and all(i.config.server.label().startswith("sglang bfloat16 w:none kv:auto") for i in base)


def test_every_sglang_argv_parses_with_sglangs_own_parser(tmp_path):
    if not (PARSER_SITE / "sglang").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"SGLang's parser is not installed in CI ({PARSER_SITE}): scripts/setup.sh did not run")
        pytest.skip(f"SGLang's parser not installed ({PARSER_SITE}; scripts/setup.sh installs it)")
    spec, items = planned()
    engines = [default_engine(spec, get_gpu("h100"), i.config, "/models/qwen", tmp_path / "log") for i in items]
    argvs = [e.argv for e in engines]
    assert all(a[1:3] == ["-m", "sglang.launch_server"] for a in argvs)
    p = subprocess.run([sys.executable, "-c", PARSE], input=json.dumps([a[3:] for a in argvs]), text=True,
                       capture_output=True, timeout=300, env={**os.environ, "PYTHONPATH": str(PARSER_SITE)})
    assert p.returncode == 0, p.stderr[-2000:]
    parsed = json.loads(p.stdout.strip().splitlines()[-1])
    for item, eng, ns in zip(items, engines, parsed, strict=True):
        s = item.config.server
        checkpoint = s.quantization.value in ("awq", "gptq")
        assert ns["quantization"] == ("fp8" if s.quantization.value == "fp8" else None), (s.label(), ns)
        assert ns["kv_cache_dtype"] == s.kv_cache_dtype.value
        assert ns["max_running_requests"] == s.max_running_requests
        assert ns["chunked_prefill_size"] == s.chunked_prefill_size
        assert ns["disable_radix_cache"] is (not s.radix_cache)
        assert ns["served_model_name"] == eng.served_model and ns["port"] == eng.port and ns["enable_metrics"]
        assert ns["dtype"] == "bfloat16" and ns["context_length"] == 8192
        assert ns["model_path"] == "/models/qwen"  # the sweep's model source resolves checkpoints before this
        assert checkpoint or ns["quantization"] in (None, "fp8")
