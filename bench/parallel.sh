#!/usr/bin/env bash
# bench/parallel.sh: how close does the scheduler get to the ideal?
#
# Makes a project of TASKS independent code tasks (default 100) whose
# custom agent sleeps SLEEP seconds (default 1) and writes its task's output
# file, then times `cassist run -j JOBS` (default 8) from a clean state:
#   wall       the whole run (planning, workspaces, agents, review,
#              integration one at a time, recording, summary)
#   ideal      ceil(TASKS / JOBS) * SLEEP: the agents alone, perfectly packed
#   overhead   (wall - ideal) / ceil(TASKS / JOBS): what each wave of JOBS
#              tasks costs beyond its agents
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

# make_project DIR: TASKS tasks, an agent sleeping $AGENT_SLEEP.
make_project() {
    local dir=$1
    mkdir -p "$dir/tasks" "$dir/out"
    cat > "$dir/cassist.kdl" <<EOF
trust "workspace-write"
test #false
defaults {
    agent "sleeper"
}
agent "sleeper" {
    command "sh" "-c" "sleep \$AGENT_SLEEP; echo done > out/\$CASSIST_TASK.txt"
    pass-env "AGENT_SLEEP"
}
