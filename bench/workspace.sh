#!/usr/bin/env bash
# bench/workspace.sh: how fast is a task's workspace set up?
#
# Generates (once) a git repository of 10,000 source-like files (~60 MB,
# committed), then times, on that repository:
#   ws-overlay    `cassist __sandbox-exec --lower REPO --upper U --work W
#                 --cwd REPO -- true`: namespaces + overlay mount + running
#                 `true` inside (fresh empty U and W before each run)
#   true          `true` alone (the floor: starting one process)
#   git-worktree  `git worktree add --detach` of the same repository
#   cp-r          `cp -r` of the same repository
# and, through the library (an ignored test of tests/it/workspace.rs, built in
# release mode), `Workspace::create` + running `true` inside, in the overlay
# and in the copy mode (`lib-overlay`, `lib-copy`), with the time of
# `changes()` on the untouched workspace, of waiting for the manifest and of
# the drop. Target: workspace set-up (ws-overlay, lib-overlay) under 50 ms.
#
# Usage: bench/workspace.sh [--generate-only] [--regenerate] [--no-lib] [--strict]
#   --no-lib     skip the library figures (they need `cargo test --release`)
#   --strict     exit 1 when the target is missed
# Env:   BENCH_DIR   repository to generate/use (default: target/bench/ws-repo)
#        BENCH_OUT   where results go           (default: target/bench/ws-results)
#        CASSIST     cassist binary             (default: target/release/cassist,
#                                                built with cargo if missing)
#        HYPERFINE   hyperfine binary, or "none" for the date +%s%N loop
#        RUNS_FAST   runs of the fast figures   (default: 30)
#        RUNS_SLOW   runs of git-worktree/cp-r  (default: 5)
#        RUNS_LIB    runs of the library overlay figure (default: 15)
#        RUNS_LIB_COPY  runs of the library copy figure (default: 5)
# Default paths are relative to the repository root; paths you set yourself
# are relative to the directory you run the script from.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

GENERATE_ONLY=0 REGENERATE=0 STRICT=0 LIB=1
for arg in "$@"; do
    case $arg in
        --generate-only) GENERATE_ONLY=1 ;;
        --regenerate) REGENERATE=1 ;;
        --no-lib) LIB=0 ;;
        --strict) STRICT=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "workspace.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
REPO=$(abs "${BENCH_DIR:-$ROOT/target/bench/ws-repo}")
OUT=$(abs "${BENCH_OUT:-$ROOT/target/bench/ws-results}")
CASSIST_DEFAULT=$ROOT/target/release/cassist
CASSIST=$(abs "${CASSIST:-$CASSIST_DEFAULT}")
HYPERFINE=${HYPERFINE:-hyperfine}
RUNS_FAST=${RUNS_FAST:-30}
RUNS_SLOW=${RUNS_SLOW:-5}
RUNS_LIB=${RUNS_LIB:-15}
RUNS_LIB_COPY=${RUNS_LIB_COPY:-5}
TARGET_MS=50

# Layout parameters. Changing any of them changes the stamp, which makes the
# next run regenerate the repository.
FILES=10000
SEED=20240615
STAMP="cassist-workspace-bench v1 files=$FILES seed=$SEED"

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
now_ns() { date +%s%N; }
# Quiet, configuration-free git.
g() { GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git -c user.name=bench -c user.email=bench@example.com \
    -c commit.gpgsign=false -c init.defaultBranch=main "$@"; }

case $REPO in *,* | *:*)
    echo "workspace.sh: BENCH_DIR=$REPO holds ',' or ':', which overlayfs cannot mount" >&2
    exit 2 ;;
esac

