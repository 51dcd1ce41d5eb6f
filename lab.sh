#!/usr/bin/env bash
# Run the lab: set up (kernel venv, engine venvs, model), execute every notebook on the detected
# profile, build the book and write the translated notebooks, all into the git-ignored work/ (the
# committed notebooks and results/ stay as they are). Pass --profile NAME to choose one (cpu, gpu-24g,
# gpu-80g), --lang xx for one language of the book, --in-place to regenerate the committed notebooks,
# results/ and _build/html instead (maintainers).
set -euo pipefail
source "$(dirname "$0")/scripts/bootstrap.sh"
exec python -m servelab lab "$@"
