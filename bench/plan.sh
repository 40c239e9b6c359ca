#!/usr/bin/env bash
# bench/plan.sh: how fast is `cassist plan` on a large project?
#
# Generates (once) a project of 1,000 task files over 20,000 context files of
# ~10 KB each (~200 MB), then times:
#   plan-cold      `cassist plan` with no hash cache and a dropped page cache
#   plan-hashcold  `cassist plan` with no hash cache, page cache warm
#   plan-warm      `cassist plan` with the hash cache present (median of 10)
#   b3sum-cold     b3sum over the same 20,000 files, dropped page cache
#   b3sum-warm     the same, page cache warm
#   b3sum-par      b3sum over the files, one process per core, page cache cold
# and checks cold-plan/b3sum <= 1.5 and warm plan < 150 ms.
# See bench/README.md.
#
# Usage: bench/plan.sh [--generate-only] [--regenerate] [--strict]
# Env:   BENCH_DIR   project to generate/use  (default: target/bench/plan-project)
#        BENCH_OUT   where results go          (default: target/bench/results)
#        CASSIST     cassist binary            (default: target/release/cassist,
#                                               built with cargo if missing)
#        B3SUM       b3sum binary              (default: b3sum on PATH)
#        HYPERFINE   hyperfine binary, or "none" for the date +%s%N loop
#        RUNS_COLD   runs for the cold figures (default: 5)
#        RUNS_WARM   runs for the warm figures (default: 10)
# Default paths are relative to the repository root; paths you set yourself
# are relative to the directory you run the script from.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

GENERATE_ONLY=0 REGENERATE=0 STRICT=0
for arg in "$@"; do
    case $arg in
        --generate-only) GENERATE_ONLY=1 ;;
        --regenerate) REGENERATE=1 ;;
        --strict) STRICT=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "plan.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
PROJ=$(abs "${BENCH_DIR:-$REPO/target/bench/plan-project}")
OUT=$(abs "${BENCH_OUT:-$REPO/target/bench/results}")
CASSIST_DEFAULT=$REPO/target/release/cassist
CASSIST=$(abs "${CASSIST:-$CASSIST_DEFAULT}")
B3SUM=${B3SUM:-b3sum}
HYPERFINE=${HYPERFINE:-hyperfine}
RUNS_COLD=${RUNS_COLD:-5}
RUNS_WARM=${RUNS_WARM:-10}

# Layout parameters. Changing any of them changes the stamp, which makes the
# next run regenerate the project.
TASKS=1000
FILES_PER_TASK=20
FILE_SIZE=10240 # mean; each file is FILE_SIZE +/- 10%
SEED=20240601
STAMP="cassist-plan-bench v1 tasks=$TASKS files-per-task=$FILES_PER_TASK size=$FILE_SIZE seed=$SEED"

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
now_ns() { date +%s%N; }

