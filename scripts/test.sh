#!/usr/bin/env bash
# The test command (README, .ci/run): set up, then every test, the real embedded sweep included.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# The converted embedded model is cached inside this checkout (ignored by git), so a CI run makes its own.
export ATLAS_CACHE_DIR="${ATLAS_CACHE_DIR:-$PWD/.cache/atlas}"
export ATLAS_TEST_ARTIFACTS="${ATLAS_TEST_ARTIFACTS:-$PWD/test-artifacts}"
# The distributed-search tests need a PostgreSQL server: .ci/run starts one; elsewhere start it here when
# Debian's postgresql package is installed (the tests skip, outside CI, when there is none).
if [ -z "${ATLAS_TEST_POSTGRES_URL:-}" ] && url=$(bash scripts/start_postgres.sh 2>/dev/null); then
  export ATLAS_TEST_POSTGRES_URL="$url"
fi
# Lint and types first (ruff on everything, mypy on the package), then every test.
.venv/bin/ruff check atlas tests benchmarks scripts || exit 1
.venv/bin/mypy atlas || exit 1
.venv/bin/python -m pytest tests -q --timeout 1200 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"
