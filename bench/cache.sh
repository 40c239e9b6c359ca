#!/usr/bin/env bash
# bench/cache.sh: what does `cassist run` cost when every task is up-to-date,
# next to `turbo run` on an equivalent fully cached workspace?
#
# Generates (once) two projects:
#   cassist  1,000 independent tasks, one task file each, each with a small
#            context file and a trivial custom agent (`sh -c`) that writes
#            one file; `cassist run -q` once records every task (this first
#            run starts 1,000 agents and takes a while).
#   turbo    an npm workspaces monorepo of 1,000 packages, each with a small
#            source file and a `build` script that writes one file
#            (turbo.json `outputs`); `turbo run build` once fills the cache.
# then times, as the median of RUNS runs (after 2 warm-up runs):
#   cassist  `cassist run -q` on the fully up-to-date project
#   turbo    `turbo run build --output-logs=none` on the fully cached
#            workspace
# and prints both medians and the ratio. Target: cassist under 200 ms.
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
# With --strict, exits 1 when cassist misses the 200 ms target.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

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

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
BENCH=$(abs "${BENCH_DIR:-$REPO/target/bench/cache}")
HYPERFINE=${HYPERFINE:-hyperfine}
RUNS=${RUNS:-10}
TASKS=${TASKS:-1000}
TARGET_MS=200
PROJ=$BENCH/cassist-project
WS=$BENCH/turbo-workspace
OUT=$BENCH/results
TURBO_PREFIX=$REPO/target/bench/turbo

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'cache.sh: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" > /dev/null 2>&1; }
now_ns() { date +%s%N; }
ms() { awk -v ns="$1" 'BEGIN { printf "%.1f ms", ns / 1e6 }'; }

# turbo must not phone home.
export TURBO_TELEMETRY_DISABLED=1 DO_NOT_TRACK=1 TURBO_NO_UPDATE_NOTIFIER=1
unset TURBO_API TURBO_TOKEN TURBO_TEAM TURBO_REMOTE_CACHE_SIGNATURE_KEY 2> /dev/null || true

mkdir -p "$BENCH" "$OUT"

# ---------------------------------------------------------------------------
# Binaries
# ---------------------------------------------------------------------------
if [[ -z ${CASSIST:-} ]]; then
    log "cargo build --release"
    (cd "$REPO" && nice cargo build --release --quiet)
    CASSIST=$REPO/target/release/cassist
fi
CASSIST=$(abs "$CASSIST")
[[ -x $CASSIST ]] || die "$CASSIST is not an executable"

if [[ $WITH_TURBO == 1 ]]; then
    if [[ -z ${TURBO:-} ]]; then
        TURBO=$TURBO_PREFIX/node_modules/.bin/turbo
        if [[ ! -x $TURBO ]]; then
            have npm || die "npm is needed to install turbo (or pass --no-turbo, or TURBO=/path/to/turbo)"
            log "npm install --prefix $TURBO_PREFIX turbo@2"
            npm install --prefix "$TURBO_PREFIX" --no-audit --no-fund --loglevel=error turbo@2 > /dev/null
        fi
    fi
    TURBO=$(abs "$TURBO")
    [[ -x $TURBO ]] || die "$TURBO is not an executable"
fi

# ---------------------------------------------------------------------------
# 1. The cassist project: TASKS independent tasks, recorded once
# ---------------------------------------------------------------------------
STAMP="cassist-cache-bench v1 tasks=$TASKS"
generate_cassist() {
    if [[ $REGENERATE == 0 && -f $PROJ/.bench-stamp && $(< "$PROJ/.bench-stamp") == "$STAMP" ]]; then
        log "cassist project already recorded: $PROJ"
        return
    fi
    log "generating $TASKS cassist tasks in $PROJ"
    rm -rf "$PROJ"
    mkdir -p "$PROJ/tasks" "$PROJ/ctx" "$PROJ/out"
    # The agent writes out/<task>.txt and reports success. A raw KDL string:
    # the shell sees it as written.
    cat > "$PROJ/cassist.kdl" << 'EOF'
trust "workspace-write"
test #false
defaults {
    agent "write"
}
agent "write" {
    command "sh" "-c" #"printf 'built by %s\n' "$CASSIST_TASK" > "out/$CASSIST_TASK.txt" && printf '{"success": true, "summary": "wrote out/%s.txt"}\n' "$CASSIST_TASK" > "$CASSIST_RESULT_FILE""#
}
EOF
    local i name
    for ((i = 0; i < TASKS; i++)); do
        printf -v name 't%04d' "$i"
        printf 'context of %s: line one\nline two\n' "$name" > "$PROJ/ctx/$name.txt"
        printf 'not built yet\n' > "$PROJ/out/$name.txt"
        cat > "$PROJ/tasks/$name.kdl" << EOF
task "$name" {
    goal "Write out/$name.txt from ctx/$name.txt."
    context {
        file "ctx/$name.txt"
        file "out/$name.txt"
    }
    scope {
        path "out/$name.txt"
    }
}
EOF
    done
    log "first cassist run: records all $TASKS tasks (starts $TASKS agents; takes a while)"
    local t0 t1
    t0=$(now_ns)
    if ! "$CASSIST" -q -C "$PROJ" run > "$OUT/cassist-first-run.txt" 2>&1; then
        tail -n 30 "$OUT/cassist-first-run.txt" >&2
        die "the first \`cassist run\` failed (log: $OUT/cassist-first-run.txt)"
    fi
    t1=$(now_ns)
    log "first run took $(ms $((t1 - t0)))"
    printf '%s\n' "$STAMP" > "$PROJ/.bench-stamp"
}

