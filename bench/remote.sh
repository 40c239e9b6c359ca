#!/usr/bin/env bash
# bench/remote.sh: what does the team cache (issue 15) cost and save, against
# a real S3 server on loopback (SeaweedFS's `weed server`, from
# .ci/install-servers.sh)?
#
# (a) Replay from the remote, REPLAY_TASKS tasks (default 100) of the
#     monorepo of bench/lib.sh, one task per package, whose agent sleeps
#     AGENT_DELAY seconds (default 2) before it writes its file: a stand-in
#     for a real agent, which takes minutes:
#       run      clone A: `cassist run -j JOBS` with the signing key: every
#                agent runs, every task is pushed (uploads awaited at the end)
#       remote   clone B, fresh (empty store, none of the changes):
#                `cassist run --locked -j JOBS` with read-only credentials:
#                every task replays from the remote, no agent
#       local    clone B again, checkout restored: `cassist run -j JOBS`
#                replays the same entries from its local store (and writes
#                cassist.lock)
# (b) The added cost of `cassist plan` on PLAN_TASKS tasks (default 1000),
#     none recorded locally, so each is looked up remotely:
#       plan-off      CASSIST_REMOTE=off (no remote), median of RUNS
#       plan-miss     the remote holds none of them (every lookup misses),
#                     median of RUNS
#       plan-fill     the remote holds all of them (pushed by one run of a
#                     no-delay agent): the first plan of a fresh clone,
#                     which fetches and verifies entries into the store
#                     (as many as its lookup budget allows), and how many
#       pull          `cache pull` again until no task is left to run:
#                     how many pulls, how long in all
#       plan-filled   the plans after it, everything local, median of RUNS
#     Target (issue 15): plan-miss - plan-off <= 1 s.
#
# Usage: bench/remote.sh [--no-replay] [--no-plan] [--no-fill]
# Env:   BENCH_DIR    where projects and the server's data go (default: target/bench/remote)
#        CASSIST      cassist binary (default: target/release/cassist, built first)
#        HYPERFINE    hyperfine binary, or "none" for a date +%s%N loop
#        RUNS         runs per median (default: 5)
#        REPLAY_TASKS, AGENT_DELAY, JOBS (default: 4), PLAN_TASKS
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup remote

DO_REPLAY=1 DO_PLAN=1 DO_FILL=1
for arg in "$@"; do
    case $arg in
        --no-replay) DO_REPLAY=0 ;;
        --no-plan) DO_PLAN=0 ;;
        --no-fill) DO_FILL=0 ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument: $arg (try --help)" ;;
    esac
done

DIR=$(abs "${BENCH_DIR:-$REPO/target/bench/remote}")
OUT=$DIR/results
RUNS=${RUNS:-5}
REPLAY_TASKS=${REPLAY_TASKS:-100}
AGENT_DELAY=${AGENT_DELAY:-2}
JOBS=${JOBS:-4}
PLAN_TASKS=${PLAN_TASKS:-1000}

cassist_binary
have curl || die "curl is needed (S3 requests to the server)"
WEED=$("$REPO/.ci/install-servers.sh" weed | sed -n 's/^weed=//p')/weed
[[ -x $WEED ]] || die "weed not installed: $WEED"

rm -rf "$DIR"
mkdir -p "$DIR" "$OUT"

# ---------------------------------------------------------------------------
# The server: as tests/it/support/servers.rs starts it.

