#!/usr/bin/env bash
# Check this machine before a workshop, in under a minute: builds only the notebook kernel's venv (.venv)
# if it is missing, then runs `python -m servelab doctor` (options: --lang ja|ko|de|es, --json, --engines,
# --profile NAME). Exit status 1 when a check found a problem.
set -euo pipefail
source "$(dirname "$0")/scripts/bootstrap.sh"
exec python -m servelab doctor "$@"