# ---------------------------------------------------------------------------
# 2. The turbo workspace: TASKS packages, cache filled once
# ---------------------------------------------------------------------------
generate_turbo() {
    local version
    version=$("$TURBO" --version 2> /dev/null | tail -n 1)
    local stamp="$STAMP turbo=$version"
    if [[ $REGENERATE == 0 && -f $WS/.bench-stamp && $(< "$WS/.bench-stamp") == "$stamp" ]]; then
        log "turbo workspace already cached: $WS"
        return
    fi
    log "generating a $TASKS-package npm workspace in $WS (turbo $version)"
    rm -rf "$WS"
    mkdir -p "$WS/packages"
    local npm_version
    npm_version=$(npm --version 2> /dev/null || echo 10.0.0)
    cat > "$WS/package.json" << EOF
{
  "name": "bench-root",
  "private": true,
  "packageManager": "npm@$npm_version",
  "workspaces": ["packages/*"]
}
EOF
    cat > "$WS/turbo.json" << 'EOF'
{
  "$schema": "https://turbo.build/schema.json",
  "tasks": {
    "build": {
      "outputs": ["dist/**"]
    }
  }
}
EOF
    printf 'node_modules/\n.turbo/\ndist/\n' > "$WS/.gitignore"
    local i name
    for ((i = 0; i < TASKS; i++)); do
        printf -v name 'p%04d' "$i"
        mkdir -p "$WS/packages/$name/src"
        printf 'context of %s: line one\nline two\n' "$name" > "$WS/packages/$name/src/input.txt"
        cat > "$WS/packages/$name/package.json" << EOF
{
  "name": "$name",
  "version": "1.0.0",
  "private": true,
  "scripts": {
    "build": "mkdir -p dist && printf 'built by $name\\\\n' > dist/out.txt"
  }
}
EOF
    done
    # A lockfile (workspace links only, nothing from the registry) and a git
    # repository: turbo's usual, fastest setting.
    (cd "$WS" && npm install --offline --no-audit --no-fund --ignore-scripts --loglevel=error > /dev/null)
    (cd "$WS" && git init -q && git add -A \
        && git -c user.name=bench -c user.email=bench@localhost -c commit.gpgsign=false commit -qm init)
    log "first turbo run: fills the cache ($TASKS builds)"
    local t0 t1
    t0=$(now_ns)
    if ! (cd "$WS" && "$TURBO" run build --output-logs=none > "$OUT/turbo-first-run.txt" 2>&1); then
        tail -n 30 "$OUT/turbo-first-run.txt" >&2
        die "the first \`turbo run build\` failed (log: $OUT/turbo-first-run.txt)"
    fi
    t1=$(now_ns)
    log "first run took $(ms $((t1 - t0)))"
    printf '%s\n' "$stamp" > "$WS/.bench-stamp"
}

generate_cassist
[[ $WITH_TURBO == 1 ]] && generate_turbo

# ---------------------------------------------------------------------------
# 3. Check that both are fully cached (or we would time something else)
# ---------------------------------------------------------------------------
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

# ---------------------------------------------------------------------------
# 4. Time
# ---------------------------------------------------------------------------
# median_ns NAME DIR CMD...: the median wall time of CMD (run in DIR) in
# nanoseconds.
median_ns() {
    local name=$1 dir=$2
    shift 2
    if [[ $HYPERFINE != none ]] && have "$HYPERFINE"; then
        (cd "$dir" && "$HYPERFINE" -N --style none --warmup 2 --runs "$RUNS" --export-json "$OUT/$name.json" \
            -- "$(printf '%q ' "$@")" > /dev/null)
        python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["results"][0]["median"] * 1e9))' \
            "$OUT/$name.json"
    else
        local i t0 t1
        (
            cd "$dir"
            for i in 1 2; do "$@" > /dev/null 2>&1; done
            for ((i = 0; i < RUNS; i++)); do
                t0=$(now_ns)
                "$@" > /dev/null 2>&1
                t1=$(now_ns)
                echo $((t1 - t0))
            done
        ) | sort -n > "$OUT/$name.ns"
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }' "$OUT/$name.ns"
    fi
}

if [[ $HYPERFINE == none ]] || ! have "$HYPERFINE"; then
    log "timing with a date +%s%N loop (hyperfine not used)"
fi
log "timing $RUNS runs each"
cassist_ns=$(median_ns cassist "$PROJ" "$CASSIST" -q run)
if [[ $WITH_TURBO == 1 ]]; then
    turbo_ns=$(median_ns turbo "$WS" "$TURBO" run build --output-logs=none --summarize=false)
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