# ---------------------------------------------------------------------------
# 1. Generate the repository
# ---------------------------------------------------------------------------
generate() {
    if [[ $REGENERATE == 0 && -f $REPO/.git/bench-stamp && $(<"$REPO/.git/bench-stamp") == "$STAMP" ]]; then
        log "repository already generated: $REPO"
        return
    fi
    log "generating a $FILES-file repository in $REPO"
    local t0 t1
    t0=$(now_ns)
    rm -rf "$REPO"
    mkdir -p "$REPO"
    python3 - "$REPO" "$FILES" "$SEED" <<'PY'
import os, random, sys

repo, nfiles, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)

# A source tree: 20 packages x 10 modules x 50 files, three levels deep.
# Sizes follow what source repositories hold: mostly a few KB, a long tail.
def size():
    r = rng.random()
    if r < 0.60:
        return rng.randint(300, 4096)
    if r < 0.90:
        return rng.randint(4096, 16384)
    if r < 0.99:
        return rng.randint(16384, 65536)
    return rng.randint(65536, 262144)

words = ("let fn return match self value result error config task agent file path "
         "index count buffer parse render write read open close stream state node").split()
exts = [".rs", ".py", ".ts", ".go", ".md", ".json", ".toml", ".txt"]

def text(n):
    lines, total = [], 0
    while total < n:
        indent = "    " * rng.randint(0, 3)
        line = indent + " ".join(rng.choice(words) for _ in range(rng.randint(2, 10))) + ";"
        lines.append(line)
        total += len(line) + 1
    return ("\n".join(lines) + "\n")[:n]

