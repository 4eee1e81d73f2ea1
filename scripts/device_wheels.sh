#!/usr/bin/env bash
# Run HERE (a machine that reaches PyPI) before a device check: downloads into .whl/ the wheels of what Atlas
# needs that the lent GPU machine's image lacks (it has Python 3.12, torch, numpy, scipy, pandas, typer, rich,
# aiohttp, jinja2, pyyaml, nvidia-ml-py, pytest; it reaches no registry). Same versions as .venv here.
# The device call then carries .whl (see scripts/device_check.sh). About 20 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-3.12}
NEEDED="pydantic pydantic-core annotated-types typing-inspection plotly optuna sqlalchemy alembic mako colorlog"
rm -rf .whl && mkdir -p .whl
pins=$(.venv/bin/pip freeze 2>/dev/null | tr 'A-Z_' 'a-z-' | grep -E "^($(echo "$NEEDED" | tr ' ' '|'))==" || true)
[ "$(echo "$pins" | wc -w)" -eq "$(echo "$NEEDED" | wc -w)" ] || { echo "device_wheels: .venv lacks some of: $NEEDED (run scripts/setup.sh)"; exit 1; }
platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms="$platforms --platform $p"
done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp $platforms \
  -d .whl $pins
ls .whl | sed 's/^/  /'
du -sh .whl
