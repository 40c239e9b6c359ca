#!/usr/bin/env bash
# bench/scale.sh: does cassist's cost grow with the change, not the
# repository? Four figures, each printed next to its anchor and target:
#
#   overhead    (a) one trivial task (a custom agent that writes one file, no
#               acceptance) on git repositories of 1,000 / 10,000 / 100,000
#               files: `cassist run --no-cache` minus the agent run alone.
#               Targets: <= 20 ms on 10,000 files; 100,000 files at most 2x
#               1,000 files.
#   first-run   (b) 1,000 trivial tasks on a monorepo of 1,000 packages of 20
#               files each, first run (nothing recorded) at -j 2, on a fresh
#               copy each time. Target: <= 15 s.
#   up-to-date  (c) `cassist run` with those 1,000 tasks (20,000 context
#               files) up-to-date, against `turbo run build` fully cached on
#               the same packages. Target: cassist >= 4x faster.
#   plan        (d) cold `cassist plan` (no hash cache, page cache dropped) on
#               bench/plan.sh's project (1,000 tasks over 20,000 files of
#               ~10 KB) against two b3sum processes over the same files,
#               page cache dropped too. Target: <= 1.2x.
#
# The repositories are generated once (under BENCH_DIR, kept while their
# layout stays the same); the first-run copies are made before each timed
# run, outside the timing. See bench/README.md.
#
# Usage: bench/scale.sh [--quick] [--only LIST] [--regenerate] [--strict] [--no-turbo]
#   --quick        fewer runs of each figure
#   --only LIST    comma-separated figures: overhead,first-run,up-to-date,plan
#   --regenerate   generate every repository again
#   --strict       exit 1 when a target is missed
#   --no-turbo     leave out the turbo anchor (and its target)
# Env:   BENCH_DIR     generated repositories and results (default: target/bench/scale)
#        PLAN_PROJECT  bench/plan.sh's project (default: target/bench/plan-project)
#        CASSIST       cassist binary (default: target/release/cassist, built
#                      with `cargo build --release` first)
#        TURBO         turbo binary (default: installed with npm into target/bench/turbo)
#        B3SUM         b3sum binary (default: b3sum on PATH, else ~/.cargo/bin/b3sum)
#        HYPERFINE     hyperfine binary, or "none" for a date +%s%N loop
#        SIZES         repository sizes of (a) (default: "1000 10000 100000")
#        TASKS, FILES  packages of the monorepo and files per package (1000, 20)
#        JOBS          -j of (b) and (c) (default: 2)
#        RUNS_OVERHEAD, RUNS_FIRST, RUNS_UTD, RUNS_COLD
#                      runs per figure (default 20, 3, 10, 5; --quick: 7, 1, 5, 3)
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup scale.sh

QUICK=0 REGENERATE=0 STRICT=0 WITH_TURBO=1 ONLY=overhead,first-run,up-to-date,plan
while (($#)); do
    case $1 in
        --quick) QUICK=1 ;;
        --only) ONLY=${2:?--only needs a list}; shift ;;
        --only=*) ONLY=${1#--only=} ;;
        --regenerate) REGENERATE=1 ;;
        --strict) STRICT=1 ;;
        --no-turbo) WITH_TURBO=0 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "scale.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
for f in ${ONLY//,/ }; do
    case $f in
        overhead | first-run | up-to-date | plan) ;;
        *) die "unknown figure \`$f\` in --only (overhead, first-run, up-to-date, plan)" ;;
    esac
done
wanted() { [[ ",$ONLY," == *",$1,"* ]]; }

BENCH=$(abs "${BENCH_DIR:-$REPO/target/bench/scale}")
PLAN_PROJECT=$(abs "${PLAN_PROJECT:-$REPO/target/bench/plan-project}")
OUT=$BENCH/results
SIZES=${SIZES:-1000 10000 100000}
TASKS=${TASKS:-1000}
FILES=${FILES:-20}
JOBS=${JOBS:-2}
if [[ $QUICK == 1 ]]; then
    RUNS_OVERHEAD=${RUNS_OVERHEAD:-7} RUNS_FIRST=${RUNS_FIRST:-1} RUNS_UTD=${RUNS_UTD:-5} RUNS_COLD=${RUNS_COLD:-3}
else
    RUNS_OVERHEAD=${RUNS_OVERHEAD:-20} RUNS_FIRST=${RUNS_FIRST:-3} RUNS_UTD=${RUNS_UTD:-10} RUNS_COLD=${RUNS_COLD:-5}
