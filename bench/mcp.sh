#!/usr/bin/env bash
# bench/mcp.sh: what does a dispatch through `cassist mcp` cost over
# `cassist run` of the same task written as a task file?
#
# One small project (a git repository, trusted, one context file) whose
# agent is a trivial custom command (`sh -c`: reads the prompt, writes a
# summary). Every measured dispatch has a goal of its own, so the agent
# runs each time (nothing comes from the cache). Figures, medians of RUNS
# runs after 2 warm-up runs:
#   run       `cassist run -q` of one `explore` task in a task file (a new
#             goal each run): the process's wall time
#   mcp       `dispatch_subagent` (agent_type explore, the same goal and
#             context) on one running `cassist mcp`, as a coordinator uses
#             it: from writing the request to reading its answer
#   mcp-cold  a fresh `cassist mcp`: start, initialize, one dispatch, end
# and `mcp - run`. Target: a dispatch costs at most 20 ms more than the run.
#
# Usage: bench/mcp.sh [--strict]
# Env:   BENCH_DIR   where the project goes (default: target/bench/mcp)
#        CASSIST     cassist binary (default: target/release/cassist, built
#                    with `cargo build --release` first)
#        RUNS        runs per figure (default: 20)
# With --strict, exits 1 when the target is missed.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_setup mcp.sh

STRICT=0
for arg in "$@"; do
    case $arg in
        --strict) STRICT=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "mcp.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
    esac
done

BENCH=$(abs "${BENCH_DIR:-$REPO/target/bench/mcp}")
RUNS=${RUNS:-20}
cassist_binary
have python3 || die "python3 is needed"
have git || die "git is needed"

log "project in $BENCH"
rm -rf "$BENCH"
mkdir -p "$BENCH/src" "$BENCH/tasks"
cat > "$BENCH/cassist.kdl" << 'EOF'
trust "workspace-write"
test #false
agent "fast" {
    command "sh" "-c" "cat > /dev/null; printf '{\"success\": true, \"summary\": \"done\"}' > \"$CASSIST_RESULT_FILE\""
}
defaults { agent "fast" }
EOF
printf 'def add(a, b):\n    return a + b\n' > "$BENCH/src/calc.py"
(cd "$BENCH" && git init -q && git add -A && git -c user.name=b -c user.email=b@b commit -qm init)

log "measuring ($RUNS runs a figure)"
python3 - "$CASSIST" "$BENCH" "$RUNS" "$STRICT" << 'EOF'
import json, os, statistics, subprocess, sys, time

cassist, project, runs, strict = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
env = {k: v for k, v in os.environ.items() if not k.startswith("CASSIST_")}
counter = iter(range(10**9))


def goal():
    return "Question %d: what does add() in src/calc.py return?" % next(counter)


def timed_run():
    n = next(counter)
    with open(os.path.join(project, "tasks", "q.kdl"), "w") as f:
        f.write('task "q%d" {\n    goal "%s"\n    kind "explore"\n    context {\n        file "src/calc.py"\n    }\n}\n' % (n, goal()))
    t0 = time.perf_counter_ns()
    subprocess.run([cassist, "run", "-q"], cwd=project, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter_ns() - t0


class Server:
    def __init__(self):
        self.p = subprocess.Popen([cassist, "mcp"], cwd=project, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def request(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                sys.exit("cassist mcp ended")
            msg = json.loads(line)
            if msg.get("id") == self.id:
                return msg

    def dispatch(self):
        args = {"agent_type": "explore", "task": goal(), "context": ["src/calc.py"]}
        t0 = time.perf_counter_ns()
        answer = self.request("tools/call", {"name": "dispatch_subagent", "arguments": args})
        took = time.perf_counter_ns() - t0
        result = answer.get("result") or {}
        if result.get("isError") or (result.get("_meta") or {}).get("cassist/state") != "passed":
            sys.exit("a dispatch did not pass: %s" % answer)
        return took

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def cold():
    t0 = time.perf_counter_ns()
    s = Server()
    s.dispatch()
    s.close()
    return time.perf_counter_ns() - t0


def median(f, warmup=2):
    for _ in range(warmup):
        f()
    return statistics.median(f() for _ in range(runs))


run = median(timed_run)
server = Server()
mcp = median(server.dispatch)
server.close()
mcp_cold = median(cold)
diff = mcp - run
ms = lambda ns: "%.1f ms" % (ns / 1e6)
print("cassist run (one explore task)      %s" % ms(run))
print("dispatch_subagent on a running mcp  %s" % ms(mcp))
print("mcp - run                           %s%s" % ("+" if diff >= 0 else "", ms(diff)))
print("fresh mcp: start, one dispatch, end %s" % ms(mcp_cold))
ok = diff <= 20e6
print("target (at most 20 ms more): %s" % ("met" if ok else "MISSED"))
if strict and not ok:
    sys.exit(1)
EOF
