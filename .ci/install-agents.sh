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
# Progress goes to stderr; stdout carries only the result lines.
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

DIR="${CASSIST_AGENTS_DIR:-$HOME/.cache/cassist-agents}"
mode=lines
want=()
for a in "$@"; do
  case "$a" in
    --path) mode=path ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) want+=("$a") ;;
  esac
done

export npm_config_fund=false npm_config_audit=false \
       npm_config_update_notifier=false npm_config_loglevel=warn \
       DISABLE_TELEMETRY=1 DO_NOT_TRACK=1

log() { echo "install-agents: $*" >&2; }

for w in "${want[@]}"; do
  printf '%s\n' "${AGENTS[@]}" | awk '{print $1}' | grep -qx -- "$w" \
    || { log "unknown CLI: $w (known: $(printf '%s\n' "${AGENTS[@]}" | awk '{print $1}' | xargs))"; exit 2; }
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
for line in "${AGENTS[@]}"; do
  read -r cmd slot spec exe post <<<"$line"
  if ((${#want[@]})); then
    skip=1
    for w in "${want[@]}"; do [[ "$w" == "$cmd" ]] && skip=0; done
    ((skip)) && continue
  fi
  prefix="$DIR/$slot"
  if [[ ! -f "$prefix/.installed" ]]; then
    log "installing $spec into $prefix"
    tmp="$DIR/.tmp-$slot"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    start=$SECONDS
    # npm writes absolute paths only into node_modules/.bin links, which we do
    # not use, so installing in a temp folder and renaming it is safe.
    if ! nice -n 10 npm install --prefix "$tmp" --no-fund --no-audit \
         --no-update-notifier --no-save --no-package-lock "$spec" >&2; then
      rm -rf "$tmp"
      log "FAILED: npm install $spec"
      exit 1
    fi
    if [[ -n "${post:-}" ]] && ! (cd "$tmp" && node "$post" >&2); then
      rm -rf "$tmp"
      log "FAILED: node $post"
      exit 1
    fi
    chmod +x "$tmp/$exe" 2>/dev/null || true
    # The CLI must start (in a throwaway HOME, so it leaves no state behind).
    vhome="$(mktemp -d)"
    if ! version="$(HOME="$vhome" timeout 60 "$tmp/$exe" --version </dev/null 2>&1)"; then
      rm -rf "$tmp" "$vhome"
      log "FAILED: $exe --version: $version"
      exit 1
    fi
    rm -rf "$vhome"
    mkdir -p "$tmp/bin"
    ln -sfn "../$exe" "$tmp/bin/$cmd"
    echo "$spec" >"$tmp/.installed"
    rm -rf "$prefix"
    mv "$tmp" "$prefix"
    log "installed $spec ($version) in $((SECONDS - start))s ($(du -sh "$prefix" | cut -f1))"
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
