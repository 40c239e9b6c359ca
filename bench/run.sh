#!/usr/bin/env bash
# bench/run.sh: what does `cassist run` cost around an agent?
#
# Makes a one-task project in a temp folder whose custom agent is a no-op
# (`true`) and that has no acceptance command and no project test command,
# then times, as the median of RUNS runs (after 2 warm-up runs):
#   cassist-explore  `cassist run --no-cache --filter noop-explore`: a read-only task;
#                    the agent runs once
#   cassist-code     `cassist run --no-cache --filter noop-code`: a code task; an agent
#                    that changes nothing and writes no report is resumed
#                    once (SPEC 3.4), so the agent runs twice
#   agent            `true` run directly
# and prints each median and the overhead of cassist (its median minus the
# agent's, once per agent run).
#
# Usage: bench/run.sh
# Env:   CASSIST     cassist binary (default: target/release/cassist, built
#                    with `cargo build --release` first)
#        HYPERFINE   hyperfine binary, or "none" for a date +%s%N loop
#        RUNS        runs per figure (default: 20)
#        KEEP        1 keeps the temp project (its path is printed)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HYPERFINE=${HYPERFINE:-hyperfine}
RUNS=${RUNS:-20}

log() { printf '==> %s\n' "$*" >&2; }

if [[ -z ${CASSIST:-} ]]; then
    log "cargo build --release"
    (cd "$REPO" && nice cargo build --release --quiet)
    CASSIST=$REPO/target/release/cassist
fi
[[ -x $CASSIST ]] || { echo "run.sh: $CASSIST is not an executable" >&2; exit 2; }
AGENT=$(type -P true)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cassist-bench-run.XXXXXX")
if [[ ${KEEP:-0} == 1 ]]; then
    log "project kept in $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi
PROJ=$WORK/project
OUT=$WORK/results
mkdir -p "$PROJ/tasks" "$PROJ/src" "$OUT"
cat > "$PROJ/cassist.kdl" <<EOF
trust "workspace-write"
test #false
agent "noop" {
    command "$AGENT"
}
EOF
cat > "$PROJ/tasks/noop.kdl" <<'EOF'
task "noop-explore" {
    goal "Nothing."
    kind "explore"
    agent "noop"
}

task "noop-code" {
    goal "Nothing."
    agent "noop"
}
EOF
echo 'print("hello")' > "$PROJ/src/app.py"

# The runs must pass, or we would time an error path.
for task in noop-explore noop-code; do
    if ! "$CASSIST" -q -C "$PROJ" run --filter "$task" > "$OUT/check.txt" 2>&1; then
        cat "$OUT/check.txt" >&2
        echo "run.sh: \`cassist run --filter $task\` failed" >&2
        exit 1
    fi
done

# median_ns NAME CMD...: prints the median wall time of CMD in nanoseconds.
median_ns() {
    local name=$1
    shift
    if [[ $HYPERFINE != none ]] && command -v "$HYPERFINE" > /dev/null; then
        "$HYPERFINE" -N --style none --warmup 2 --runs "$RUNS" --export-json "$OUT/$name.json" -- "$(printf '%q ' "$@")" > /dev/null
        python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["results"][0]["median"] * 1e9))' "$OUT/$name.json"
    else
        local i t0 t1
        for i in 1 2; do "$@" > /dev/null 2>&1; done
        for ((i = 0; i < RUNS; i++)); do
            t0=$(date +%s%N)
            "$@" > /dev/null 2>&1
            t1=$(date +%s%N)
            echo $((t1 - t0))
        done | sort -n > "$OUT/$name.ns"
        # The median: the middle value, or the mean of the two middle ones.
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }' "$OUT/$name.ns"
    fi
}

if [[ $HYPERFINE == none ]] || ! command -v "$HYPERFINE" > /dev/null; then
    log "timing with a date +%s%N loop (hyperfine not used)"
fi
log "timing $RUNS runs each"
# --no-cache: every timed run starts its agent(s); without it the first
# run records the task and the others would time the up-to-date path.
explore=$(median_ns cassist-explore "$CASSIST" -q -C "$PROJ" run --no-cache --filter noop-explore)
code=$(median_ns cassist-code "$CASSIST" -q -C "$PROJ" run --no-cache --filter noop-code)
agent=$(median_ns agent "$AGENT")

ms() { awk -v ns="$1" 'BEGIN { printf "%.2f ms", ns / 1e6 }'; }
printf '%-44s %s\n' "agent run directly ($AGENT)" "$(ms "$agent")"
printf '%-44s %s\n' "cassist run, explore task (1 agent run)" "$(ms "$explore")"
printf '%-44s %s\n' "cassist run, code task (2 agent runs)" "$(ms "$code")"
printf '%-44s %s\n' "overhead, explore task" "$(ms $((explore - agent)))"
printf '%-44s %s\n' "overhead, code task" "$(ms $((code - 2 * agent)))"
