#!/usr/bin/env bash
# bench/cache.sh: what does `cassist run` cost when every task is up-to-date,
# next to `turbo run` on an equivalent fully cached workspace?
#
# Generates (once) the monorepo of bench/lib.sh twice, TASKS packages of
# FILES small source files each:
#   cassist  one task per package (its sources as context) whose trivial
#            custom agent (`sh -c`) writes packages/<task>/out.txt; `cassist
#            run -q` once records every task (this first run starts TASKS
#            agents and takes a while).
#   turbo    an npm workspace of the same packages, each with a `build`
#            script that writes dist/out.txt (turbo.json `outputs`); `turbo
#            run build` once fills the cache.
# then times, as the median of RUNS runs (after 2 warm-up runs):
#   cassist  `cassist run -q` on the fully up-to-date project
#   turbo    `turbo run build --output-logs=none` on the fully cached
#            workspace
# and prints both medians and the ratio. Target: cassist under 200 ms.
# bench/scale.sh's figure (c) is the same comparison with 20 files a package.
#
# turbo (npm package `turbo`, 2.x) is installed into target/bench/turbo with
# npm when it is not there yet. It never phones home here: telemetry and the
# update notifier are off (TURBO_TELEMETRY_DISABLED=1, DO_NOT_TRACK=1,
# TURBO_NO_UPDATE_NOTIFIER=1), the workspace is linked to no remote cache,
# and TURBO_API/TURBO_TOKEN/TURBO_TEAM are unset.
#
# Usage: bench/cache.sh [--regenerate] [--strict] [--no-turbo]
# Env:   BENCH_DIR   where the projects go (default: target/bench/cache)
#        CASSIST     cassist binary (default: target/release/cassist, built
#                    with `cargo build --release` first)
#        TURBO       turbo binary (default: target/bench/turbo/node_modules/.bin/turbo,
#                    installed with npm if missing)
#        HYPERFINE   hyperfine binary, or "none" for a date +%s%N loop
#        RUNS        runs per figure (default: 10)
#        TASKS       tasks / packages (default: 1000)
#        FILES       source files per package (default: 1)
# With --strict, exits 1 when cassist misses the 200 ms target.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup cache.sh

REGENERATE=0 STRICT=0 WITH_TURBO=1
for arg in "$@"; do
    case $arg in
        --regenerate) REGENERATE=1 ;;
        --strict) STRICT=1 ;;
        --no-turbo) WITH_TURBO=0 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "cache.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done

BENCH=$(abs "${BENCH_DIR:-$REPO/target/bench/cache}")
RUNS=${RUNS:-10}
TASKS=${TASKS:-1000}
FILES=${FILES:-1}
TARGET_MS=200
PROJ=$BENCH/cassist-project
WS=$BENCH/turbo-workspace
OUT=$BENCH/results
STAMP="cassist-cache-bench v2 tasks=$TASKS files=$FILES"
mkdir -p "$BENCH" "$OUT"

cassist_binary
[[ $WITH_TURBO == 0 ]] || turbo_binary

# fresh DIR STAMP: whether DIR was generated and recorded with STAMP.
fresh() { [[ $REGENERATE == 0 && -f $1/.bench-stamp && $(< "$1/.bench-stamp") == "$2" ]]; }

# first_run NAME DIR CMD...: runs CMD in DIR once, timed, its output logged.
first_run() {
    local name=$1 dir=$2 t0 t1
    shift 2
    log "first $name run: records all $TASKS tasks (takes a while)"
    t0=$(now_ns)
    (cd "$dir" && "$@") > "$OUT/$name-first-run.txt" 2>&1 \
        || { tail -n 30 "$OUT/$name-first-run.txt" >&2; die "the first $name run failed (log: $OUT/$name-first-run.txt)"; }
    t1=$(now_ns)
    log "first run took $(ms $((t1 - t0)))"
}

if ! fresh "$PROJ" "$STAMP"; then
    log "generating $TASKS cassist tasks in $PROJ"
    monorepo "$PROJ" cassist "$TASKS" "$FILES"
    first_run cassist "$PROJ" "$CASSIST" -q run
    printf '%s\n' "$STAMP" > "$PROJ/.bench-stamp"
fi
if [[ $WITH_TURBO == 1 ]]; then
    version=$("$TURBO" --version 2> /dev/null | tail -n 1)
    if ! fresh "$WS" "$STAMP turbo=$version"; then
        log "generating a $TASKS-package npm workspace in $WS (turbo $version)"
        monorepo "$WS" turbo "$TASKS" "$FILES"
        first_run turbo "$WS" "$TURBO" run build --output-logs=none
        printf '%s\n' "$STAMP turbo=$version" > "$WS/.bench-stamp"
    fi
fi

# Check that both are fully cached (or we would time something else).
"$CASSIST" -C "$PROJ" run --report-json "$OUT/cassist-check.json" > "$OUT/cassist-check.txt" 2>&1 \
    || die "\`cassist run\` on the recorded project failed (log: $OUT/cassist-check.txt)"
python3 - "$OUT/cassist-check.json" "$TASKS" << 'PY' || die "the cassist project is not fully up-to-date (see $OUT/cassist-check.json)"
import collections, json, sys
doc = json.load(open(sys.argv[1]))
states = collections.Counter(t["state"] for t in doc["tasks"])
if states != {"up-to-date": int(sys.argv[2])}:
    sys.exit(f"states: {dict(states)}")
PY
if [[ $WITH_TURBO == 1 ]]; then
    (cd "$WS" && "$TURBO" run build --output-logs=none --summarize=false > "$OUT/turbo-check.txt" 2>&1) \
        || die "\`turbo run build\` on the cached workspace failed (log: $OUT/turbo-check.txt)"
    grep -Eq "Cached: +$TASKS cached, $TASKS total" "$OUT/turbo-check.txt" \
        || die "the turbo workspace is not fully cached: $(grep -E 'Cached:' "$OUT/turbo-check.txt" || true)"
fi

if [[ $HYPERFINE == none ]] || ! have "$HYPERFINE"; then
    log "timing with a date +%s%N loop (hyperfine not used)"
fi
log "timing $RUNS runs each"
cassist_ns=$(median_ns cassist "$RUNS" 2 "" "$(printf '%q' "$CASSIST") -q -C $(printf '%q' "$PROJ") run")
if [[ $WITH_TURBO == 1 ]]; then
    turbo_ns=$(cd "$WS" && median_ns turbo "$RUNS" 2 "" "$(printf '%q' "$TURBO") run build --output-logs=none --summarize=false")
fi

{
    printf '%-58s %s\n' "cassist run, $TASKS tasks up-to-date (median of $RUNS)" "$(ms "$cassist_ns")"
    if [[ $WITH_TURBO == 1 ]]; then
        printf '%-58s %s\n' "turbo run build, $TASKS packages cached (median of $RUNS)" "$(ms "$turbo_ns")"
        printf '%-58s %s\n' "ratio cassist / turbo" "$(awk -v a="$cassist_ns" -v b="$turbo_ns" 'BEGIN { printf "%.2f", a / b }')"
    fi
    if ((cassist_ns < TARGET_MS * 1000000)); then
        printf 'target: cassist under %d ms: met\n' "$TARGET_MS"
    else
        printf 'target: cassist under %d ms: MISSED (CASSIST_TIMINGS=1 %s -C %s run -q shows the planning phases)\n' \
            "$TARGET_MS" "$CASSIST" "$PROJ"
    fi
} | tee "$OUT/summary.txt"

if [[ $STRICT == 1 ]] && ((cassist_ns >= TARGET_MS * 1000000)); then
    exit 1
fi
