# Sourced by lab.sh and test.sh: make sure the notebook kernel's venv (.venv) exists and matches its
# lock (servelab/data/locks/kernel.txt, resolved from requirements.txt by `python -m servelab lock`);
# rebuild it when it is missing, half-built or stale.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
# vLLM 0.32 needs >=3.11,<3.15; SGLang 0.5.23 ships wheels for CPython 3.11-3.13 only.
if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
  echo "servelab: error: need Python 3.11, 3.12 or 3.13 as '$PYTHON' (set PYTHON=/path/to/python3)" >&2
  exit 2
fi
# The lock must belong to requirements.txt (one line saying how to regenerate it otherwise).
"$PYTHON" -m servelab.machine.locks check kernel
# What the venv is built from: the lock and the package's own dependency list (not the rest of
# pyproject.toml, so a lint or pytest setting does not rebuild the venv).
want=$( (cat servelab/data/locks/kernel.txt; grep -E '^(dependencies|requires-python|name) *=' pyproject.toml) | sha256sum | cut -c1-16)
if [ "$(cat .venv/.servelab-ready 2>/dev/null)" != "$want" ]; then
  echo "[bootstrap] building the kernel venv .venv from servelab/data/locks/kernel.txt"
  rm -rf .venv
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r servelab/data/locks/kernel.txt
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
  echo "$want" > .venv/.servelab-ready
fi
export PATH="$PWD/.venv/bin:$PATH"
