# bench/lib.sh: what the benchmark scripts share. Sourced, not run.
#
#   bench_setup NAME     REPO, helpers (log, die, have, abs, ms, now_ns)
#   cassist_binary       CASSIST: the given binary, else a release build
#   turbo_binary         TURBO: the given binary, else turbo 2.x installed
#                        with npm into target/bench/turbo
#   median_ns NAME RUNS WARMUP PREPARE CMD
#                        the median wall time of CMD (a shell command line)
#                        in nanoseconds, PREPARE (a shell command line,
#                        or empty) run before each run; hyperfine if there
#                        is one (without a shell when PREPARE is empty),
#                        else a date loop
#   monorepo DIR FLAVOR TASKS FILES
#                        the monorepo of bench/cache.sh and bench/scale.sh:
#                        TASKS packages of FILES small source files each,
#                        as a cassist project (FLAVOR cassist: one task
#                        per package) or an npm workspace for turbo (FLAVOR
#                        turbo: one build script per package); committed
#                        to a fresh git repository
#
# Environment read here: CASSIST, TURBO, HYPERFINE (a binary, or "none"),
# OUT (where median_ns leaves its raw figures).

bench_setup() {
    BENCH_NAME=$1
    REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    HYPERFINE=${HYPERFINE:-hyperfine}
    # turbo must not phone home.
    export TURBO_TELEMETRY_DISABLED=1 DO_NOT_TRACK=1 TURBO_NO_UPDATE_NOTIFIER=1
    unset TURBO_API TURBO_TOKEN TURBO_TEAM TURBO_REMOTE_CACHE_SIGNATURE_KEY 2> /dev/null || true
}

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf '%s: %s\n' "${BENCH_NAME:-bench}" "$*" >&2; exit 1; }
have() { command -v "$1" > /dev/null 2>&1; }
now_ns() { date +%s%N; }
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
ms() { awk -v ns="$1" 'BEGIN { printf "%.1f ms", ns / 1e6 }'; }
secs() { awk -v ns="$1" 'BEGIN { printf "%.2f s", ns / 1e9 }'; }

cassist_binary() {
    if [[ -z ${CASSIST:-} ]]; then
        log "cargo build --release"
        (cd "$REPO" && nice cargo build --release --quiet)
        CASSIST=$REPO/target/release/cassist
    fi
    CASSIST=$(abs "$CASSIST")
    [[ -x $CASSIST ]] || die "$CASSIST is not an executable"
}

# turbo (npm package `turbo`, 2.x) never phones home here: telemetry and
# the update notifier are off, the workspaces are linked to no remote cache
# and TURBO_API/TURBO_TOKEN/TURBO_TEAM are unset.
turbo_binary() {
    if [[ -z ${TURBO:-} ]]; then
        local prefix=$REPO/target/bench/turbo
        TURBO=$prefix/node_modules/.bin/turbo
        if [[ ! -x $TURBO ]]; then
            have npm || die "npm is needed to install turbo (or pass --no-turbo, or TURBO=/path/to/turbo)"
            log "npm install --prefix $prefix turbo@2"
            npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error turbo@2 > /dev/null
        fi
    fi
    TURBO=$(abs "$TURBO")
    [[ -x $TURBO ]] || die "$TURBO is not an executable"
}

median_ns() {
    local name=$1 runs=$2 warmup=$3 prep=$4 cmd=$5
    if [[ $HYPERFINE != none ]] && have "$HYPERFINE"; then
        # Without a PREPARE, no shell: a figure of a few milliseconds
        # keeps no shell start-up.
        local how=(-N)
        [[ -z $prep ]] || how=(--prepare "$prep")
        "$HYPERFINE" --style none --runs "$runs" --warmup "$warmup" "${how[@]}" \
            --export-json "$OUT/$name.json" -- "$cmd" > /dev/null 2> "$OUT/$name.err" \
            || { cat "$OUT/$name.err" >&2; die "timing $name failed: $cmd"; }
        python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["results"][0]["median"] * 1e9))' \
            "$OUT/$name.json"
    else
        local i t0 t1
        for ((i = 0; i < warmup; i++)); do
            (eval "$prep") > /dev/null 2>&1
            (eval "$cmd") > /dev/null 2>&1
        done
        for ((i = 0; i < runs; i++)); do
            (eval "$prep") > /dev/null 2>&1
            t0=$(now_ns)
            (eval "$cmd") > /dev/null 2>&1
            t1=$(now_ns)
            echo $((t1 - t0))
        done | sort -n > "$OUT/$name.ns"
        # The median: the middle value, or the mean of the two middle ones.
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }' \
            "$OUT/$name.ns"
    fi
}

# The agent of every task of the cassist flavor: writes
# packages/<task>/out.txt and reports success.
MONOREPO_AGENT=$(
    cat << 'EOF'
printf 'built by %s\n' "$CASSIST_TASK" > "packages/$CASSIST_TASK/out.txt" && printf '{"success": true, "summary": "wrote packages/%s/out.txt"}\n' "$CASSIST_TASK" > "$CASSIST_RESULT_FILE"
EOF
)

monorepo() {
    local dir=$1 flavor=$2 tasks=$3 files=$4
    rm -rf "$dir"
    mkdir -p "$dir"
    NPM_VERSION=$(npm --version 2> /dev/null || echo 10.0.0) python3 - "$dir" "$flavor" "$tasks" "$files" "$MONOREPO_AGENT" << 'PY'
import json, os, sys

root, flavor, tasks, files, agent = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

def write(path, text):
    path = os.path.join(root, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)

for i in range(tasks):
    name = f"p{i:04d}"
    for k in range(files):
        write(f"packages/{name}/src/f{k:02d}.txt", f"source {k} of {name}: line one\nline two\n")
    write(f"packages/{name}/package.json", json.dumps({
        "name": name, "version": "1.0.0", "private": True,
        "scripts": {"build": f"mkdir -p dist && printf 'built by {name}\\n' > dist/out.txt"},
    }, indent=2) + "\n")
    if flavor == "cassist":
        write(f"tasks/{name}.kdl", f'''task "{name}" {{
    goal "Write packages/{name}/out.txt from its sources."
    context {{
        file "packages/{name}/src/*.txt"
    }}
    scope {{
        path "packages/{name}/out.txt"
    }}
}}
''')

write(".gitignore", "node_modules/\n.turbo/\ndist/\n")
if flavor == "cassist":
    write("cassist.kdl", f'''trust "workspace-write"
test #false
defaults {{
    agent "write"
}}
agent "write" {{
    command "sh" "-c" #"{agent}"#
}}
''')
else:
    write("package.json", json.dumps({
        "name": "bench-root", "private": True, "packageManager": "npm@" + os.environ.get("NPM_VERSION", "10.0.0"),
        "workspaces": ["packages/*"],
    }, indent=2) + "\n")
    write("turbo.json", json.dumps({
        "$schema": "https://turbo.build/schema.json", "tasks": {"build": {"outputs": ["dist/**"]}},
    }, indent=2) + "\n")
PY
    if [[ $flavor == turbo ]]; then
        # A lockfile (workspace links only, nothing from the registry):
        # turbo's usual, fastest setting.
        (cd "$dir" && npm install --offline --no-audit --no-fund --ignore-scripts --loglevel=error > /dev/null)
    fi
    git_commit "$dir"
}

# git_commit DIR: DIR becomes a git repository with everything committed.
git_commit() {
    (cd "$1" && git init -q && git add -A \
        && git -c user.name=bench -c user.email=bench@localhost -c commit.gpgsign=false commit -qm init)
}