fi
B3SUM=${B3SUM:-$(command -v b3sum || echo "$HOME/.cargo/bin/b3sum")}
mkdir -p "$BENCH" "$OUT"
q() { printf '%q' "$1"; }

cassist_binary
if wanted up-to-date && [[ $WITH_TURBO == 1 ]]; then
    turbo_binary
fi
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# The rows of the report: figure, cassist's value, anchor, target, verdict.
ROWS=()
MISSED=0
row() { ROWS+=("$(printf '%-50s %-10s %-40s %-12s %s' "$@")"); }
# verdict VALUE OP LIMIT: PASS or MISSED (and remembers a miss).
verdict() {
    if awk -v x="$1" -v t="$3" -v op="$2" 'BEGIN { exit !((op == "<=") ? (x <= t) : (x >= t)) }'; then
        echo PASS
    else
        MISSED=1
        echo MISSED
    fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
commas() { sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<< "$1"; }

# stamped DIR STAMP: whether DIR was generated with this layout.
stamped() { [[ $REGENERATE == 0 && -f $1/.bench-stamp && $(< "$1/.bench-stamp") == "$2" ]]; }

# ---------------------------------------------------------------------------
# (a) One trivial task on repositories of growing size
# ---------------------------------------------------------------------------
# The agent: writes out.txt (new content each run, so every run integrates
# a change) and reports success. No process of its own beyond the shell.
ONE_AGENT=$(
    cat << 'EOF'
read id < /proc/sys/kernel/random/uuid && echo "$id" > out.txt && printf '{"success": true, "summary": "wrote out.txt"}\n' > "$CASSIST_RESULT_FILE"
EOF
)

one_task_repo() {
    local dir=$1 files=$2 stamp="cassist-scale-repo v1 files=$2"
    if stamped "$dir" "$stamp"; then
        return
    fi
    log "generating a git repository of $(commas "$files") files in $dir"
    rm -rf "$dir"
    mkdir -p "$dir/tasks"
    python3 - "$dir" "$files" << 'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"src/d{i // 100:04d}")
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.txt"), "w") as f:
        f.write(f"file {i}: line one\nline two\n")
PY
    cat > "$dir/cassist.kdl" << EOF
trust "workspace-write"
test #false
agent "write" {
    command "sh" "-c" #"$ONE_AGENT"#
}
EOF
    cat > "$dir/tasks/one.kdl" << 'EOF'
task "one" {
    goal "Write out.txt."
    agent "write"
    context {
        file "src/d0000/f000000.txt"
    }
    scope {
        path "out.txt"
    }
}
EOF
    git_commit "$dir"
    printf '%s\n' "$stamp" > "$dir/.bench-stamp"
}

figure_overhead() {
    local n dir cassist_ns agent_ns over scratch
    declare -A OVER
    scratch=$BENCH/agent-alone
    mkdir -p "$scratch"
    # The agent alone, as cassist starts it: a shell in the project.
    agent_ns=$(cd "$scratch" && CASSIST_TASK=one CASSIST_RESULT_FILE=$scratch/result.json \
        median_ns agent-alone "$RUNS_OVERHEAD" 3 "" "sh -c $(q "$ONE_AGENT")")
    for n in $SIZES; do
        dir=$BENCH/repo-$n
        one_task_repo "$dir" "$n"
        "$CASSIST" -q -C "$dir" run --no-cache > "$OUT/overhead-$n-check.txt" 2>&1 \
            || { cat "$OUT/overhead-$n-check.txt" >&2; die "\`cassist run\` failed on $dir"; }
        log "(a) one trivial task on $(commas "$n") files: $RUNS_OVERHEAD runs"
        cassist_ns=$(median_ns "overhead-$n" "$RUNS_OVERHEAD" 3 "" "$(q "$CASSIST") -q -C $(q "$dir") run --no-cache")
        over=$((cassist_ns - agent_ns))
        OVER[$n]=$over
        local target=— v=""
        if [[ $n == 10000 ]]; then
            target="<= 20 ms"
            v=$(verdict "$over" "<=" 20000000)
        fi
        row "(a) 1 trivial task, $(commas "$n") files: run - agent" "$(ms "$over")" \
            "run $(ms "$cassist_ns"), agent alone $(ms "$agent_ns")" "$target" "$v"
    done
    local first last
    first=${SIZES%% *} last=${SIZES##* }
    if [[ $first != "$last" ]]; then
        local r
        r=$(ratio "${OVER[$last]}" "${OVER[$first]}")
        row "(a) overhead $(commas "$last") / $(commas "$first") files" "${r}x" "" "<= 2x" "$(verdict "$r" "<=" 2)"
    fi
}

# ---------------------------------------------------------------------------
# (b) and (c): the monorepo of 1,000 packages
# ---------------------------------------------------------------------------
MONO=$BENCH/monorepo
MONO_STAMP="cassist-scale-monorepo v1 tasks=$TASKS files=$FILES"
monorepo_template() {
    if stamped "$MONO" "$MONO_STAMP"; then
        return
    fi
    log "generating the monorepo: $TASKS packages of $FILES files, one task each, in $MONO"
    monorepo "$MONO" cassist "$TASKS" "$FILES"
    printf '%s\n' "$MONO_STAMP" > "$MONO/.bench-stamp"
}

# check_states REPORT STATE...: every task of the JSON report ended in one
# of the STATEs, and there are TASKS of them.
check_states() {
    python3 - "$@" "$TASKS" << 'PY'
import collections, json, sys
doc = json.load(open(sys.argv[1]))
states = collections.Counter(t["state"] for t in doc["tasks"])
if sum(states.values()) != int(sys.argv[-1]) or set(states) - set(sys.argv[2:-1]):
    sys.exit(f"states: {dict(states)}")
PY
}

figure_first_run() {
    monorepo_template
    local work=$BENCH/first-run trash=$BENCH/first-run-trash ns
    log "(b) $TASKS trivial tasks, first run at -j $JOBS: $RUNS_FIRST run(s) (a fresh copy each)"
    # The copy an earlier run used is moved aside, and removed once every
    # run is timed: deleting its 21,000 files right before a run would
    # slow that run's own file creations (on ext4 without a journal, new
    # inodes skip the ones deleted in the last 30 s, one disk read each).
    rm -rf "$trash" && mkdir -p "$trash"
    ns=$(median_ns first-run "$RUNS_FIRST" 0 \
        "{ [ ! -e $(q "$work") ] || mv $(q "$work") $(q "$trash")/\$(date +%s%N); } && cp -a $(q "$MONO") $(q "$work")" \
        "$(q "$CASSIST") -q -C $(q "$work") run -j $JOBS --report-json $(q "$OUT/first-run-report.json")")
    rm -rf "$trash"
    check_states "$OUT/first-run-report.json" passed \
        || die "the first run did not pass every task (see $OUT/first-run-report.json)"
    # The last copy is recorded: (c) starts from it.
    rm -rf "$BENCH/monorepo-recorded"
    mv "$work" "$BENCH/monorepo-recorded"
    printf '%s\n' "$MONO_STAMP" > "$BENCH/monorepo-recorded/.bench-stamp"
    row "(b) $(commas "$TASKS") trivial tasks, first run, -j $JOBS" "$(secs "$ns")" "—" "<= 15 s" \
        "$(verdict "$ns" "<=" 15000000000)"
}

figure_up_to_date() {
    monorepo_template
    local proj=$BENCH/monorepo-recorded cassist_ns turbo_ns
    if ! stamped "$proj" "$MONO_STAMP"; then
        rm -rf "$proj"
        cp -a "$MONO" "$proj"
    fi
    # Records whatever is not (a first run on a fresh copy; after a change
    # of cassist, whatever its new version no longer finds up-to-date).
    log "(c) recording the monorepo's tasks"
    "$CASSIST" -q -C "$proj" run -j "$JOBS" > "$OUT/up-to-date-record.txt" 2>&1 \
        || { tail -n 30 "$OUT/up-to-date-record.txt" >&2; die "\`cassist run\` failed on $proj"; }
    "$CASSIST" -q -C "$proj" run --report-json "$OUT/up-to-date-check.json" > /dev/null 2>&1 || true
    check_states "$OUT/up-to-date-check.json" up-to-date \
        || die "the recorded monorepo is not fully up-to-date (see $OUT/up-to-date-check.json)"
    printf '%s\n' "$MONO_STAMP" > "$proj/.bench-stamp"
    log "(c) $TASKS tasks up-to-date: $RUNS_UTD runs"
    cassist_ns=$(median_ns up-to-date "$RUNS_UTD" 2 "" "$(q "$CASSIST") -q -C $(q "$proj") run")
    if [[ $WITH_TURBO == 0 ]]; then
        row "(c) $(commas "$TASKS") tasks up-to-date, $(commas $((TASKS * FILES))) context files" \
            "$(ms "$cassist_ns")" "turbo: left out (--no-turbo)" ">= 4x" ""
        return
    fi
    local ws=$BENCH/turbo-workspace version stamp
    version=$("$TURBO" --version 2> /dev/null | tail -n 1)
    stamp="$MONO_STAMP turbo=$version"
    if ! stamped "$ws" "$stamp"; then
        log "generating the same packages as an npm workspace for turbo $version in $ws"
        monorepo "$ws" turbo "$TASKS" "$FILES"
        log "first turbo run: fills its cache"
        (cd "$ws" && "$TURBO" run build --output-logs=none > "$OUT/turbo-first-run.txt" 2>&1) \
            || { tail -n 30 "$OUT/turbo-first-run.txt" >&2; die "the first \`turbo run build\` failed"; }
        printf '%s\n' "$stamp" > "$ws/.bench-stamp"
    fi
    (cd "$ws" && "$TURBO" run build --output-logs=none --summarize=false > "$OUT/turbo-check.txt" 2>&1) \
        || die "\`turbo run build\` on the cached workspace failed (log: $OUT/turbo-check.txt)"
    grep -Eq "Cached: +$TASKS cached, $TASKS total" "$OUT/turbo-check.txt" \
        || die "the turbo workspace is not fully cached: $(grep -E 'Cached:' "$OUT/turbo-check.txt" || true)"
    log "(c) turbo run build, $TASKS packages cached: $RUNS_UTD runs"
    turbo_ns=$(cd "$ws" && median_ns turbo-cached "$RUNS_UTD" 2 "" "$(q "$TURBO") run build --output-logs=none --summarize=false")
    local r
    r=$(ratio "$turbo_ns" "$cassist_ns")
    row "(c) $(commas "$TASKS") tasks up-to-date, $(commas $((TASKS * FILES))) context files" "$(ms "$cassist_ns")" \
        "turbo fully cached $(ms "$turbo_ns"): ${r}x faster" ">= 4x" "$(verdict "$r" ">=" 4)"
}

# ---------------------------------------------------------------------------
# (d) Cold plan against two b3sum processes
# ---------------------------------------------------------------------------
figure_plan() {
    BENCH_DIR=$PLAN_PROJECT CASSIST=$CASSIST "$REPO/bench/plan.sh" --generate-only
    [[ -x $B3SUM ]] || have "$B3SUM" || die "b3sum is needed for the plan figure (cargo install b3sum)"
    local drop="sync && echo 3 > /proc/sys/vm/drop_caches" note=""
    if ! (sync && echo 3 > /proc/sys/vm/drop_caches) 2> /dev/null; then
        warn "cannot drop the page cache (needs root): the cold figures run with a warm page cache"
        drop=true note=" (page cache NOT dropped)"
    fi
    "$CASSIST" -C "$PLAN_PROJECT" plan --json > "$OUT/plan.json" 2> "$OUT/plan.stderr" \
        || { head -n 40 "$OUT/plan.stderr" >&2; die "cassist plan failed on $PLAN_PROJECT"; }
    local files half cassist_ns b3_ns
    files=$(cd "$PLAN_PROJECT" && find src -type f | wc -l)
    half=$(((files + 1) / 2))
    log "(d) cold plan and two b3sum processes over $(commas "$files") files: $RUNS_COLD runs each"
    b3_ns=$(median_ns b3sum-2 "$RUNS_COLD" 0 "$drop" \
        "cd $(q "$PLAN_PROJECT") && find src -type f -print0 | xargs -0 -P 2 -n $half $(q "$B3SUM") > /dev/null")
    cassist_ns=$(median_ns plan-cold "$RUNS_COLD" 0 "rm -rf $(q "$PLAN_PROJECT/.cassist") && $drop" \
        "$(q "$CASSIST") -C $(q "$PLAN_PROJECT") plan --json > /dev/null")
    local r
    r=$(ratio "$cassist_ns" "$b3_ns")
    row "(d) cold plan, $(commas "$files") context files$note" "$(secs "$cassist_ns")" \
        "2 b3sum processes $(secs "$b3_ns"): ${r}x" "<= 1.2x" "$(verdict "$r" "<=" 1.2)"
}

wanted overhead && figure_overhead
wanted first-run && figure_first_run
wanted up-to-date && figure_up_to_date
wanted plan && figure_plan

{
    echo
    echo "cassist scale benchmark ($CASSIST, $(nproc) cores; load average before: $LOAD_BEFORE," \
        "after: $(cut -d' ' -f1-3 /proc/loadavg); medians)"
    printf '%-50s %-10s %-40s %-12s %s\n' figure cassist anchor target verdict
    printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/summary.txt"

if [[ $STRICT == 1 && $MISSED == 1 ]]; then
    exit 1
fi
