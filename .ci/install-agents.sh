#!/usr/bin/env bash
# Installs the pinned coding-agent CLIs that the end-to-end tests drive, with
# npm, into a cache folder: one npm prefix per package@version, so versions
# never mix. Skips what is already installed, so it is idempotent and works
# offline once everything is cached (npm is not even started then).
#
#   .ci/install-agents.sh              install all, print "cmd=BINDIR" per CLI
#   .ci/install-agents.sh claude droid only those (by cmd name)
#   .ci/install-agents.sh --path       print a PATH prefix (BINDIR:BINDIR:...)
#
# Cache folder: ${CASSIST_AGENTS_DIR:-$HOME/.cache/cassist-agents}.
# Layout: $DIR/<slot>/ is the npm prefix, $DIR/<slot>/bin/<cmd> a symlink to
# the CLI's executable, $DIR/<slot>/.installed marks a finished install.
# Only the npm registry is contacted (npm's fund/audit/update checks are off).
# Progress goes to stderr; stdout carries only the result lines. What the
# installers share is in .ci/lib.sh.
set -euo pipefail

# ---------------------------------------------------------------------------
# The list: one line per CLI.
#   cmd   slot (prefix folder name)   npm package@version   executable, relative to the prefix
#   [postinstall script, relative to the prefix, run with node after npm: for
#    packages whose own postinstall npm may skip (npm 11 install-scripts)]
# Keep it one line per package; nothing else in this script is per-CLI.
AGENTS=(
  # --- Anthropic side (Claude Code; Droid with an Anthropic custom model) ---
  "claude  claude-code-2.1.197  @anthropic-ai/claude-code@2.1.197  node_modules/@anthropic-ai/claude-code/bin/claude.exe  node_modules/@anthropic-ai/claude-code/install.cjs"
  "droid   droid-0.225.2        @factory/cli-linux-x64@0.225.2     node_modules/@factory/cli-linux-x64/bin/droid"
  # --- OpenAI Responses side (Codex) ---
  "codex   codex-0.171.0        @openai/codex@0.171.0              node_modules/@openai/codex/bin/codex.js"
  # --- Gemini side ---
  "gemini  gemini-cli-0.61.0    @google/gemini-cli@0.61.0          node_modules/@google/gemini-cli/bundle/gemini.js"
)
# ---------------------------------------------------------------------------

NAME=install-agents WHAT=CLI ITEMS=("${AGENTS[@]}")
DIR="${CASSIST_AGENTS_DIR:-$HOME/.cache/cassist-agents}"
# shellcheck source=.ci/lib.sh
. "$(dirname "$0")/lib.sh"
export npm_config_loglevel=warn

# fetch TMP SPEC EXE [POST]: npm's install, then the postinstall script.
fetch() {
  local tmp="$1" post="${4:-}"
  spec="$2" exe="$3"
  log "installing $spec into $prefix"
  if ! npm_install "$tmp" "$spec"; then
    log "FAILED: npm install $spec"
    return 1
  fi
  if [[ -n "$post" ]] && ! (cd "$tmp" && node "$post" >&2); then
    log "FAILED: node $post"
    return 1
  fi
}

# prove TMP ...: the CLI must start (in a throwaway HOME, so it leaves no
# state behind) and say its version.
prove() {
  local vhome ok=0
  vhome="$(mktemp -d)"
  proof="$(HOME="$vhome" timeout 60 "$1/$exe" --version 2>&1)" || ok=1
  rm -rf "$vhome"
  ((ok == 0)) || log "FAILED: $exe --version: $proof"
  return "$ok"
}

install_main "$@"
