#!/usr/bin/env bash
# bench/overhead-ab.sh: figure (a) of bench/scale.sh for two cassist
# binaries side by side. On a shared or virtual machine the time of a
# 20 ms run moves by half from one minute to the next; running the two
# binaries alternately, pair after pair, puts both under the same
# conditions, so their difference holds where each figure alone does not.
#
# Each round runs `cassist -q run --no-cache` of bench/scale.sh's trivial
# task once with each binary (in alternating order) on its 10,000-file
# repository, and the agent alone once; it prints, for each binary, the
# median, quartiles and best of run - agent, and how many runs were within
# the 20 ms target.
#
# Usage: bench/overhead-ab.sh BASE NEW
#   BASE, NEW      two cassist binaries (a `cassist-sandbox` of the same
#                  build beside one is used by it, as when installed)
# Env:   BASE_ENV, NEW_ENV  variables (NAME=VALUE ...) each binary runs
#                    with: one binary twice, with and without a setting
#                    (`BASE_ENV=CASSIST_NETWORK=host`: the network
#                    namespace's and egress proxy's cost)
#        BENCH_DIR   where bench/scale.sh generated its repositories
#                    (default: target/bench/scale; run
#                    `bench/scale.sh --only overhead` first)
#        SIZE        the repository (default 10000)
#        ROUNDS      pairs of runs (default 40)
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup overhead-ab.sh

[[ ${1:-} == -h || ${1:-} == --help ]] && { usage; exit 0; }
(($# == 2)) || { usage >&2; exit 2; }
BASE=$(abs "$1") NEW=$(abs "$2")
for b in "$BASE" "$NEW"; do [[ -x $b ]] || die "$b is not an executable"; done
BENCH=$(abs "${BENCH_DIR:-$REPO/target/bench/scale}")
DIR=$BENCH/repo-${SIZE:-10000}
ROUNDS=${ROUNDS:-40}
[[ -d $DIR/.git ]] || die "no repository at $DIR: run \`bench/scale.sh --only overhead\` first"
AGENT=$(sed -n 's/^    command "sh" "-c" #"\(.*\)"#$/\1/p' "$DIR/cassist.kdl")
[[ -n $AGENT ]] || die "cannot read the agent of $DIR/cassist.kdl"
SCRATCH=$BENCH/agent-alone
mkdir -p "$SCRATCH"

timed() { # CMD...: wall time in ns
    local t0 t1
    t0=$(now_ns)
    "$@" > /dev/null 2>&1
    t1=$(now_ns)
    echo $((t1 - t0))
}
agent() { (cd "$SCRATCH" && CASSIST_TASK=one CASSIST_RESULT_FILE=$SCRATCH/result.json sh -c "$AGENT"); }

# Warm-up: each binary probes its sandbox and wrapper once.
# shellcheck disable=SC2086 # word splitting of the NAME=VALUE lists is wanted
base() { env ${BASE_ENV:-} "$BASE" "$@"; }
# shellcheck disable=SC2086
new() { env ${NEW_ENV:-} "$NEW" "$@"; }
for b in base new base new; do "$b" -q -C "$DIR" run --no-cache > /dev/null 2>&1 || die "$b failed on $DIR"; done
log "$ROUNDS rounds on $(basename "$DIR")"
: > "$BENCH/ab-base.ns"
: > "$BENCH/ab-new.ns"
for ((i = 0; i < ROUNDS; i++)); do
    a=$(timed agent)
    if ((i % 2)); then
        n=$(timed new -q -C "$DIR" run --no-cache)
        o=$(timed base -q -C "$DIR" run --no-cache)
    else
        o=$(timed base -q -C "$DIR" run --no-cache)
        n=$(timed new -q -C "$DIR" run --no-cache)
    fi
    echo $((o - a)) >> "$BENCH/ab-base.ns"
    echo $((n - a)) >> "$BENCH/ab-new.ns"
done
printf 'load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %9s %9s %9s %9s  %s\n' binary median p25 p75 best "runs <= 20 ms"
for which in base new; do
    sort -n "$BENCH/ab-$which.ns" | awk -v name="$which" '
        { v[NR] = $1; if ($1 <= 20000000) ok++ }
        END {
            printf "%-6s %6.1f ms %6.1f ms %6.1f ms %6.1f ms  %d of %d\n", name,
                v[int((NR + 1) / 2)] / 1e6, v[int((NR + 3) / 4)] / 1e6, v[int((3 * NR + 3) / 4)] / 1e6, v[1] / 1e6, ok, NR
        }'
done
