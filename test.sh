#!/usr/bin/env bash
# Run the tests: lint, unit tests, the real engines (lifecycle, correctness, launch flags), every
# committed notebook re-executed under nbval, a papermill run with a non-default parameter, the
# workflows and the book build. Sets up whatever is missing first.
#
# ./test.sh --fast: lint and the fast tests only (no engine venv, no server, no book build; under a
# minute). Sets up no engine; SERVELAB_FAST=1 points SERVELAB_HOME at an empty folder for the run,
# so a test that needs an engine venv or the model but is not marked for it fails (tests/conftest.py).
set -euo pipefail
source "$(dirname "$0")/scripts/bootstrap.sh"
if [ "${1:-}" = --fast ]; then
  shift
  ruff check .
  SERVELAB_FAST=1 exec python -m pytest -m "not (engine_venv or server or book)" tests -p no:cacheprovider "$@"
fi
start=$(date +%s)
python -m servelab setup --profile cpu
[ "$(python -c 'from servelab.machine.profiles import detect; print(detect())')" = cpu ] || python -m servelab setup
echo "[test] setup took $(( $(date +%s) - start )) s"
ruff check .
# Notebooks re-executed by the tests save their measurements here, not over the committed results/.
SERVELAB_RESULTS="$(mktemp -d)"
export SERVELAB_RESULTS
exec python -m pytest tests notebooks/*.ipynb --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
  -p no:cacheprovider --durations=30 "$@"
