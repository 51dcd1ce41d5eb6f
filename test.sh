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
# The test sessions and the stale chapters run in lanes, one per core, each pinned (servelab/book/lanes.py).
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
stale=$(mktemp)
python -m servelab keys --profile cpu "${all[@]}" --write "$stale"
# Re-executed chapters save their measurements here, not over the committed results/; it starts as a copy of
# them, so a re-executed chapter that reads another chapter's results finds them.
SERVELAB_RESULTS="$(mktemp -d)"
cp -r results/. "$SERVELAB_RESULTS/"
export SERVELAB_RESULTS
# The test sessions and the stale chapters (each under nbval) run in lanes, one per core, each lane taking the longest
# job left whenever it is free (servelab/book/lanes.py): a session or a chapter keeps about one core busy, so two run
# side by side. The sessions, split by marker: the tests that start engine servers, the GPU profiles' plans (many
# engine-parser runs), the book build and the browser, the tests inside engine venvs, the fast tests, and the committed
# notebooks' checks (told which chapters this run re-executes). Seconds and GiB: how long each took and the most memory
# it held on a 2-core machine (the most of two runs; the server tests' of one, since they hold one server at a time),
# the GiB with 10 % or more to spare; the lanes print both, measured, at the end. They set the order and what fits.
# A chapter that reads what another stale chapter saves starts once that one has ended. Each job notes its engine
# starts (tests/conftest.py); the lanes count the whole run's. Scripts run inside engine venvs go through fork servers
# that import the engine once (servelab/machine/warm_scripts.py).
logs="$(mktemp -d)"
common="--ignore tests/test_notebooks.py -p no:cacheprovider --durations=15"
plans="tests/test_launch_plan.py tests/test_gpu_profiles.py"
ignore_plans="--ignore tests/test_launch_plan.py --ignore tests/test_gpu_profiles.py"
mapfile -t reexecuted < "$stale"
names=("${reexecuted[@]##*/}")
sessions="$logs/sessions.tsv"
{
  printf 'engine servers\t400\t5\tpython -m pytest tests -m server %s\n' "$common"
  printf 'gpu plans\t200\t2.5\tpython -m pytest %s -m "not server" %s\n' "$plans" "$common"
  printf 'book and browser\t150\t1\tpython -m pytest tests -m "not server and (book or browser)" %s %s\n' \
    "$ignore_plans" "$common"
  printf 'engine venvs\t300\t3.5\tpython -m pytest tests -m "%s" %s %s\n' \
    "not server and not (book or browser) and engine_venv" "$ignore_plans" "$common"
  printf 'fast tests\t170\t1\tpython -m pytest tests -m "not (server or book or browser or engine_venv)" %s %s\n' \
    "$ignore_plans" "$common"
  printf 'committed notebooks\t10\t1\tpython -m pytest tests/test_notebooks.py -p no:cacheprovider --durations=15 %s\n' \
    "--reexecuted-in-lanes=$(IFS=,; echo "${names[*]%.ipynb}")"
} > "$sessions"
start=$(date +%s)
set +e
python -m servelab.book.lanes --stale "$stale" --sessions "$sessions" --logs "$logs" -- "$@"
status=$?
rm -f "$stale"
echo "[test] the lanes took $(( $(date +%s) - start )) s; exit status $status (every test session and chapter in them)"
if [ "$status" = 0 ]; then  # the lanes fail where every job collected nothing: never pass by testing nothing
  rm -rf "$SERVELAB_RESULTS" "$logs"
  exit 0
fi
# A failed run keeps what the re-executed chapters measured: a check that printed False can be read from it.
echo "[test] kept for reading: the re-executed chapters' results in $SERVELAB_RESULTS, the session logs in $logs"
exit 1
