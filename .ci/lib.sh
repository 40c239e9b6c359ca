# shellcheck shell=bash
# .ci/lib.sh: what the installers of .ci/ (install-agents.sh,
# install-servers.sh) share. Sourced, not run: each installer keeps its own
# list and what is particular to its packages, and hands the rest to
# `install_main "$@"`.
#
# The installer sets, before it calls install_main:
#   NAME    its name in messages ("install-agents")
#   WHAT    what a line of its list is, in messages ("CLI", "tool")
#   DIR     the cache folder: $DIR/<slot>/ per package@version, with
#           $DIR/<slot>/bin/<cmd> and $DIR/<slot>/.installed (a finished
#           install, holding its package spec)
#   ITEMS   its list, one line per package: "cmd slot FIELDS..."
# and defines two functions, called with the temp folder the package goes
# into and the line's FIELDS (what follows cmd and slot):
#   fetch TMP FIELDS...  installs it into TMP (progress on stderr); sets
#                        `spec` (the package spec) and `exe` (the
#                        executable, relative to TMP)
#   prove TMP FIELDS...  sees that the executable runs: sets `proof`
#                        (what it printed; the last line is logged)
# Both see `cmd`, `slot` and `prefix` ($DIR/<slot>, where the package goes
# once proven). Either one says what failed (with `log`) and returns
# non-zero: the temp folder goes, and the installer exits 1.
#
# Command line: names of cmds (only those), or --path (print a PATH prefix,
# BINDIR:BINDIR:...), or -h/--help (the installer's header comment);
# without --path it prints "cmd=BINDIR" per package. Progress goes to
# stderr; stdout carries only the result lines.

export npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false \
       DISABLE_TELEMETRY=1 DO_NOT_TRACK=1

log() { echo "$NAME: $*" >&2; }

# npm_install TMP SPEC: npm's install of SPEC with TMP as its prefix.
# npm writes absolute paths only into node_modules/.bin links, which are
# not used, so installing in a temp folder and renaming it is safe.
npm_install() {
  nice -n 10 npm install --prefix "$1" --no-fund --no-audit \
    --no-update-notifier --no-save --no-package-lock "$2" >&2
}

names() { printf '%s\n' "${ITEMS[@]}" | awk '{print $1}'; }

install_main() {
  local mode=lines a w
  local -a want=() paths=()
  for a in "$@"; do
    case "$a" in
      --path) mode=path ;;
      # The header comment of the installer (the lines after #!).
      -h|--help) awk 'NR > 1 { if (/^#/) print; else exit }' "$0"; exit 0 ;;
      *) want+=("$a") ;;
    esac
  done
  for w in "${want[@]}"; do
    names | grep -qx -- "$w" || { log "unknown $WHAT: $w (known: $(names | xargs))"; exit 2; }
  done

  mkdir -p "$DIR"
  # One installer at a time (tests may start several); leftovers of an
  # interrupted install are removed under the lock.
  if command -v flock >/dev/null; then
    exec 9>"$DIR/.lock"
    flock 9
  fi
  rm -rf "$DIR"/.tmp-* 2>/dev/null || true
  local line cmd slot fields prefix tmp start skip
  for line in "${ITEMS[@]}"; do
    read -r cmd slot fields <<<"$line"
    if ((${#want[@]})); then
      skip=1
      for w in "${want[@]}"; do [[ "$w" == "$cmd" ]] && skip=0; done
      ((skip)) && continue
    fi
    prefix="$DIR/$slot"
    if [[ ! -f "$prefix/.installed" ]]; then
      tmp="$DIR/.tmp-$slot"
      rm -rf "$tmp"
      mkdir -p "$tmp"
      start=$SECONDS
      spec='' exe='' proof=''
      # shellcheck disable=SC2086 # the line's fields, one word each
      if ! fetch "$tmp" $fields; then
        rm -rf "$tmp"
        exit 1
      fi
      chmod +x "$tmp/$exe" 2>/dev/null || true
      # shellcheck disable=SC2086
      if ! prove "$tmp" $fields </dev/null; then
        rm -rf "$tmp"
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
}
