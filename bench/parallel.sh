#!/usr/bin/env bash
# bench/parallel.sh: how close does the scheduler get to the ideal?
#
# Makes a project of TASKS independent code tasks (default 100) whose
# custom agent sleeps SLEEP seconds (default 1) and writes its task's output
# file, then times `cassist run -j JOBS` (default 8) from a clean state:
#   wall       the whole run (planning, workspaces, agents, review,
#              integration one at a time, recording, summary)
#   ideal      ceil(TASKS / JOBS) * SLEEP: the agents alone, perfectly packed
#   overhead   (wall - ideal), per wave of JOBS tasks and per task
# and the same project with a no-op agent (SLEEP=0) at -j 1, whose wall time
# per task is cassist's own cost per task (workspace, agent start, review,
# integration, recording), and at -j JOBS.
#
# Usage: bench/parallel.sh
# Env:   CASSIST  cassist binary (default: target/release/cassist, built
#                 with `cargo build --release` first)
#        TASKS, SLEEP, JOBS as above; KEEP=1 keeps the temp project
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TASKS=${TASKS:-100}
SLEEP=${SLEEP:-1}
JOBS=${JOBS:-8}

log() { printf '==> %s\n' "$*" >&2; }

if [[ -z ${CASSIST:-} ]]; then
    log "cargo build --release"
    (cd "$REPO" && nice cargo build --release --quiet)
    CASSIST=$REPO/target/release/cassist
fi
[[ -x $CASSIST ]] || { echo "parallel.sh: $CASSIST is not an executable" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/cassist-bench-parallel.XXXXXX")
if [[ ${KEEP:-0} == 1 ]]; then
    log "project kept in $WORK"
else
    trap 'rm -rf "$WORK"' EXIT
fi

# make_project DIR: TASKS independent tasks; the agent sleeps $AGENT_SLEEP.
make_project() {
    local dir=$1 i
    mkdir -p "$dir/tasks" "$dir/out"
    printf '%s\n' \
        'trust "workspace-write"' \
        'test #false' \
        'defaults {' \
        '    agent "sleeper"' \
        '}' \
        'agent "sleeper" {' \
        '    command "sh" "-c" "sleep $AGENT_SLEEP; echo done > out/$CASSIST_TASK.txt"' \
        '    pass-env "AGENT_SLEEP"' \
        '}' > "$dir/cassist.kdl"
    for i in $(seq -w 1 "$TASKS"); do
        printf 'task "t%s" {\n    goal "Write out/t%s.txt."\n    scope {\n        path "out/t%s.txt"\n    }\n}\n' \
            "$i" "$i" "$i" >> "$dir/tasks/all.kdl"
    done
    touch "$dir/out/.keep"
    (cd "$dir" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm init)
}

# timed DIR SLEEP JOBS: seconds one `cassist run` takes on a fresh project.
timed() {
    local dir=$1 sleep=$2 jobs=$3 t0 t1 n
    rm -rf "$dir"
    make_project "$dir"
    t0=$(date +%s%N)
    (cd "$dir" && AGENT_SLEEP=$sleep "$CASSIST" -q run -j "$jobs" > "$WORK/last.log" 2>&1) || {
        cat "$WORK/last.log" >&2
        echo "parallel.sh: cassist run failed" >&2
        exit 1
    }
    t1=$(date +%s%N)
    n=$(find "$dir/out" -name '*.txt' | wc -l)
    [[ $n == "$TASKS" ]] || { echo "parallel.sh: only $n of $TASKS outputs integrated" >&2; exit 1; }
    echo $(( (t1 - t0) / 1000000 ))
}

waves=$(( (TASKS + JOBS - 1) / JOBS ))
ideal_ms=$(python3 -c "print(round($waves * $SLEEP * 1000))")

log "$TASKS tasks, agent sleeps ${SLEEP}s, -j $JOBS"
wall=$(timed "$WORK/p" "$SLEEP" "$JOBS")
log "$TASKS tasks, no-op agent, -j 1"
noop1=$(timed "$WORK/p" 0 1)
log "$TASKS tasks, no-op agent, -j $JOBS"
noopj=$(timed "$WORK/p" 0 "$JOBS")

python3 - "$TASKS" "$JOBS" "$SLEEP" "$waves" "$ideal_ms" "$wall" "$noop1" "$noopj" <<'PY'
import sys
tasks, jobs, sleep, waves, ideal, wall, noop1, noopj = sys.argv[1:]
tasks, jobs, waves, ideal, wall, noop1, noopj = map(int, (tasks, jobs, waves, ideal, wall, noop1, noopj))
print(f"{'wall, sleep ' + sleep + 's, -j ' + str(jobs):<36} {wall / 1000:8.2f} s")
print(f"{'ideal (' + str(waves) + ' waves x ' + sleep + 's)':<36} {ideal / 1000:8.2f} s")
print(f"{'overhead per wave of ' + str(jobs) + ' tasks':<36} {(wall - ideal) / waves:8.0f} ms")
print(f"{'overhead per task':<36} {(wall - ideal) / tasks:8.1f} ms")
print(f"{'no-op agent, -j 1':<36} {noop1 / 1000:8.2f} s  ({noop1 / tasks:.1f} ms a task)")
print(f"{'no-op agent, -j ' + str(jobs):<36} {noopj / 1000:8.2f} s  ({noopj / tasks:.1f} ms a task)")
PY