KEY=bench-writer SECRET=bench-writer-secret RKEY=bench-reader RSECRET=bench-reader-secret
read -r -a PORTS <<< "$(python3 -c '
import socket
socks = [socket.socket() for _ in range(8)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
S3_PORT=${PORTS[6]}
ENDPOINT=http://127.0.0.1:$S3_PORT
mkdir -p "$DIR/s3/data" "$DIR/s3/tmp"
cat > "$DIR/s3/s3.json" << EOF
{"identities": [
  {"name": "writer", "credentials": [{"accessKey": "$KEY", "secretKey": "$SECRET"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
  {"name": "reader", "credentials": [{"accessKey": "$RKEY", "secretKey": "$RSECRET"}], "actions": ["Read", "List"]}
]}
EOF
log "weed server on $ENDPOINT"
TMPDIR=$DIR/s3/tmp setsid "$WEED" -logtostderr=true server -ip=127.0.0.1 -ip.bind=127.0.0.1 -filer -s3 \
    -dir="$DIR/s3/data" -master.port="${PORTS[0]}" -master.port.grpc="${PORTS[1]}" \
    -volume.port="${PORTS[2]}" -volume.port.grpc="${PORTS[3]}" -filer.port="${PORTS[4]}" \
    -filer.port.grpc="${PORTS[5]}" -s3.port="$S3_PORT" -s3.port.grpc="${PORTS[7]}" \
    -webdav=false -iam=false -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false \
    -master.volumeSizeLimitMB=64 -volume.max=16 -volume.minFreeSpace=1MiB -volume.preStopSeconds=0 \
    -s3.config="$DIR/s3/s3.json" -filer.localSocket="$DIR/s3/filer.sock" > "$DIR/s3/log" 2>&1 &
WEED_PID=$!
cleanup() {
    kill -KILL -- "-$WEED_PID" 2> /dev/null || kill -KILL "$WEED_PID" 2> /dev/null || true
    for p in "${PORTS[@]}"; do rm -f /tmp/seaweedfs-*-"$p".sock; done
}
trap cleanup EXIT
sign=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$KEY:$SECRET")
for ((i = 0; i < 600; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "${sign[@]}" "$ENDPOINT/bench" || true)
    [[ $code == 200 || $code == 409 ]] && break
    kill -0 "$WEED_PID" 2> /dev/null || { tail -20 "$DIR/s3/log" >&2; die "weed exited"; }
    sleep 0.1
done
[[ $code == 200 || $code == 409 ]] || die "the bucket could not be made ($code)"

export AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$ENDPOINT
WRITER=(env AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET)
READER=(env AWS_ACCESS_KEY_ID=$RKEY AWS_SECRET_ACCESS_KEY=$RSECRET)
PAIR=$("$CASSIST" cache keygen)
PUBLIC=$(sed -n 's/^public //p' <<< "$PAIR")
SIGNING=$(sed -n 's/^secret //p' <<< "$PAIR")

# origin DIR TASKS DELAY PREFIX: the monorepo, its agent sleeping DELAY s,
# its cassist.kdl naming the remote (bucket `bench`, PREFIX) and the key.
origin() {
    local dir=$1 tasks=$2 delay=$3 prefix=$4
    monorepo "$dir" cassist "$tasks" 1
    (
        cd "$dir"
        [[ $delay == 0 ]] || sed -i "s|command \"sh\" \"-c\" #\"|command \"sh\" \"-c\" #\"sleep $delay \&\& |" cassist.kdl
        cat >> cassist.kdl << EOF
cache {
    remote "s3://bench/$prefix" endpoint="$ENDPOINT" region="us-east-1"
    trusted-key "$PUBLIC"
}
EOF
        echo "/.cassist/" >> .gitignore
        git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm remote
    )
}

clone() { rm -rf "$2" && git clone -q "$1" "$2"; }

# timed NAME CMD...: runs CMD once in the current folder; its wall time in
# ns on stdout; fails the bench when CMD fails.
timed() {
    local name=$1 t0 t1
    shift
    t0=$(now_ns)
    "$@" > "$OUT/$name.log" 2>&1 || { tail -30 "$OUT/$name.log" >&2; die "$name failed: $*"; }
    t1=$(now_ns)
    echo $((t1 - t0))
}

# entries PREFIX: how many entries the remote holds under PREFIX.
entries() {
    curl -s "${sign[@]}" "$ENDPOINT/bench?list-type=2&max-keys=1000&prefix=$1%2Fentries%2F" \
        | { grep -o '<Key>' || true; } | wc -l
}

SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
say() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
say "bench/remote.sh $(date -u +%FT%TZ) on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
say "cassist: $CASSIST; server: $("$WEED" version 2> /dev/null | head -n1)"

if ((DO_REPLAY)); then
    log "(a) $REPLAY_TASKS tasks, agent delay ${AGENT_DELAY}s, -j $JOBS"
    origin "$DIR/replay" "$REPLAY_TASKS" "$AGENT_DELAY" replay
    clone "$DIR/replay" "$DIR/replay-a"
    clone "$DIR/replay" "$DIR/replay-b"
    run_ns=$(cd "$DIR/replay-a" && timed run "${WRITER[@]}" CASSIST_CACHE_SIGNING_KEY="$SIGNING" "$CASSIST" run -q -j "$JOBS")
    pushed=$(entries replay)
    [[ $pushed == "$REPLAY_TASKS" ]] || die "$pushed entries on the remote, not $REPLAY_TASKS"
    remote_ns=$(cd "$DIR/replay-b" && timed remote "${READER[@]}" "$CASSIST" run -q --locked -j "$JOBS")
    changed=$(cd "$DIR/replay-b" && git status --porcelain -- packages | wc -l)
    [[ $changed == "$REPLAY_TASKS" ]] || die "the remote replay changed $changed files, not $REPLAY_TASKS"
    (cd "$DIR/replay-b" && git checkout -q -- . && git clean -fdq -e .cassist)
    local_ns=$(cd "$DIR/replay-b" && timed local "${READER[@]}" "$CASSIST" run -q -j "$JOBS")
    say ""
    say "(a) $REPLAY_TASKS tasks, agent ${AGENT_DELAY}s each, -j $JOBS"
    say "    run (agents, signed pushes)        $(secs "$run_ns")"
    say "    replay from the remote, fresh      $(secs "$remote_ns")   ($(awk -v a="$run_ns" -v b="$remote_ns" 'BEGIN { printf "%.1fx faster", a / b }'))"
    say "    replay from the local store        $(secs "$local_ns")"
fi

if ((DO_PLAN)); then
    log "(b) plan of $PLAN_TASKS tasks"
    origin "$DIR/plan" "$PLAN_TASKS" 0 plan
    clone "$DIR/plan" "$DIR/plan-c"
    cd "$DIR/plan-c"
    "$CASSIST" plan > /dev/null 2>&1 || true # file-hash cache warm, like the plans after it
    off_ns=$(median_ns plan-off "$RUNS" 1 "" "env CASSIST_REMOTE=off $CASSIST plan")
    miss_ns=$(median_ns plan-miss "$RUNS" 1 "" "env AWS_ACCESS_KEY_ID=$RKEY AWS_SECRET_ACCESS_KEY=$RSECRET $CASSIST plan")
    say ""
    say "(b) plan of $PLAN_TASKS tasks, none recorded locally"
    say "    no remote (CASSIST_REMOTE=off)     $(ms "$off_ns")"
    say "    remote, every lookup misses        $(ms "$miss_ns")   (+$(ms $((miss_ns - off_ns))))"
    if ((DO_FILL)); then
        log "pushing $PLAN_TASKS entries (one run of a no-delay agent)"
        clone "$DIR/plan" "$DIR/plan-a"
        fill_run_ns=$(cd "$DIR/plan-a" && timed plan-push "${WRITER[@]}" CASSIST_CACHE_SIGNING_KEY="$SIGNING" "$CASSIST" run -q -j "$JOBS")
        pushed=$(entries plan)
        clone "$DIR/plan" "$DIR/plan-f"
        cd "$DIR/plan-f"
        fill_ns=$(timed plan-fill "${READER[@]}" "$CASSIST" plan)
        replays=$(grep -c 'replay (remote)' "$OUT/plan-fill.log" || true)
        # The rest, as a user would fetch it: `cache pull` until nothing
        # is left to run (each command has the same lookup budget).
        pulls=0 left=1 t0=$(now_ns)
        while ((left > 0 && pulls < 40)); do
            pulls=$((pulls + 1))
            "${READER[@]}" "$CASSIST" cache pull > "$OUT/pull-$pulls.log" 2>&1 || true
            left=$(sed -n 's/.*; \([0-9]*\) task(s) still to run.*/\1/p' "$OUT/pull-$pulls.log")
            left=${left:-1}
        done
        pull_ns=$(($(now_ns) - t0))
        filled_ns=$(median_ns plan-filled "$RUNS" 1 "" "env AWS_ACCESS_KEY_ID=$RKEY AWS_SECRET_ACCESS_KEY=$RSECRET $CASSIST plan")
        say "    remote holds all ($pushed entries; pushed by a run of $(secs "$fill_run_ns")):"
        say "      first plan of a fresh clone      $(secs "$fill_ns")   ($replays of $PLAN_TASKS tasks fetched: replay (remote))"
        say "      then \`cache pull\` until done    $(secs "$pull_ns")   ($pulls pulls, $left task(s) left to run)"
        say "      plans after it (all local)       $(ms "$filled_ns")"
    fi
fi
say ""
say "raw figures: $OUT"
