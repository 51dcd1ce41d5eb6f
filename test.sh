#!/usr/bin/env bash
# Run the tests: lint, unit tests, the real engines (lifecycle, correctness, launch flags), the chapters
# whose inputs changed re-executed under nbval, the committed notebooks checked, the workflows and the
# book build. Sets up whatever is missing first.
#
# A chapter is re-executed when its execution key (a hash of its source, the servelab modules it imports,
# its data files and locks, and the results of other chapters it read) differs from the key its committed
# notebook was executed with, or when it reads results of a chapter that is re-executed; the others are
# checked as committed (key, check cells, no newer input). The run prints which, and why.
#
# ./test.sh --all: re-execute every chapter.
# ./test.sh --fast: lint and the fast tests only (no engine venv, no server, no book build, no browser; about two
# minutes). Sets up no engine; SERVELAB_FAST=1 points SERVELAB_HOME at an empty folder for the run,
# so a test that needs an engine venv or the model but is not marked for it fails (tests/conftest.py).
set -euo pipefail
source "$(dirname "$0")/scripts/bootstrap.sh"
if [ "${1:-}" = --fast ]; then
  shift
  ruff check .
  SERVELAB_FAST=1 exec python -m pytest -m "not (engine_venv or server or book or executed or browser)" tests \
    -p no:cacheprovider "$@"
fi
all=()
if [ "${1:-}" = --all ]; then
  shift
  all=(--all)
fi
start=$(date +%s)
python -m servelab setup --profile cpu
[ "$(python -c 'from servelab.machine.profiles import detect; print(detect())')" = cpu ] || python -m servelab setup
echo "[test] setup took $(( $(date +%s) - start )) s"
# The browser tests (marker `browser`) drive headless Chromium. Without one on PATH, root installs Debian's package
# (about 10 s); anywhere else those tests fail, naming what to install.
if [ -z "${SERVELAB_CHROMIUM:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null \
    && ! command -v google-chrome >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  start=$(date +%s)
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
    >/dev/null; } || echo "[test] could not install chromium: the browser tests will fail" >&2
  echo "[test] chromium set-up took $(( $(date +%s) - start )) s"
fi
ruff check .
# The chapters to re-execute, in lanes that run side by side, one per core (servelab/book/lanes.py), and those that
# read what the lanes save, which run after them.
stale=$(mktemp)
python -m servelab keys --profile cpu "${all[@]}" --lanes "$stale"
declare -A lane_notebooks=() lane_cpus=() lane_bind=()
after=()
while read -r lane cpus bind path; do
  if [ "$lane" = after ]; then
    after+=("$path")
  else
    lane_notebooks[$lane]+="$path "
    lane_cpus[$lane]=$cpus
    lane_bind[$lane]=$bind
  fi
done < "$stale"
rm -f "$stale"
# Re-executed chapters save their measurements here, not over the committed results/; it starts as a copy of
# them, so a re-executed chapter that reads another chapter's results finds them.
SERVELAB_RESULTS="$(mktemp -d)"
cp -r results/. "$SERVELAB_RESULTS/"
export SERVELAB_RESULTS
# Three pytest sessions. The tests that start engine servers (marker `server`), with the GPU profiles' plans (many
# engine-parser runs), and all the other tests run side by side, each mostly on one core (engine imports, parsers,
# the book build); then the stale chapters run under nbval alone, on a quiet machine, since they time the engines,
# with tests/test_notebooks.py, which must see them in its session (or be told which lanes re-executed). The two
# sides are about equally long.
# Each session notes its engine starts (tests/conftest.py); the last session's count is the whole run's. Scripts
# run inside engine venvs go through fork servers that import the engine once (servelab/machine/warm_scripts.py).
logs="$(mktemp -d)"
plans=(tests/test_launch_plan.py tests/test_gpu_profiles.py)
common=(--ignore tests/test_notebooks.py -p no:cacheprovider --durations=15)
start=$(date +%s)
set +e
(
  export SERVELAB_START_LOG="$logs/servers.jsonl"
  python -m pytest tests -m server "${common[@]}" "$@"
  first=$?
  python -m pytest "${plans[@]}" -m "not server" "${common[@]}" "$@"
  second=$?
  [ "$first" = 0 ] || exit "$first"
  exit "$second"
) > "$logs/servers.log" 2>&1 &
servers=$!
SERVELAB_START_LOG="$logs/rest.jsonl" python -m pytest tests -m "not server" "${plans[@]/#/--ignore=}" "${common[@]}" "$@"
rest=$?
wait "$servers"
server_rc=$?
echo "[test] the tests that start engine servers, then the GPU profiles' plans, run beside the others:"
cat "$logs/servers.log"
echo "[test] the side-by-side sessions took $(( $(date +%s) - start )) s"
cat "$logs/servers.jsonl" "$logs/rest.jsonl" > "$logs/starts.jsonl" 2>/dev/null
export SERVELAB_START_LOG="$logs/starts.jsonl"
nbval=(--nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider --durations=15)
notebooks=()
lanes_rc=0
if [ "${#lane_notebooks[@]}" = 1 ]; then  # one lane, not pinned: it runs in the last session, on a quiet machine
  read -r -a notebooks <<< "${lane_notebooks[0]}"
elif [ "${#lane_notebooks[@]}" -gt 1 ]; then
  # Each lane on its own core, and vLLM's compute bound to it (its auto-binding picks the same core in every lane).
  start=$(date +%s)
  pids=()
  reexecuted=()
  for lane in "${!lane_notebooks[@]}"; do
    read -r -a these <<< "${lane_notebooks[$lane]}"
    reexecuted+=("${these[@]}")
    pin=()
    command -v taskset >/dev/null && pin=(taskset -c "${lane_cpus[$lane]}")
    VLLM_CPU_OMP_THREADS_BIND="${lane_bind[$lane]}" "${pin[@]}" python -m pytest "${these[@]}" "${nbval[@]}" "$@" \
      > "$logs/lane$lane.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || lanes_rc=1
  done
  for lane in "${!lane_notebooks[@]}"; do
    echo "[test] lane $lane (cores ${lane_cpus[$lane]}): ${lane_notebooks[$lane]}"
    cat "$logs/lane$lane.log"
  done
  echo "[test] the lanes took $(( $(date +%s) - start )) s"
  names=("${reexecuted[@]##*/}")
  set -- "$@" --reexecuted-in-lanes "$(IFS=,; echo "${names[*]%.ipynb}")"
fi
python -m pytest tests/test_notebooks.py "${notebooks[@]}" "${after[@]}" "${nbval[@]}" "$@"
chapters=$?
[ "$lanes_rc" = 0 ] || chapters=1
echo "[test] exit status: servers $server_rc, other tests $rest, chapters and notebooks $chapters (5: none collected;" \
  "lanes $lanes_rc)"
failed=0
[ "$server_rc$rest$chapters" != 555 ] || failed=1  # never pass by testing nothing
for rc in "$server_rc" "$rest" "$chapters"; do
  [ "$rc" = 0 ] || [ "$rc" = 5 ] || failed=1
done
if [ "$failed" = 0 ]; then
  rm -rf "$SERVELAB_RESULTS" "$logs"
  exit 0
fi
# A failed run keeps what the re-executed chapters measured: a check that printed False can be read from it.
echo "[test] kept for reading: the re-executed chapters' results in $SERVELAB_RESULTS, the session logs in $logs"
exit 1
