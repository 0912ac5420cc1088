# The command-line tests' harness, sourced by tests/cli_test.sh and tests/cli_text_test.sh after
# they set WORK (a scratch folder): run a command, record failure reasons, print TAP-like lines.
# shellcheck shell=bash

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
