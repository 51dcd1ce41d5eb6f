# Sourced by lab.sh and test.sh: make sure the notebook kernel's venv (.venv) exists and matches
# requirements.txt; rebuild it when it is missing, half-built or stale.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "servelab: error: need Python >= 3.10 as '$PYTHON' (set PYTHON=/path/to/python3)" >&2
  exit 2
fi
# What the venv is built from: the pins and the package's own dependency list (not the rest of
# pyproject.toml, so a lint or pytest setting does not rebuild the venv).
want=$( (cat requirements.txt; grep -E '^(dependencies|requires-python|name) *=' pyproject.toml) | sha256sum | cut -c1-16)
if [ "$(cat .venv/.servelab-ready 2>/dev/null)" != "$want" ]; then
  echo "[bootstrap] building the kernel venv .venv from requirements.txt"
  rm -rf .venv
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$want" > .venv/.servelab-ready
fi
export PATH="$PWD/.venv/bin:$PATH"
