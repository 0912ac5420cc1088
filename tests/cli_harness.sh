# The command-line tests' harness, sourced by tests/cli_*_test.sh: their set-up (cli_begin), then
# run a command, record failure reasons, print TAP-like lines.
# shellcheck shell=bash

# cli_begin NAME "TOOL..." "$@": the script's one argument is the build folder (BUILD, made
# absolute) holding every TOOL; else usage or what is missing on stderr and exit status 2. Then
# WORK, a scratch folder removed at exit, is the current folder.
cli_begin() {
  local name=$1 tools=$2 tool
  shift 2
  if [[ $# -ne 1 ]]; then
    echo "usage: $0 BUILD_DIR" >&2
    exit 2
  fi
  BUILD=$(cd "$1" && pwd) || exit 2
  for tool in $tools; do
    if [[ ! -x $BUILD/$tool ]]; then
      echo "$name: $BUILD/$tool is missing (build the tools first)" >&2
      exit 2
    fi
  done
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/mk-$name.XXXXXX") || exit 2
  trap 'rm -rf "$WORK"' EXIT
  cd "$WORK" || exit 2
}

PASSED=0
FAILED=0
WHY=()     # failure reasons of the current check
LAST=""    # the last command run, for failure reports
RC=0       # its exit status; its output is in $WORK/stdout and $WORK/stderr

TIMEOUT=()
command -v timeout >/dev/null && TIMEOUT=(timeout 60)

# run CMD...: runs a command, keeping its exit status in RC and its output in stdout/stderr.
run() {
  LAST="$*"
  "${TIMEOUT[@]}" "$@" >"$WORK/stdout" 2>"$WORK/stderr"
  RC=$?
}

# expect WHAT CMD...: records WHAT as a failure reason unless CMD succeeds.
expect() {
  local what=$1
  shift
  "$@" || WHY+=("$what")
}

begin() { WHY=(); LAST=""; }

# finish NAME: prints the check's line (and, on failure, the reasons and the last command's output).
finish() {
  if [[ ${#WHY[@]} -eq 0 ]]; then
    echo "ok - $1"
    PASSED=$((PASSED + 1))
    return
  fi
  echo "not ok - $1"
  FAILED=$((FAILED + 1))
  local reason
  for reason in "${WHY[@]}"; do echo "#   $reason"; done
  if [[ -n $LAST ]]; then
    echo "#   last command: $LAST (exit $RC)"
    sed -n '1,6s/^/#   stdout: /p' "$WORK/stdout"
    sed -n '1,6s/^/#   stderr: /p' "$WORK/stderr"
  fi
}

skip() {
  echo "ok - $1 # SKIP $2"
  PASSED=$((PASSED + 1))
}

rc_is() { [[ $RC -eq $1 ]]; }
out_has() { grep -Eq -- "$1" "$WORK/stdout"; }
err_has() { grep -Eiq -- "$1" "$WORK/stderr"; }
