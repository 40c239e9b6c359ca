#!/usr/bin/env bash
# bench/serial-ab.sh: does ordering overlapping tasks slow down a run of
# tasks that do not overlap? Two cassist binaries side by side on a first
# run of TASKS tasks with disjoint scopes (the monorepo of bench/lib.sh:
# one package a task, each task scoped to its own packages/<p>/out.txt,
# written by a trivial custom agent), at `-j JOBS`.
#
# Each round runs `cassist -q run -j JOBS` once with each binary, in
# alternating order, each on a fresh copy of the project made outside the
# timing (nothing recorded, every task runs its agent); a run counts only
# if it exits 0 and integrated every task's output. It prints, for each
# binary, the median, quartiles and best of the wall time and of the CPU
# time (user + system, cassist and every process it waited for: the
# figure that moves least on a machine shared with other work), and the
# median of the per-round ratios new / base of each.
#
# Usage: bench/serial-ab.sh BASE NEW
#   BASE, NEW      two cassist binaries (a `cassist-sandbox` of the same
#                  build beside one is used by it, as when installed)
# Env:   BENCH_DIR   where the project is generated and copied
#                    (default: target/bench/serial)
#        TASKS       tasks, one package each (default 1000)
#        FILES       source files a package (default 1)
#        JOBS        -j (default 2)
#        ROUNDS      pairs of runs (default 5)
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup serial-ab.sh

[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 2)) || { usage >&2; exit 2; }
BASE=$(abs "$1") NEW=$(abs "$2")
for b in "$BASE" "$NEW"; do [[ -x $b ]] || die "$b is not an executable"; done
BENCH=$(abs "${BENCH_DIR:-$REPO/target/bench/serial}")
TASKS=${TASKS:-1000}
FILES=${FILES:-1}
JOBS=${JOBS:-2}
ROUNDS=${ROUNDS:-5}
TEMPLATE=$BENCH/template-$TASKS-$FILES
WORK=$BENCH/work

if [[ ! -d $TEMPLATE/.git ]]; then
    log "generating $TASKS packages of $FILES file(s) in $TEMPLATE"
    monorepo "$TEMPLATE" cassist "$TASKS" "$FILES"
fi

# timed BINARY: the wall and CPU times in ns of a first run on a fresh
# copy; fails the benchmark when the run fails or leaves an output out.
timed() {
    local bin=$1 t0 t1 n cpu
    rm -rf "$WORK"
    cp -a "$TEMPLATE" "$WORK"
    sync
    t0=$(now_ns)
    cpu=$(
        TIMEFORMAT='%3U %3S'
        { time "$bin" -q -C "$WORK" run -j "$JOBS" > "$BENCH/last.log" 2>&1; } 2>&1
    ) || {
        cat "$BENCH/last.log" >&2
        die "$bin failed"
    }
    t1=$(now_ns)
    n=$(find "$WORK/packages" -name out.txt | wc -l)
    ((n == TASKS)) || die "$bin integrated $n of $TASKS outputs"
    echo "$((t1 - t0)) $(awk -v u="${cpu% *}" -v s="${cpu#* }" 'BEGIN { printf "%.0f", (u + s) * 1e9 }')"
}

# Warm-up: each binary probes its sandbox once (on a small run).
for b in "$BASE" "$NEW"; do
    rm -rf "$WORK"
    cp -a "$TEMPLATE" "$WORK"
    "$b" -q -C "$WORK" run -j "$JOBS" "$WORK/tasks/p0000.kdl" > /dev/null 2>&1 || die "$b failed on $WORK"
done
log "$ROUNDS rounds of $TASKS tasks at -j $JOBS; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$BENCH/ab-base.ns"
: > "$BENCH/ab-new.ns"
: > "$BENCH/ab-ratio"
for ((i = 0; i < ROUNDS; i++)); do
    if ((i % 2)); then
        n=$(timed "$NEW")
        o=$(timed "$BASE")
    else
        o=$(timed "$BASE")
        n=$(timed "$NEW")
    fi
    echo "$o" >> "$BENCH/ab-base.ns"
    echo "$n" >> "$BENCH/ab-new.ns"
    echo "$o $n" | awk '{ printf "%.4f %.4f\n", $3 / $1, $4 / $2 }' >> "$BENCH/ab-ratio"
    log "round $((i + 1)): base $(secs "${o% *}") (CPU $(secs "${o#* }")), new $(secs "${n% *}") (CPU $(secs "${n#* }"))"
done
rm -rf "$WORK"
printf 'load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
# stats FILE COLUMN NAME: median, quartiles and best of a column, in s.
stats() {
    sort -n -k "$2" "$1" | awk -v c="$2" -v name="$3" '
        { v[NR] = $c }
        END {
            printf "%-10s %7.2f s %7.2f s %7.2f s %7.2f s\n", name,
                v[int((NR + 1) / 2)] / 1e9, v[int((NR + 3) / 4)] / 1e9, v[int((3 * NR + 3) / 4)] / 1e9, v[1] / 1e9
        }'
}
printf '%-10s %9s %9s %9s %9s\n' "" median p25 p75 best
stats "$BENCH/ab-base.ns" 1 "base wall"
stats "$BENCH/ab-new.ns" 1 "new wall"
stats "$BENCH/ab-base.ns" 2 "base CPU"
stats "$BENCH/ab-new.ns" 2 "new CPU"
for c in 1 2; do
    sort -n -k "$c" "$BENCH/ab-ratio" | awk -v c="$c" '
        { v[NR] = $c }
        END { printf "new / base %s, median of the rounds: %.3f\n", c == 1 ? "wall" : "CPU ", v[int((NR + 1) / 2)] }'
done