# ---------------------------------------------------------------------------
# 1. Generate the project
# ---------------------------------------------------------------------------
generate() {
    if [[ $REGENERATE == 0 && -f $PROJ/.bench-stamp && $(<"$PROJ/.bench-stamp") == "$STAMP" ]]; then
        log "project already generated: $PROJ"
        return
    fi
    log "generating $TASKS tasks over $((TASKS * FILES_PER_TASK)) context files in $PROJ"
    local t0 t1
    t0=$(now_ns)
    rm -rf "$PROJ"
    mkdir -p "$PROJ"
    python3 - "$PROJ" "$TASKS" "$FILES_PER_TASK" "$FILE_SIZE" "$SEED" <<'PY'
import base64, os, random, sys

proj, tasks, per_task, size, seed = sys.argv[1], *map(int, sys.argv[2:])
modules = per_task          # file k of task i lives in module k: src/mKK/
nfiles = tasks * per_task   # 20,000
assert tasks == 1000, "the file naming (fMMxxx in mMM) assumes 1,000 files per module"
rng = random.Random(seed)

def path(idx):
    # Global file index idx = module * tasks + i, e.g. src/m03/f03042.txt.
    return f"src/m{idx // tasks:02d}/f{idx:05d}.txt"

for m in range(modules):
    os.makedirs(os.path.join(proj, f"src/m{m:02d}"), exist_ok=True)
os.makedirs(os.path.join(proj, "tasks"), exist_ok=True)

# Context files: base64 text (76-column lines) from one seeded stream, so the
# content is the same on every machine and every run.
total = 0
for idx in range(nfiles):
    n = size + rng.randint(-size // 10, size // 10)
    text = base64.encodebytes(rng.randbytes(n * 3 // 4 + 3))[:n]
    with open(os.path.join(proj, path(idx)), "wb") as f:
        f.write(text)
    total += n

# Task files: task i lists 20 literal files, one from each module, and each
# file is listed by exactly one task. Every 10th task (i % 10 == 3) also has a
# glob matching 10 files; every 10th (i % 10 == 7) depends on an earlier task.
globs = deps = 0
for i in range(tasks):
    name = f"t{i:04d}"
    lines = [
        f'task "{name}" {{',
        f'    goal "Benchmark task {i}: update the {per_task} files listed in context so they follow the new encoding."',
    ]
    if i % 10 == 7:
        dep = i - 1 - (i * 31) % min(i, 50)
        lines.append(f'    depends-on "t{dep:04d}"')
        deps += 1
    lines.append("    context {")
    for k in range(per_task):
        lines.append(f'        file "{path(k * tasks + i)}"')
    if i % 10 == 3:
        m, j = (i * 7) % modules, (i // 10) % 100
        lines.append(f'        file "src/m{m:02d}/f{m:02d}{j:02d}*.txt"')  # f{m}{j}0..9
        globs += 1
    lines += [
        "    }",
        "    acceptance {",
        '        run "true"',
        "    }",
        "}",
        "",
    ]
    with open(os.path.join(proj, "tasks", f"{name}.kdl"), "w") as f:
        f.write("\n".join(lines))

with open(os.path.join(proj, "cassist.kdl"), "w") as f:
    f.write('// Generated by bench/plan.sh.\ntrust "workspace-write"\n')

print(f"wrote {nfiles} context files ({total / 1e6:.1f} MB of content), "
      f"{tasks} task files ({globs} with a glob, {deps} with depends-on)",
      file=sys.stderr)
PY
    sync
    printf '%s\n' "$STAMP" >"$PROJ/.bench-stamp"
    t1=$(now_ns)
    GEN_SECONDS=$(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.1f", d / 1e9 }')
    log "generated in ${GEN_SECONDS} s (including sync); on disk: $(du -sh "$PROJ" | cut -f1)" \
        "in $(find "$PROJ" -type f | wc -l) files"
}

generate
if [[ $GENERATE_ONLY == 1 ]]; then
    exit 0
fi

# ---------------------------------------------------------------------------
# 2. Tools
# ---------------------------------------------------------------------------
if [[ ! -x $CASSIST ]]; then
    if [[ $CASSIST == "$CASSIST_DEFAULT" ]]; then
        log "building cassist (cargo build --release)"
        (cd "$REPO" && cargo build --release)
    else
        echo "plan.sh: CASSIST=$CASSIST is not an executable" >&2
        exit 1
    fi
fi
HAVE_B3SUM=1
if ! have "$B3SUM"; then
    warn "b3sum not found (cargo install b3sum); skipping the b3sum figures and the ratio"
    HAVE_B3SUM=0
fi
HAVE_HYPERFINE=0
if [[ $HYPERFINE == none ]]; then
    log "HYPERFINE=none: timing with a date +%s%N loop"
elif have "$HYPERFINE"; then
    HAVE_HYPERFINE=1
else
    warn "hyperfine not found (apt-get install hyperfine); timing with a date +%s%N loop"
fi

DROP=0
if (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
    DROP=1
else
    warn "cannot drop the page cache (need root and a writable /proc/sys/vm/drop_caches);" \
        "the 'cold' figures below are hash-cache cold but page-cache WARM"
fi

mkdir -p "$OUT"
q() { printf '%q' "$1"; }
QPROJ=$(q "$PROJ")
QCASSIST=$(q "$CASSIST")
QB3SUM=$(q "$B3SUM")
NPROC=$(nproc 2>/dev/null || echo 2)

RM_CACHE="rm -rf $QPROJ/.cassist"
DROP_PAGES="sync && echo 3 > /proc/sys/vm/drop_caches"
if [[ $DROP == 1 ]]; then COLD_PAGES=$DROP_PAGES; else COLD_PAGES=true; fi
PLAN="$QCASSIST -C $QPROJ plan --json > /dev/null"
B3="cd $QPROJ && find src -type f -print0 | xargs -0 $QB3SUM > /dev/null"
B3PAR="cd $QPROJ && find src -type f -print0 | xargs -0 -P $NPROC -n 1000 $QB3SUM > /dev/null"

# Sanity check: the plan succeeds and lists every task.
log "checking that cassist plans all $TASKS tasks"
rm -rf "$PROJ/.cassist"
if ! "$CASSIST" -C "$PROJ" plan --json >"$OUT/plan.json" 2>"$OUT/plan.stderr"; then
    echo "plan.sh: cassist plan failed; its stderr ($OUT/plan.stderr) begins:" >&2
    head -n 40 "$OUT/plan.stderr" >&2
    exit 1
fi
n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tasks"]))' "$OUT/plan.json")
if [[ $n != "$TASKS" ]]; then
    echo "plan.sh: cassist plan listed $n tasks, expected $TASKS (see $OUT/plan.json)" >&2
    exit 1
fi

# ---------------------------------------------------------------------------
# 3. Measure
# ---------------------------------------------------------------------------
declare -A MEDIAN MIN MAX RUNS

# measure NAME RUNS WARMUP PREPARE COMMAND
measure() {
    local name=$1 runs=$2 warmup=$3 prep=$4 cmd=$5 stats
    log "measuring $name ($runs runs)"
    if [[ $HAVE_HYPERFINE == 1 ]]; then
        "$HYPERFINE" --style basic --time-unit millisecond --runs "$runs" --warmup "$warmup" \
            --prepare "$prep" --export-json "$OUT/$name.json" "$cmd" >&2
        stats=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(r["median"] * 1e3, r["min"] * 1e3, r["max"] * 1e3)' "$OUT/$name.json")
    else
        local i t0 t1
        for ((i = 0; i < warmup; i++)); do (eval "$prep"); (eval "$cmd"); done
        : >"$OUT/$name.ns"
        for ((i = 0; i < runs; i++)); do
            (eval "$prep")
            t0=$(now_ns)
            (eval "$cmd")
            t1=$(now_ns)
            echo $((t1 - t0)) >>"$OUT/$name.ns"
        done
        stats=$(sort -n "$OUT/$name.ns" | awk '
            { v[NR] = $1 }
            END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                  print m / 1e6, v[1] / 1e6, v[NR] / 1e6 }')
    fi
    read -r "MEDIAN[$name]" "MIN[$name]" "MAX[$name]" <<<"$stats"
    RUNS[$name]=$runs
}

if [[ $HAVE_B3SUM == 1 ]]; then
    measure b3sum-cold "$RUNS_COLD" 0 "$COLD_PAGES" "$B3"
    measure b3sum-par "$RUNS_COLD" 0 "$COLD_PAGES" "$B3PAR"
fi
measure plan-cold "$RUNS_COLD" 0 "$RM_CACHE && $COLD_PAGES" "$PLAN"
measure plan-hashcold "$RUNS_COLD" 1 "$RM_CACHE" "$PLAN"
if [[ $HAVE_B3SUM == 1 ]]; then
    measure b3sum-warm "$RUNS_WARM" 1 true "$B3"
fi
measure plan-warm "$RUNS_WARM" 2 true "$PLAN"

# ---------------------------------------------------------------------------
# 4. Report
# ---------------------------------------------------------------------------
row() {
    [[ -n ${MEDIAN[$1]:-} ]] || return 0
    printf '  %-14s %-44s %4s %10.1f %10.1f %10.1f\n' "$1" "$2" "${RUNS[$1]}" \
        "${MEDIAN[$1]}" "${MIN[$1]}" "${MAX[$1]}"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
verdict() { awk -v x="$1" -v t="$2" -v op="$3" 'BEGIN {
    ok = (op == "<=") ? (x <= t) : (x < t); print ok ? "PASS" : "FAIL" }'; }

FAILED=0
report() {
    local cold_note=""
    [[ $DROP == 1 ]] || cold_note=" (page cache NOT dropped)"
    echo
    echo "cassist plan benchmark: $TASKS tasks, $((TASKS * FILES_PER_TASK)) context files," \
        "$(du -s --apparent-size -B1 "$PROJ/src" | awk '{ printf "%.0f MB", $1 / 1e6 }') under src/" \
        "($(du -sh "$PROJ/src" | cut -f1) on disk)"
    echo "cassist: $CASSIST"
    echo "page cache dropped before cold runs: $([[ $DROP == 1 ]] && echo yes || echo 'no, unavailable here')"
    echo "timer: $([[ $HAVE_HYPERFINE == 1 ]] && "$HYPERFINE" --version || echo 'date +%s%N loop')"
    echo
    printf '  %-14s %-44s %4s %10s %10s %10s\n' figure "what" runs "median ms" "min ms" "max ms"
    row plan-cold "cassist plan, no hash cache, cold pages$cold_note"
    row plan-hashcold "cassist plan, no hash cache, warm pages"
    row plan-warm "cassist plan, hash cache present"
    row b3sum-cold "b3sum over all files, cold pages$cold_note"
    row b3sum-par "b3sum, $NPROC processes, cold pages$cold_note"
    row b3sum-warm "b3sum over all files, warm pages"
    echo
    local r v
    if [[ -n ${MEDIAN[b3sum-cold]:-} ]]; then
        r=$(ratio "${MEDIAN[plan-cold]}" "${MEDIAN[b3sum-cold]}")
        v=$(verdict "$r" 1.5 "<=")
        [[ $v == PASS ]] || FAILED=1
        echo "  plan-cold / b3sum-cold         = $r   (target <= 1.5)  $v"
        r=$(ratio "${MEDIAN[plan-hashcold]}" "${MEDIAN[b3sum-warm]}")
        echo "  plan-hashcold / b3sum-warm     = $r   (same comparison with warm pages; informational)"
        r=$(ratio "${MEDIAN[plan-cold]}" "${MEDIAN[b3sum-par]}")
        echo "  plan-cold / b3sum-par          = $r   (against b3sum using every core; informational)"
    fi
    v=$(verdict "${MEDIAN[plan-warm]}" 150 "<")
    [[ $v == PASS ]] || FAILED=1
    printf '  plan-warm median               = %.1f ms   (target < 150 ms)  %s\n' "${MEDIAN[plan-warm]}" "$v"
}
report | tee "$OUT/summary.txt"
echo
log "results in $OUT (summary.txt, one JSON or .ns file per figure)"

if [[ $STRICT == 1 && $FAILED == 1 ]]; then
    exit 1
fi
