#!/usr/bin/env bash
# Run the lab: set up (kernel venv, engine venvs, model), execute every notebook on the detected
# profile, build the book into _build/html. Pass --profile NAME to choose one (cpu, gpu-24g, gpu-80g).
set -euo pipefail
source "$(dirname "$0")/scripts/bootstrap.sh"
exec python -m servelab lab "$@"