total = 0
i = 0
for p in range(20):
    for m in range(10):
        d = os.path.join(repo, f"pkg{p:02d}", f"mod{m:02d}")
        os.makedirs(d, exist_ok=True)
        for k in range(nfiles // 200):
            n = size()
            with open(os.path.join(d, f"file{k:02d}{exts[(i + k) % len(exts)]}"), "w") as f:
                f.write(text(n))
            total += n
            i += 1
with open(os.path.join(repo, ".gitignore"), "w") as f:
    f.write("target/\n__pycache__/\n*.log\n")
with open(os.path.join(repo, "README.md"), "w") as f:
    f.write("# Generated by bench/workspace.sh\n")
print(f"wrote {i + 2} files ({total / 1e6:.1f} MB of content)", file=sys.stderr)
PY
    (cd "$REPO" && g init -q && g add -A && g commit -q -m "generated by bench/workspace.sh")
    printf '%s\n' "$STAMP" >"$REPO/.git/bench-stamp"
    sync
    t1=$(now_ns)
    log "generated in $(awk -v d=$((t1 - t0)) 'BEGIN { printf "%.1f", d / 1e9 }') s (git commit and sync" \
        "included); $(g -C "$REPO" ls-files | wc -l) tracked files, $(du -sh --exclude=.git "$REPO" | cut -f1) on disk"
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
        (cd "$ROOT" && cargo build --release)
    else
        echo "workspace.sh: CASSIST=$CASSIST is not an executable" >&2
        exit 1
    fi
fi
HAVE_HYPERFINE=0
if [[ $HYPERFINE == none ]]; then
    log "HYPERFINE=none: timing with a date +%s%N loop"
elif have "$HYPERFINE"; then
    HAVE_HYPERFINE=1
else
    warn "hyperfine not found (apt-get install hyperfine); timing with a date +%s%N loop"
fi

mkdir -p "$OUT"
SCRATCH=$OUT/scratch
mkdir -p "$SCRATCH"
q() { printf '%q' "$1"; }
QREPO=$(q "$REPO")
QCASSIST=$(q "$CASSIST")
U=$(q "$SCRATCH/upper")
W=$(q "$SCRATCH/work")
WT=$(q "$SCRATCH/worktree")
CP=$(q "$SCRATCH/copy")
# The kernel makes work/work mode 000: make it removable first.
FRESH_UW="chmod -R u+rwx $U $W 2>/dev/null || true; rm -rf $U $W && mkdir $U $W"
RM_WT="git -C $QREPO worktree remove --force $WT 2>/dev/null || true; rm -rf $WT; git -C $QREPO worktree prune"

# Sanity check: the wrapper works here (else say why, and skip its figure).
HAVE_OVERLAY=1
eval "$FRESH_UW"
if ! "$CASSIST" __sandbox-exec --lower "$REPO" --upper "$SCRATCH/upper" --work "$SCRATCH/work" --cwd "$REPO" \
    -- sh -c 'test -f README.md && echo x > .bench-probe' 2>"$OUT/overlay.stderr" ||
    [[ ! -f $SCRATCH/upper/.bench-probe || -e $REPO/.bench-probe ]]; then
    warn "the overlay workspace does not work here: $(head -c 300 "$OUT/overlay.stderr"); skipping ws-overlay"
    HAVE_OVERLAY=0
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
        # No shell around the measured command (-N: its start-up would be
        # most of a few-ms figure); the preparation runs in its own sh.
        "$HYPERFINE" --style basic --time-unit millisecond --runs "$runs" --warmup "$warmup" -N \
            --prepare "sh -c $(q "$prep")" --export-json "$OUT/$name.json" "$cmd" >&2
        stats=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
print(r["median"] * 1e3, r["min"] * 1e3, r["max"] * 1e3)' "$OUT/$name.json")
    else
        local i t0 t1
        for ((i = 0; i < warmup; i++)); do (eval "$prep"); (eval "$cmd") >/dev/null; done
        : >"$OUT/$name.ns"
        for ((i = 0; i < runs; i++)); do
            (eval "$prep")
            t0=$(now_ns)
            (eval "$cmd") >/dev/null
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

measure true "$RUNS_FAST" 3 true "true"
if [[ $HAVE_OVERLAY == 1 ]]; then
    measure ws-overlay "$RUNS_FAST" 3 "$FRESH_UW" \
        "$QCASSIST __sandbox-exec --lower $QREPO --upper $U --work $W --cwd $QREPO -- true"
fi
measure git-worktree "$RUNS_SLOW" 1 "$RM_WT" "git -C $QREPO worktree add --detach -q $WT"
measure cp-r "$RUNS_SLOW" 1 "rm -rf $CP" "cp -r $QREPO $CP"
eval "$RM_WT"
rm -rf "$SCRATCH/copy"

# The library figures: an ignored test prints one BENCH line per mode.
declare -A LIB_SETUP LIB_CHANGES LIB_MANIFEST LIB_DROP
if [[ $LIB == 1 ]]; then
    log "building and running the library measurement (cargo test --release --test it workspace::bench_workspace_setup)"
    if (cd "$ROOT" && CASSIST_BENCH_REPO=$REPO CASSIST_BENCH_RUNS=$RUNS_LIB CASSIST_BENCH_RUNS_COPY=$RUNS_LIB_COPY \
        cargo test --release --test it -- --ignored --exact workspace::bench_workspace_setup --nocapture) \
        >"$OUT/lib.stdout" 2>"$OUT/lib.stderr"; then
        while read -r _ mode runs setup changes manifest dropping; do
            mode=${mode#mode=}
            LIB_SETUP[$mode]=${setup#setup_ms=}
            LIB_CHANGES[$mode]=${changes#changes_ms=}
            LIB_MANIFEST[$mode]=${manifest#manifest_wait_ms=}
            LIB_DROP[$mode]=${dropping#drop_ms=}
            RUNS[lib-$mode]=${runs#runs=}
        done < <(grep '^BENCH ' "$OUT/lib.stdout")
    else
        warn "the library measurement failed; see $OUT/lib.stderr"
    fi
fi

# ---------------------------------------------------------------------------
# 4. Report
# ---------------------------------------------------------------------------
row() {
    [[ -n ${MEDIAN[$1]:-} ]] || return 0
    printf '  %-13s %-52s %4s %10.1f %10.1f %10.1f\n' "$1" "$2" "${RUNS[$1]}" \
        "${MEDIAN[$1]}" "${MIN[$1]}" "${MAX[$1]}"
}
lib_row() {
    [[ -n ${LIB_SETUP[$1]:-} ]] || return 0
    printf '  %-13s %4s %12.1f %12.1f %14.1f %10.1f\n' "lib-$1" "${RUNS[lib-$1]}" \
        "${LIB_SETUP[$1]}" "${LIB_CHANGES[$1]}" "${LIB_MANIFEST[$1]}" "${LIB_DROP[$1]}"
}
verdict() { awk -v x="$1" -v t="$2" 'BEGIN { print (x < t) ? "PASS" : "FAIL" }'; }

FAILED=0
report() {
    echo
    echo "workspace set-up benchmark: $(git -C "$REPO" ls-files | wc -l) tracked files," \
        "$(du -s --apparent-size -B1 --exclude=.git "$REPO" | awk '{ printf "%.0f MB", $1 / 1e6 }')" \
        "($(du -sh --exclude=.git "$REPO" | cut -f1) on disk, $(df -T "$REPO" | awk 'NR == 2 { print $2 }'))"
    echo "cassist: $CASSIST; kernel $(uname -r); $(nproc) cores"
    echo "timer: $([[ $HAVE_HYPERFINE == 1 ]] && "$HYPERFINE" --version || echo 'date +%s%N loop')"
    echo
    printf '  %-13s %-52s %4s %10s %10s %10s\n' figure what runs "median ms" "min ms" "max ms"
    row true "true alone (starting one process)"
    row ws-overlay "__sandbox-exec: namespaces + overlay + true"
    row git-worktree "git worktree add --detach"
    row cp-r "cp -r of the repository (.git/ included)"
    if [[ -n ${LIB_SETUP[overlay]:-}${LIB_SETUP[copy]:-} ]]; then
        echo
        echo "  Through the library (median ms): Workspace::create + run \`true\` inside; then"
        echo "  changes() (nothing changed), waiting for the manifest, drop."
        printf '  %-13s %4s %12s %12s %14s %10s\n' figure runs "setup+true" "changes()" "manifest wait" drop
        lib_row overlay
        lib_row copy
    fi
    echo
    local v
    if [[ -n ${MEDIAN[ws-overlay]:-} ]]; then
        v=$(verdict "${MEDIAN[ws-overlay]}" "$TARGET_MS")
        [[ $v == PASS ]] || FAILED=1
        printf '  ws-overlay median                = %7.1f ms   (target < %d ms)  %s\n' \
            "${MEDIAN[ws-overlay]}" "$TARGET_MS" "$v"
    else
        FAILED=1
        echo "  ws-overlay: not measured (the overlay workspace does not work here)"
    fi
    if [[ -n ${LIB_SETUP[overlay]:-} ]]; then
        v=$(verdict "${LIB_SETUP[overlay]}" "$TARGET_MS")
        [[ $v == PASS ]] || FAILED=1
        printf '  lib-overlay setup+true median    = %7.1f ms   (target < %d ms)  %s\n' \
            "${LIB_SETUP[overlay]}" "$TARGET_MS" "$v"
    fi
    if [[ -n ${MEDIAN[ws-overlay]:-} && -n ${MEDIAN[cp-r]:-} ]]; then
        awk -v a="${MEDIAN[cp-r]}" -v b="${MEDIAN[git-worktree]}" -v w="${MEDIAN[ws-overlay]}" \
            'BEGIN { printf "  cp-r / ws-overlay = %.0fx, git-worktree / ws-overlay = %.0fx\n", a / w, b / w }'
    fi
}
report | tee "$OUT/summary.txt"
echo
log "results in $OUT (summary.txt, one JSON or .ns file per figure, lib.stdout)"

if [[ $STRICT == 1 && $FAILED == 1 ]]; then
    exit 1
fi
