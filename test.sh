#!/usr/bin/env bash
# Run the tests: lint, unit tests, the real engines (lifecycle, correctness, launch flags), every
# committed notebook re-executed under nbval, a papermill run with a non-default parameter, the
# workflows and the book build. Sets up whatever is missing first.
set -euo pipefail
source "$(dirname "$0")/scripts/bootstrap.sh"
start=$(date +%s)
python -m servelab setup --profile cpu
[ "$(python -c 'from servelab.profiles import detect; print(detect())')" = cpu ] || python -m servelab setup
echo "[test] setup took $(( $(date +%s) - start )) s"
ruff check .
# Notebooks re-executed by the tests save their measurements here, not over the committed results/.
SERVELAB_RESULTS="$(mktemp -d)"
export SERVELAB_RESULTS
exec python -m pytest tests notebooks/*.ipynb --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
  -p no:cacheprovider "$@"
