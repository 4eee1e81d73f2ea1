#!/usr/bin/env bash
# The prepared GPU check (issue: GPU sweeps on vLLM). One call, well under 8 minutes on an H100/H200:
#   1. the GPU as nvidia-smi and NVML see it;
#   2. tests/gpu (marked gpu): NVML finds a GPU configs/gpus.yaml knows, with matching memory and every
#      provenance field; a sweep naming another GPU is refused before anything starts; and, where vLLM is
#      installed, a small real sweep (bf16/FP8 weights x KV auto/fp8/fp8_calibrated x 2 loads) that prints
#      each point's throughput, accuracy and status;
#   3. benchmarks/gpu_ceilings.py: measured copy bandwidth and bf16/fp8 matrix rates against gpus.yaml.
#
# Where Atlas's own dependencies come from:
#   - this workplace's lent machine (Python 3.12 with torch, reaches no registry): run scripts/device_wheels.sh
#     on the dev machine first and carry .whl; vLLM is not in that image and cannot be carried (its wheel and
#     the torch build it pins are far over the 64 MiB a call carries), so step 2's vLLM sweep is skipped there;
#   - a GPU host that reaches PyPI: ATLAS_DEVICE_INSTALL=1 makes a venv with .[gpu,dev] (vLLM included).
# The real sweep's model: ATLAS_GPU_MODEL (a local folder where the hub is unreachable).
#   bash scripts/device_check.sh        (OUT=<folder> keeps the logs there)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/atlas-device-check}
mkdir -p "$OUT"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv \
  || { echo "device check: nvidia-smi failed: no NVIDIA GPU here"; exit 1; }
if [ "${ATLAS_DEVICE_INSTALL:-0}" = 1 ]; then
  python3 -m venv /tmp/atlas-gpu-venv && . /tmp/atlas-gpu-venv/bin/activate || exit 1
  pip install -q -e '.[gpu,dev]' 2>&1 | tail -2
elif [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/atlas-site \
    .whl/*.whl 2>&1 | tail -2
  export PYTHONPATH="/tmp/atlas-site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
python3 -c "import atlas.cli" \
  || { echo "device check: Atlas does not import here (run scripts/device_wheels.sh where PyPI is reachable and carry .whl)"; exit 1; }
python3 - <<'EOF'
import importlib.util, torch
print("python", __import__("sys").version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda,
      "| vllm", __import__("vllm").__version__ if importlib.util.find_spec("vllm") else "not installed")
EOF
export ATLAS_TEST_ARTIFACTS="$OUT"
echo "== tests/gpu"
timeout 420 python3 -m pytest tests/gpu -m gpu -q -s -rs --timeout 400 -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.log"
rc=${PIPESTATUS[0]}
echo "== ceilings"
timeout 150 python3 benchmarks/gpu_ceilings.py 2>&1 | tee "$OUT/ceilings.log"
rc2=${PIPESTATUS[0]}
echo "device check: tests rc=$rc, ceilings rc=$rc2, in $(( $(date +%s) - t0 )) s"
[ "$rc" = 0 ] && [ "$rc2" = 0 ]
