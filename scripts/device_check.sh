#!/usr/bin/env bash
# The prepared GPU check (issue: GPU sweeps on vLLM): on a lent H100/H200, install vLLM, run the small real
# GPU sweep (Qwen2.5-0.5B: bf16/FP8 weights x KV auto/fp8/fp8-calibrated x 2 loads) and print the figures.
# Meant to finish in under 8 minutes; its output belongs in the issue note.
#   bash scripts/device_check.sh            (OUT=<folder> keeps the results and the report there)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/atlas-device-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || exit 1
python3 -m venv /tmp/atlas-gpu-venv && . /tmp/atlas-gpu-venv/bin/activate || exit 1
pip install -q -e '.[gpu,dev]' 2>&1 | tail -2
python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"
export ATLAS_TEST_ARTIFACTS="$OUT"
start=$(date +%s)
timeout 420 python -m pytest tests/gpu -q -s -m gpu --timeout 400 2>&1 | tee "$OUT/gpu-tests.log"
rc=${PIPESTATUS[0]}
echo "device check: rc=$rc in $(( $(date +%s) - start )) s"
exit "$rc"
