#!/usr/bin/env bash
# Command-line tests for mkplan, mkrun and mkweights: --help, the happy path on the tiny model
# (CPU emulator), and the error paths, which must each end in exit status 1 with one line on
# stderr that starts with the tool's name (never a crash, never a silent success).
#
# Usage: tests/cli_test.sh BUILD_DIR   (BUILD_DIR holds mkplan, mkrun and mkweights)
# Prints "ok - ..." / "not ok - ..." per check, then "N passed, M failed"; exit status 1 on failure.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 2
# shellcheck source=tests/cli_harness.sh
source "$ROOT/tests/cli_harness.sh"
cli_begin cli_test "mkplan mkrun mkweights" "$@"
MKPLAN=$BUILD/mkplan
MKRUN=$BUILD/mkrun
MKWEIGHTS=$BUILD/mkweights
FIXTURE=$BUILD/mk_eos_fixture  # optional: a checkpoint with a tokenizer, for the text checks
LLAMA=$ROOT/examples/tiny-llama.yaml
QWEN=$ROOT/examples/tiny-qwen3.yaml
VOCAB=512  # tiny-llama's vocabulary

# --- harness -------------------------------------------------------------------------------------

err_lines() { [[ $(wc -l <"$WORK/stderr") -eq $1 ]]; }
err_starts() { [[ $(head -n 1 "$WORK/stderr") == "$1: "* ]]; }
lacks() { ! grep -q -- "$1" "$2"; }
no_tokens() { ! grep -q '^tokens:' "$WORK/stdout"; }

# clean_error TOOL PATTERN: the last command failed the way every tool error must: exit status 1
# (not a crash, not success), exactly one line on stderr, starting "TOOL: " and matching PATTERN
# (extended regex, case-insensitive).
clean_error() {
  local tool=$1 pattern=$2
  if [[ $RC -ge 128 ]]; then
    WHY+=("crashed: exit status $RC (signal $((RC - 128)))")
  elif [[ $RC -eq 124 && ${#TIMEOUT[@]} -gt 0 ]]; then
    WHY+=("timed out")
  else
    expect "exit status is $RC, expected 1" rc_is 1
  fi
  expect "stderr has $(wc -l <"$WORK/stderr") lines, expected exactly 1" err_lines 1
  expect "stderr does not start with '$tool: '" err_starts "$tool"
  expect "stderr does not match /$pattern/" err_has "$pattern"
}

# err_is TEXT: stderr is exactly the one line TEXT.
err_is() { [[ $(cat "$WORK/stderr") == "$1" ]]; }
# exact_error TOOL MESSAGE: the last command failed cleanly (see clean_error) with exactly
# "TOOL: MESSAGE" on stderr, and printed no "wrote".
exact_error() {
  clean_error "$1" '.'
  expect "stderr is not exactly '$1: $2'" err_is "$1: $2"
  expect "stdout says it wrote something" no_wrote
}
no_wrote() { ! grep -q 'wrote' "$WORK/stdout"; }
# plan_refused MODEL: mkplan MODEL -o x.bin, which must leave no x.bin (the caller checks the message).
plan_refused() {
  rm -f x.bin
  run "$MKPLAN" "$1" -o x.bin
  expect "x.bin was written" test ! -e x.bin
}
# no_temporaries: nothing a tool wrote to a temporary is left in the work folder.
no_temporaries() { [[ -z $(find "$WORK" -name '*.tmp*' ! -name 'planted.bin.tmp') ]]; }

# tokens_of FILE: the ids of the "tokens:" line of an mkrun stdout.
tokens_of() { grep -m1 '^tokens:' "$1" | cut -d: -f2-; }

# --- fixtures (built once; checks that need them fail cleanly when they are missing) -------------

"$MKPLAN" "$LLAMA" -o s.bin --sms 8 -q >/dev/null 2>&1
"$MKWEIGHTS" s.bin -o w --seed 3 >/dev/null 2>&1
have_fixtures() { [[ -s s.bin && -s w/model.safetensors ]]; }

# --- --help --------------------------------------------------------------------------------------

# help_mentions TOOL OPTION...: TOOL --help exits 0 and names every OPTION.
help_mentions() {
  local name=$1 path=$2
  shift 2
  begin
  run "$path" --help
  expect "exit status is $RC, expected 0" rc_is 0
  local opt
  for opt in "$@"; do
    expect "--help does not mention $opt" out_has "(^|[^-[:alnum:]])$opt([^-[:alnum:]]|$)"
  done
  finish "$name --help exits 0 and mentions $*"
}

check_help() {
  help_mentions mkplan "$MKPLAN" --sms --policy --dot --dot-level --dot-expand --dot-layers --dot-ops --output --emit-yaml --sample --force --version
  help_mentions mkrun "$MKRUN" --prompt-ids --tokens --backend --max-context --dump-logits --order --seed --trace --watchdog --interactive --speculate --force --version
  help_mentions mkweights "$MKWEIGHTS" --seed --out --force --version
}

# help_layout TOOL: --help starts with "Usage: TOOL " and ends with an Examples section of TOOL
# command lines, each followed by what it does.
help_layout() {
  local name=$1 path=$2
  begin
  run "$path" --help
  expect "exit status is $RC, expected 0" rc_is 0
  expect "--help does not start with 'Usage: $name '" test "$(head -n 1 "$WORK/stdout" | cut -c1-$((8 + ${#name})))" == "Usage: $name "
  local after
  after=$(sed -n '/^Examples:$/,$p' "$WORK/stdout")
  expect "--help has no Examples: section" test -n "$after"
  expect "the Examples: section has no '  $name ...' line" grep -Eq "^  $name [^ ]" <<<"$after"
  expect "an example is not followed by what it does" grep -Eq "^      [a-z]" <<<"$after"
  expect "the Examples: section is not the last" test "$(grep -c '^[A-Z][A-Za-z]*:' <<<"$after")" -eq 1
  finish "$name --help: a usage line first, an Examples section last"
}

# version_says TOOL: --version exits 0 with one first line naming the tool and the project, and
# the schedule format.
version_says() {
  local name=$1 path=$2
  begin
  run "$path" --version
  expect "exit status is $RC, expected 0" rc_is 0
  expect "the first line does not name $name and megakernel" out_has "^$name, megakernel "
  expect "the first line has no version number" out_has "^$name, megakernel [0-9]+\.[0-9]+\.[0-9]+"
  expect "--version does not name the schedule format" out_has 'schedule formats? [0-9]'
  expect "stderr is not empty" err_lines 0
  finish "$name --version names the tool, the project (version and commit where the build gives them) and the schedule format"
}

# suggests TOOL PATH ARGS...: a mistyped option is one line naming it and what was meant.
check_typos() {
  begin
  run "$MKRUN" s.bin w --tokns 4
  exact_error mkrun "unknown option --tokns; did you mean --tokens? (see --help)"
  run "$MKRUN" s.bin w --temp 0.7
  exact_error mkrun "unknown option --temp; did you mean --temperature? (see --help)"
  run "$MKPLAN" "$LLAMA" -o typo.bin --dot-level task --dot-layer 1
  exact_error mkplan "unknown option --dot-layer; did you mean --dot-layers? (see --help)"
  expect "typo.bin was written" test ! -e typo.bin
  run "$MKWEIGHTS" s.bin -o typo-w --sede 3
  exact_error mkweights "unknown option --sede; did you mean --seed? (see --help)"
  run "$MKPLAN" "$LLAMA" -o typo.bin --frobnicate
  exact_error mkplan "unknown option --frobnicate (see --help)"
  finish "a mistyped long option is one line naming it, with a suggestion when one is near"
}

# --- happy path ----------------------------------------------------------------------------------

check_plan() {
  begin
  run "$MKPLAN" "$LLAMA" -o plan.bin --sms 8 --dot d.dot
  expect "exit status is $RC, expected 0" rc_is 0
  expect "stdout does not mention tasks" out_has 'tasks'
  expect "stdout does not mention the critical path" out_has 'critical path'
  expect "stdout does not report 8 SMs" out_has '8 SMs'
  expect "plan.bin was not written" test -s plan.bin
  expect "plan.bin differs from the same plan made quietly (s.bin)" cmp -s plan.bin s.bin
  expect "d.dot is not a Graphviz digraph" grep -q '^digraph' d.dot
  expect "stderr is not empty" err_lines 0
  finish "mkplan tiny-llama -o --sms 8 --dot: summary with tasks and critical path, schedule and DOT written"
}

check_dot_renders() {
  if ! command -v dot >/dev/null; then
    skip "dot -Tsvg renders mkplan's DOT" "Graphviz dot not installed"
    return
  fi
  begin
  if [[ ! -s d.dot ]]; then
    WHY+=("d.dot missing (mkplan --dot failed above)")
  else
    run dot -Tsvg d.dot -o d.svg
    expect "dot exited $RC" rc_is 0
    expect "d.svg is not an SVG" grep -q '<svg' d.svg
  fi
  finish "dot -Tsvg renders mkplan's DOT"
}

check_dot_task_level() {
  begin
  run "$MKPLAN" "$LLAMA" -o plan_task.bin --sms 8 --dot task.dot --dot-level task
  expect "exit status is $RC, expected 0" rc_is 0
  expect "task.dot is not a Graphviz digraph" grep -q '^digraph' task.dot
  local op_edges task_edges
  op_edges=$(grep -c -- '->' d.dot 2>/dev/null)
  task_edges=$(grep -c -- '->' task.dot 2>/dev/null)
  expect "task-level DOT has ${task_edges:-0} edges, not more than the op level's ${op_edges:-0}" \
    test "${task_edges:-0}" -gt "${op_edges:-0}"
  finish "mkplan --dot-level task writes a finer DOT than --dot-level op"
}

# --- pictures --------------------------------------------------------------------------------

# renders_quickly NAME DOT_FILE [MAX_PX]: dot -Tsvg renders it in under 10 s, and (with MAX_PX)
# its long side at 96 dpi is under MAX_PX pixels.
renders_quickly() {
  local name=$1 file=$2 max_px=${3:-}
  if [[ ! -s $file ]]; then
    WHY+=("$file missing")
    return
  fi
  local t0 t1 ms
  t0=$(date +%s%N)
  run dot -Tsvg "$file" -o "$file.svg"
  t1=$(date +%s%N)
  ms=$(((t1 - t0) / 1000000))
  expect "dot on $name exited $RC" rc_is 0
  expect "dot on $name took $ms ms, not under 10 s" test "$ms" -lt 10000
  if [[ -n $max_px ]]; then
    # Graphviz writes width="NNNpt" height="NNNpt"; 96 dpi is 4/3 px per pt.
    local size w h long
    size=$(grep -m1 -o 'width="[0-9.]*pt" height="[0-9.]*pt"' "$file.svg")
    w=$(sed -E 's/width="([0-9]+).*/\1/' <<<"$size")
    h=$(sed -E 's/.*height="([0-9]+).*/\1/' <<<"$size")
    long=$(((w > h ? w : h) * 4 / 3))
    expect "$name is $((w * 4 / 3)) x $((h * 4 / 3)) px at 96 dpi, not under $max_px on its long side" test "$long" -lt "$max_px"
  fi
  echo "#   $name: dot -Tsvg ${ms} ms${long:+, long side $long px at 96 dpi}"
}

check_pictures() {
  if ! command -v dot >/dev/null; then
    skip "every picture renders with dot in under 10 s" "Graphviz dot not installed"
    return
  fi
  begin
  local model
  for model in "$ROOT"/examples/*.yaml; do
    local name
    name=$(basename "$model" .yaml)
    run "$MKPLAN" "$model" -o "pic-$name.bin" -q --dot "pic-$name.dot"
    expect "mkplan $name --dot exited $RC" rc_is 0
    renders_quickly "$name op level" "pic-$name.dot" 4000
    expect "$name op level does not mark its repeated block" grep -q 'label="× [0-9]* (layers 0–' "pic-$name.dot"
  done
  run "$MKPLAN" "$LLAMA" -o pic.bin --sms 8 -q --dot pic-expand.dot --dot-expand
  expect "--dot-expand exited $RC" rc_is 0
  expect "--dot-expand does not draw layer 2" grep -q 'cluster_layer2' pic-expand.dot
  renders_quickly "tiny-llama --dot-expand" pic-expand.dot
  run "$MKPLAN" "$LLAMA" -o pic.bin --sms 8 -q --dot pic-task.dot --dot-level task
  renders_quickly "tiny-llama task level" pic-task.dot
  run "$MKPLAN" "$ROOT/examples/llama-3.2-1b.yaml" -o pic.bin -q --dot pic-l1.dot --dot-level task --dot-layers 0-1 --dot-ops 'qkv*,attn*'
  expect "--dot-layers 0-1 --dot-ops exited $RC" rc_is 0
  expect "--dot-layers 0-1 --dot-ops drew layer 2" lacks 'qkv2\[' pic-l1.dot
  expect "--dot-layers 0-1 --dot-ops left out attn_part1" grep -q 'attn_part1\[' pic-l1.dot
  expect "--dot-layers 0-1 --dot-ops drew a matvec of the MLP" lacks '"act0\[' pic-l1.dot
  renders_quickly "llama-3.2-1b task level, layers 0-1, qkv* and attn*" pic-l1.dot
  run "$MKPLAN" "$ROOT/examples/llama-3.2-1b.yaml" -o pic.bin -q --dot pic-l1-layer.dot --dot-level task --dot-layers 3
  renders_quickly "llama-3.2-1b task level, layer 3" pic-l1-layer.dot
  run "$MKPLAN" "$ROOT/examples/llama-3.2-1b.yaml" -o pic.bin -q --dot pic-l1-all.dot --dot-level task
  expect "the whole llama-3.2-1b task graph exited $RC" rc_is 0
  expect "the whole llama-3.2-1b task graph gives no size warning" err_has 'warning: .*nodes and .*edges.*--dot-layers'
  finish "every picture renders with dot in under 10 s; op level of every example under 4000 px; task level by layers and ops"
}

check_dot_option_errors() {
  local args
  for args in "--dot-layers 3-1" "--dot-layers x" "--dot-layers 1-" "--dot-layers -1"; do
    begin
    # shellcheck disable=SC2086
    run "$MKPLAN" "$LLAMA" -o bad.bin --dot bad.dot --dot-level task $args
    clean_error mkplan 'dot-layers'
    finish "mkplan $args: one line, exit 1"
  done
  begin
  run "$MKPLAN" "$LLAMA" -o bad.bin --dot bad.dot --dot-layers 0-1
  clean_error mkplan 'dot-level task'
  finish "mkplan --dot-layers without --dot-level task: one line, exit 1"
  for args in "--dot-layers 7" "--dot-ops nothing*"; do
    begin
    rm -f none.dot
    # shellcheck disable=SC2086
    run "$MKPLAN" "$LLAMA" -o bad.bin --dot none.dot --dot-level task $args
    clean_error mkplan 'no op is selected.*layers 0–2'
    expect "none.dot was written" test ! -e none.dot
    finish "mkplan --dot-level task $args (selects nothing): one line naming the model's layers, exit 1, no DOT"
  done
}

check_trace() {
  begin
  if ! have_fixtures; then
    WHY+=("fixtures missing")
  else
    run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2 --tokens 3 --trace tr
    expect "mkrun --trace exited $RC" rc_is 0
    expect "no summary on stdout" out_has 'step span [0-9]+ ticks \(logical clock'
    expect "tr.svg is not an SVG with a time axis" grep -q 'time (logical ticks)' tr.svg
    if command -v python3 >/dev/null; then
      expect "tr.json does not parse as JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' tr.json
      expect "tr.svg does not parse as XML" python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' tr.svg
    fi
    run "$MKRUN" s.bin w --backend emulator --tokens 1 --trace /proc/nope/tr
    clean_error mkrun '/proc/nope/tr'
  fi
  finish "mkrun --trace on the emulator: logical-clock summary, Chrome JSON and SVG; a bad prefix is one line"
}

check_policy_critical_path() {
  begin
  run "$MKPLAN" "$LLAMA" -o cp.bin --sms 8 --policy critical-path
  expect "exit status is $RC, expected 0" rc_is 0
  expect "summary does not name the policy" out_has 'critical-path'
  expect "cp.bin was not written" test -s cp.bin
  if have_fixtures && [[ -s cp.bin ]]; then
    run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8
    cp "$WORK/stdout" rr.out
    run "$MKRUN" cp.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8
    expect "mkrun on the critical-path schedule exited $RC" rc_is 0
    expect "critical-path schedule gives tokens '$(tokens_of "$WORK/stdout")', round-robin '$(tokens_of rr.out)'" \
      test "$(tokens_of "$WORK/stdout")" == "$(tokens_of rr.out)"
  fi
  finish "mkplan --policy critical-path plans a schedule that runs to round-robin's tokens"
}

check_weights() {
  begin
  run "$MKWEIGHTS" s.bin -o w_again --seed 3
  expect "exit status is $RC, expected 0" rc_is 0
  expect "stdout does not report what was written" out_has 'wrote .*model\.safetensors'
  expect "w_again/model.safetensors missing" test -s w_again/model.safetensors
  expect "w_again/config.json missing" test -s w_again/config.json
  expect "the same seed gave different bytes" cmp -s w/model.safetensors w_again/model.safetensors
  run "$MKWEIGHTS" s.bin -o w_other --seed 4
  expect "--seed 4 exited $RC" rc_is 0
  expect "--seed 4 gave the same bytes as --seed 3" not_cmp w/model.safetensors w_other/model.safetensors
  finish "mkweights -o --seed writes a checkpoint; the same seed gives the same bytes, another seed others"
}
not_cmp() { [[ -s $1 && -s $2 ]] && ! cmp -s "$1" "$2"; }

# all_ids_below N IDS...: every id is a decimal integer in [0, N).
all_ids_below() {
  local n=$1 id
  shift
  for id in "$@"; do
    [[ $id =~ ^[0-9]+$ ]] && ((id < n)) || return 1
  done
}

check_run() {
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8
  expect "exit status is $RC, expected 0" rc_is 0
  local -a ids
  read -r -a ids <<<"$(tokens_of "$WORK/stdout")"
  expect "the tokens: line has ${#ids[@]} ids, expected 8" test "${#ids[@]}" -eq 8
  expect "token ids '${ids[*]}' are not all in [0, $VOCAB)" all_ids_below "$VOCAB" "${ids[@]}"
  expect "stdout does not report us/token" out_has 'us/token'
  expect "stdout does not name the emulator" out_has 'on emulator'
  finish "mkrun --backend emulator --prompt-ids 1,2,3 --tokens 8 prints 8 token ids and us/token"
}

# npy_check FILE ROWS COLS: FILE is a float32 .npy of shape (ROWS, COLS) with nothing after the data.
npy_check() {
  local file=$1 rows=$2 cols=$3
  local magic version hlen header size
  magic=$(head -c 6 "$file" | od -An -tx1 | tr -d ' \n')
  [[ $magic == 934e554d5059 ]] || { WHY+=("$file does not start with \\x93NUMPY (got $magic)"); return; }
  version=$(od -An -tu1 -j 6 -N 1 "$file" | tr -d ' ')
  if [[ $version == 1 ]]; then
    hlen=$(( $(od -An -tu2 --endian=little -j 8 -N 2 "$file" | tr -d ' ') + 10 ))
  else
    hlen=$(( $(od -An -tu4 --endian=little -j 8 -N 4 "$file" | tr -d ' ') + 12 ))
  fi
  header=$(head -c "$hlen" "$file" | tr -d '\000')
  [[ $header =~ \'shape\':\ \($rows,\ $cols\) ]] || WHY+=("$file header does not say shape ($rows, $cols): $header")
  [[ $header == *"'<f4'"* ]] || WHY+=("$file header does not say float32 ('<f4'): $header")
  size=$(stat -c %s "$file")
  [[ $size -eq $((hlen + rows * cols * 4)) ]] ||
    WHY+=("$file is $size bytes, expected $hlen of header + $((rows * cols * 4)) of data")
}

check_dump_logits() {
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8 --dump-logits l.npy
  expect "exit status is $RC, expected 0" rc_is 0
  expect "stdout does not report the dump" out_has 'wrote l\.npy'
  if [[ -s l.npy ]]; then
    npy_check l.npy 10 "$VOCAB"
  else
    WHY+=("l.npy was not written")
  fi
  finish "mkrun --dump-logits writes a float32 .npy of shape (10, $VOCAB) (3 prompt + 7 decode steps)"
}

check_repeatable() {
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8 --dump-logits r1.npy
  cp "$WORK/stdout" r1.out
  expect "first run exited $RC" rc_is 0
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8 --dump-logits r2.npy
  expect "second run exited $RC" rc_is 0
  local a b
  a=$(tokens_of r1.out)
  b=$(tokens_of "$WORK/stdout")
  expect "no tokens: line" test -n "$a"
  expect "tokens differ between runs: '$a' vs '$b'" test "$a" == "$b"
  if [[ -s r1.npy && -s r2.npy ]]; then
    expect "logits differ between two deterministic runs" cmp -s r1.npy r2.npy
  else
    WHY+=("--dump-logits did not write r1.npy and r2.npy")
  fi
  finish "the same mkrun twice gives the same tokens and bit-identical logits"
}

check_shuffled() {
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8 --order deterministic
  cp "$WORK/stdout" det.out
  expect "deterministic run exited $RC" rc_is 0
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 8 --order shuffled --seed 5
  expect "shuffled run exited $RC" rc_is 0
  local a b
  a=$(tokens_of det.out)
  b=$(tokens_of "$WORK/stdout")
  expect "no tokens: line" test -n "$a"
  expect "shuffled tokens '$b' differ from deterministic '$a'" test "$a" == "$b"
  finish "mkrun --order shuffled --seed 5 gives the deterministic order's tokens"
}

# --- errors: mkplan ------------------------------------------------------------------------------

check_yaml_syntax() {
  begin
  printf 'model: broken\nconfig: {hidden: 256, vocab: [512\nops: []\n' >broken.yaml
  plan_refused broken.yaml
  clean_error mkplan 'broken\.yaml:[0-9]+:[0-9]+'
  finish "mkplan on malformed YAML (unclosed bracket): one line with file:line:col, exit 1"
}

check_unknown_op() {
  begin
  sed 's/op: argmax/op: frobnicate/' "$LLAMA" >unknown-op.yaml
  plan_refused unknown-op.yaml
  clean_error mkplan "unknown-op\\.yaml:[0-9]+:[0-9]+.*'?frobnicate"
  finish "mkplan on an unknown op: one line naming the op and where it is, exit 1"
}

check_missing_model() {
  begin
  plan_refused no-such-model.yaml
  clean_error mkplan 'no-such-model\.yaml.*(cannot open|no such|not found)'
  finish "mkplan on a missing model file: one line naming the file, exit 1"
}

check_sms_zero() {
  begin
  run "$MKPLAN" "$LLAMA" -o x.bin --sms 0
  expect "exit status is 0, expected non-zero" test "$RC" -ne 0
  expect "crashed: exit status $RC" test "$RC" -lt 124
  expect "stderr does not name --sms and the range" err_has '--sms.*(range|1)'
  expect "x.bin was written anyway" test ! -e x.bin
  finish "mkplan --sms 0 is a command-line error (non-zero exit, names --sms)"
}

check_max_tokens() {
  begin
  run "$MKPLAN" "$LLAMA" -o mt.bin --sms 8 --max-tokens 4
  expect "exit status is $RC, expected 0" rc_is 0
  expect "the summary does not say 4 tokens a step" out_has '^tokens a step: +up to 4 '
  run "$MKPLAN" "$LLAMA" -o mt.bin --sms 8
  expect "without --max-tokens the summary does not say 1 token a step" out_has '^tokens a step: +up to 1 '
  rm -f mt0.bin
  run "$MKPLAN" "$LLAMA" -o mt0.bin --max-tokens 0
  clean_error mkplan '--max-tokens.*0.*(range|1)'
  expect "mt0.bin was written" test ! -e mt0.bin
  finish "mkplan --max-tokens N plans steps of up to N tokens (the option the summary names); 0 is refused"
}

check_speculate() {
  begin
  run "$MKPLAN" "$LLAMA" -o sp.bin --sms 8 --max-tokens 5 -q
  run "$MKRUN" sp.bin w --prompt-ids 5,6,7,8,5,6,7,8,5,6 --tokens 40
  local plain
  plain=$(tokens_of "$WORK/stdout")
  run "$MKRUN" sp.bin w --prompt-ids 5,6,7,8,5,6,7,8,5,6 --tokens 40 --speculate ngram:4
  expect "exit status is $RC, expected 0" rc_is 0
  expect "--speculate gave other tokens than plain decoding" test "$(tokens_of "$WORK/stdout")" == "$plain"
  expect "no speculation line" out_has '^speculation: [0-9]+ of [0-9]+ drafted tokens kept \([0-9.]+ %\) in [0-9]+ check steps; 39 tokens after the first in [0-9]+ steps$'
  run "$MKRUN" s.bin w --prompt-ids 5,6 --speculate ngram
  exact_error mkrun "speculative decoding checks its drafts in steps of several tokens, but this schedule runs one token a step; plan it with mkplan --max-tokens 5"
  run "$MKRUN" sp.bin w --speculate ngram:0
  exact_error mkrun "--speculate takes ngram or ngram:K (K: tokens drafted a step, 1 to 64), not 'ngram:0'"
  run "$MKRUN" sp.bin w --speculate ngram --trace t
  exact_error mkrun "--speculate does not take --trace"
  finish "mkrun --speculate ngram[:K] gives plain decoding's tokens and says what it kept; bad values and schedules of one token a step are refused"
}

check_policy_bogus() {
  begin
  run "$MKPLAN" "$LLAMA" -o x.bin --policy bogus
  expect "exit status is 0, expected non-zero" test "$RC" -ne 0
  expect "crashed: exit status $RC" test "$RC" -lt 124
  expect "stderr does not name --policy and the bad value" err_has '--policy.*bogus'
  expect "stderr does not list the valid policies" err_has 'round-robin.*critical-path'
  expect "x.bin was written anyway" test ! -e x.bin
  finish "mkplan --policy bogus is a command-line error (non-zero exit, lists the policies)"
}

check_plan_unwritable() {
  begin
  run "$MKPLAN" "$LLAMA" -o /proc/nope/s.bin
  clean_error mkplan '/proc/nope/s\.bin'
  finish "mkplan -o /proc/nope/s.bin: one line naming the path, exit 1"
  begin
  run "$MKPLAN" "$LLAMA" -o dot-fail.bin --dot /proc/nope/d.dot
  clean_error mkplan '/proc/nope/d\.dot'
  finish "mkplan --dot /proc/nope/d.dot: one line naming the path, exit 1"
}

# --- errors: mkrun, schedule file ----------------------------------------------------------------

check_schedule_truncated() {
  begin
  head -c 100 s.bin >truncated.bin
  run "$MKRUN" truncated.bin w --backend emulator
  clean_error mkrun 'truncated\.bin.*truncat'
  expect "it ran anyway" no_tokens
  finish "mkrun on a truncated schedule (first 100 bytes): says truncated, exit 1"
}

check_schedule_corrupt() {
  begin
  cp s.bin corrupt.bin
  local size middle byte
  size=$(stat -c %s corrupt.bin)
  middle=$((size / 2))
  byte=$(od -An -tu1 -j "$middle" -N 1 corrupt.bin | tr -d ' ')
  # shellcheck disable=SC2059
  printf "\\$(printf '%03o' $((byte ^ 0xff)))" | dd of=corrupt.bin bs=1 seek="$middle" conv=notrunc status=none
  if cmp -s s.bin corrupt.bin; then
    WHY+=("could not flip a byte of the schedule")
  else
    run "$MKRUN" corrupt.bin w --backend emulator
    clean_error mkrun 'corrupt\.bin.*(corrupt|checksum)'
    expect "it ran anyway" no_tokens
  fi
  finish "mkrun on a schedule with one byte flipped in the middle: says corrupt, exit 1"
}

check_schedule_not_a_schedule() {
  begin
  # Small text files (shorter than a schedule header) are the common mistake: a JSON, a note.
  echo "this is a text file, not a schedule" >note.txt
  run "$MKRUN" note.txt w --backend emulator
  clean_error mkrun 'note\.txt.*not a schedule'
  expect "it ran anyway" no_tokens
  finish "mkrun on a short text file: says it is not a schedule, exit 1"
  begin
  run "$MKRUN" "$LLAMA" w --backend emulator
  clean_error mkrun 'tiny-llama\.yaml.*not a schedule'
  expect "it ran anyway" no_tokens
  finish "mkrun on the model YAML instead of its schedule: says it is not a schedule, exit 1"
}

# --- errors: mkrun, weights ----------------------------------------------------------------------

check_weights_missing_folder() {
  begin
  run "$MKRUN" s.bin no-such-weights --backend emulator
  clean_error mkrun 'no-such-weights.*(no such|not found|cannot open|missing)'
  finish "mkrun with a missing weights folder: one line naming it, exit 1"
}

check_weights_empty_folder() {
  begin
  mkdir -p empty-weights
  run "$MKRUN" s.bin empty-weights --backend emulator
  clean_error mkrun 'empty-weights.*safetensors'
  finish "mkrun with an empty weights folder: says there is no model.safetensors, exit 1"
}

check_weights_other_model() {
  begin
  if "$MKPLAN" "$QWEN" -o qwen.bin -q && "$MKWEIGHTS" qwen.bin -o w-qwen >/dev/null; then
    run "$MKRUN" s.bin w-qwen --backend emulator
    clean_error mkrun "key 'model\\.[a-z_0-9.]+'"
    expect "it ran anyway" no_tokens
  else
    WHY+=("could not make tiny-qwen3 weights")
  fi
  finish "mkrun with tiny-qwen3 weights on the tiny-llama schedule: names the offending key before running"
}

check_weights_missing_key() {
  begin
  # tiny-llama with 2 layers instead of 3: its checkpoint lacks every model.layers.2.* tensor.
  sed 's/^  layers: 3$/  layers: 2/' "$LLAMA" >two-layers.yaml
  if grep -q '^  layers: 2$' two-layers.yaml && "$MKPLAN" two-layers.yaml -o two.bin -q &&
    "$MKWEIGHTS" two.bin -o w-two >/dev/null; then
    run "$MKRUN" s.bin w-two --backend emulator
    clean_error mkrun "missing key 'model\\.layers\\.2\\."
    expect "it ran anyway" no_tokens
  else
    WHY+=("could not make 2-layer tiny-llama weights")
  fi
  finish "mkrun with weights lacking a layer: names the missing key before running"
}

check_weights_truncated() {
  begin
  mkdir -p w-truncated
  cp w/config.json w-truncated/ 2>/dev/null
  local size
  size=$(stat -c %s w/model.safetensors 2>/dev/null || echo 0)
  head -c $((size / 2)) w/model.safetensors >w-truncated/model.safetensors
  run "$MKRUN" s.bin w-truncated --backend emulator
  clean_error mkrun 'model\.safetensors.*truncat'
  expect "it ran anyway" no_tokens
  finish "mkrun with a truncated model.safetensors: says truncated, exit 1"
}

# --- errors: mkrun, options ----------------------------------------------------------------------

check_prompt_ids() {
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,two,3
  clean_error mkrun "--prompt-ids.*'two'"
  finish "mkrun --prompt-ids 1,two,3: names the bad item, exit 1"
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids ''
  clean_error mkrun '--prompt-ids.*empty'
  finish "mkrun --prompt-ids '': says the list is empty, exit 1"
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids "1,$VOCAB"
  clean_error mkrun "$VOCAB.*vocab"
  expect "it ran anyway" no_tokens
  finish "mkrun --prompt-ids 1,$VOCAB (id >= vocab): names the id and the vocabulary, exit 1"
}

check_backend_cuda() {
  if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
    skip "mkrun --backend cuda without a GPU says so" "a GPU is present"
    return
  fi
  begin
  run "$MKRUN" s.bin w --backend cuda
  clean_error mkrun 'cuda.*(GPU|CUDA)'
  expect "it ran anyway" no_tokens
  finish "mkrun --backend cuda without a GPU: one clear line, exit 1"
}

check_max_context() {
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2 --tokens 100 --max-context 4
  clean_error mkrun 'max-context'
  expect "it ran anyway" no_tokens
  finish "mkrun --tokens 100 --max-context 4: says to raise --max-context, exit 1"
}

check_max_context_zero() {
  begin
  run "$MKRUN" s.bin w --backend emulator --max-context 0
  clean_error mkrun 'max-context'
  expect "it ran anyway" no_tokens
  finish "mkrun --max-context 0: refused, not taken as the default, exit 1"
}

check_run_unwritable() {
  begin
  run "$MKRUN" s.bin w --backend emulator --tokens 2 --dump-logits /proc/nope/l.npy
  clean_error mkrun '/proc/nope/l\.npy'
  finish "mkrun --dump-logits /proc/nope/l.npy: one line naming the path, exit 1"
}

# --- errors: mkweights ---------------------------------------------------------------------------

check_weights_tool_errors() {
  begin
  run "$MKWEIGHTS" no-such.bin -o w-none
  clean_error mkweights 'no-such\.bin'
  finish "mkweights on a missing schedule: one line naming it, exit 1"
  begin
  run "$MKWEIGHTS" s.bin -o /proc/nope/w
  clean_error mkweights '/proc/nope/w'
  finish "mkweights -o /proc/nope/w: one line naming the path, exit 1"
  begin
  run "$MKWEIGHTS" s.bin -o w-bad-seed --seed abc
  clean_error mkweights '--seed.*abc'
  finish "mkweights --seed abc: one line naming the option, exit 1"
}

# --- inputs that crashed, hung or corrupted (issue 8): one check per class -----------------------

check_inferred_outputs() {
  begin
  printf 'model: seven\nconfig: {vocab: 16, hidden: 8}\nweights:\n  e: {key: e, shape: [vocab, hidden]}\nops:\n' >seven.yaml
  printf '  - {op: embed, table: e, out: x}\n  - {op: argmax, in: x, out: t}\n' >>seven.yaml
  run "$MKPLAN" seven.yaml -o seven.bin -q
  expect "exit status is $RC, expected 0" rc_is 0
  expect "seven.bin was not written" test -s seven.bin
  finish "mkplan on a seven-line model whose outputs are all inferred plans it (no reference into a growing vector)"
}

check_yaml_loops() {
  begin
  printf ',' >comma.yaml
  plan_refused comma.yaml
  exact_error mkplan "comma.yaml:1:1: YAML syntax error: unexpected ','"
  finish "mkplan on a one-byte YAML file (',') stops with a syntax error instead of looping"
  begin
  printf 'model: m\nconfig: {}\nops:\n  - repeat: {count: 1000000000000000, as: i, ops: []}\n' >repeat.yaml
  plan_refused repeat.yaml
  exact_error mkplan "repeat.yaml:4:21: repeat count is 1000000000000000; it must be 1 to 4096"
  finish "mkplan with a huge repeat count stops at the limit instead of looping"
}

check_sizes_wrap() {
  begin
  printf 'model: m\nconfig: {}\nweights:\n  e: {key: e, shape: [16, 8]}\n  a: {key: a, shape: [2147483652, 8]}\n' >wrap.yaml
  printf '  b: {key: b, shape: [2147483652, 8]}\nops:\n  - {op: embed, table: e, out: x}\n' >>wrap.yaml
  printf '  - {op: matvec, in: x, weight: [a, b], out: big}\n  - {op: argmax, in: big, out: t}\n' >>wrap.yaml
  plan_refused wrap.yaml
  exact_error mkplan "wrap.yaml:9:46: op 'big' would produce [4294967304], over the limits (each dimension 1 to 4294967295, at most 1099511627776 elements)"
  finish "mkplan refuses an output of 2^32 + 8 rows instead of planning 8 rows"
}

check_deep_nesting() {
  begin
  { printf 'model: m\nconfig: {}\nweights:\n  e: {key: e, shape: ["'; printf '%*s' 100000 '' | tr ' ' '('
    printf 1; printf '%*s' 100000 '' | tr ' ' ')'; printf '"]}\nops: []\n'; } >deep-expr.yaml
  plan_refused deep-expr.yaml
  clean_error mkplan "^mkplan: deep-expr\.yaml:4:23: nested deeper than 64 levels in expression '\(\(\(\("
  finish "mkplan on an expression nested 100000 deep: a depth error, not a stack overflow"
  begin
  { printf 'model: m\nconfig: '; printf '%*s' 100000 '' | tr ' ' '['; } >deep-yaml.yaml
  plan_refused deep-yaml.yaml
  exact_error mkplan "deep-yaml.yaml:2:41: YAML nested deeper than 64 levels"
  finish "mkplan on YAML nested 100000 deep: a depth error, not a stack overflow"
}

check_outputs() {
  begin
  run "$MKPLAN" "$LLAMA" -o /dev/null --sms 8 -q
  expect "mkplan -o /dev/null exited $RC" rc_is 0
  expect "/dev/null is no longer a character device" test -c /dev/null
  finish "mkplan -o /dev/null writes into the device, never replaces it"
  begin
  run "$MKPLAN" "$LLAMA" -o /dev/full --sms 8
  exact_error mkplan "/dev/full: write failed: No space left on device"
  finish "mkplan -o /dev/full (a full disk): says so, exit 1, no 'wrote'"
  begin
  echo old >full.bin
  # A file size limit fails writes as a full disk does (EFBIG instead of ENOSPC).
  LAST="ulimit -f 8; mkplan -o full.bin"
  (trap '' XFSZ; ulimit -f 8; "$MKPLAN" "$LLAMA" -o full.bin --sms 8 >"$WORK/stdout" 2>"$WORK/stderr")
  RC=$?
  exact_error mkplan "full.bin: write failed: File too large"
  expect "full.bin lost its old contents" test "$(cat full.bin)" == old
  expect "a temporary was left behind" no_temporaries
  finish "mkplan on a full disk: a clear error, the old file intact, no temporary left"
  begin
  echo victim >victim.txt
  ln -sf victim.txt planted.bin.tmp
  run "$MKPLAN" "$LLAMA" -o planted.bin --sms 8 -q
  expect "exit status is $RC, expected 0" rc_is 0
  expect "the symlink at the temporary's old name was followed" test "$(cat victim.txt)" == victim
  expect "planted.bin is not the schedule" cmp -s planted.bin s.bin
  finish "mkplan never writes through a symlink planted at a temporary's name"
  begin
  run "$MKPLAN" "$LLAMA" -o /proc/nope/s.bin --dot left.dot
  clean_error mkplan '/proc/nope/s\.bin'
  expect "left.dot stayed after the failed plan" test ! -e left.dot
  run "$MKPLAN" comma.yaml -o x.bin --dot left.dot
  expect "left.dot was written for a model that does not plan" test ! -e left.dot
  finish "mkplan leaves no DOT file when the schedule cannot be written or planned"
  if have_fixtures; then
    begin
    echo keep >keep.npy
    run "$MKRUN" s.bin w --backend emulator --prompt-ids "1,$VOCAB" --dump-logits keep.npy
    clean_error mkrun 'vocab'
    expect "keep.npy was truncated or replaced by a failed run" test "$(cat keep.npy)" == keep
    finish "mkrun keeps an existing --dump-logits file when the run fails"
    begin
    run "$MKRUN" s.bin w --backend emulator --prompt-ids 1 --tokens 2 --dump-logits /dev/full
    exact_error mkrun "/dev/full: write failed: No space left on device"
    finish "mkrun --dump-logits on a full disk: a clear error, exit 1, no 'wrote'"
  fi
  begin
  expect "a temporary was left behind" no_temporaries
  finish "no tool left a temporary file behind"
}

check_nan_weights() {
  have_fixtures || { skip "mkrun stops at NaN logits" "no fixtures"; return; }
  begin
  mkdir -p w-nan
  cp w/model.safetensors w-nan/
  local size
  size=$(stat -c %s w-nan/model.safetensors)
  # The last value of the data area (the last layer's down_proj) becomes a bf16 NaN (0x7fc0).
  printf '\xc0\x7f' | dd of=w-nan/model.safetensors bs=1 seek=$((size - 2)) conv=notrunc status=none
  run "$MKRUN" s.bin w-nan --backend emulator --prompt-ids 1,2 --tokens 4
  exact_error mkrun "step 2 of 5 (position 1) produced a non-finite logit (nan at vocabulary index 0): the weights or the computation hold NaN or Inf, so its token would be meaningless"
  expect "it printed tokens" no_tokens
  finish "mkrun on a checkpoint holding a NaN stops after the prompt, before any token, with non-finite logits"
}

check_checkpoint_refusals() {
  have_fixtures || { skip "mkrun refuses shards outside the folder" "no fixtures"; return; }
  begin
  mkdir -p w-escape
  printf '{"weight_map": {"model.embed_tokens.weight": "../w/model.safetensors"}}' >w-escape/model.safetensors.index.json
  run "$MKRUN" s.bin w-escape --backend emulator
  exact_error mkrun "w-escape/model.safetensors.index.json: weight_map: shard '../w/model.safetensors' is not a file name inside the checkpoint folder"
  finish "mkrun refuses an index whose shard name leaves the checkpoint folder"
  begin
  run "$MKRUN" /dev/zero w --backend emulator
  exact_error mkrun "/dev/zero: not a regular file"
  finish "mkrun on /dev/zero as the schedule: refused at once instead of reading forever"
  begin
  mkfifo model.fifo sched.fifo
  plan_refused model.fifo
  exact_error mkplan "model.fifo: cannot open the model file"
  run "$MKRUN" sched.fifo w --backend emulator
  exact_error mkrun "sched.fifo: not a regular file"
  finish "mkplan and mkrun on a FIFO: refused at once instead of blocking"
  begin
  # Refused before anything is allocated: under a 2 GB address-space limit, the 16 GB token
  # history the emulator once made before its check fails instead. (ASan reserves terabytes of
  # address space, so its build runs without the limit.)
  local limit=2000000
  ldd "$MKRUN" 2>/dev/null | grep -q libasan && limit=unlimited
  LAST="ulimit -v $limit; $MKRUN s.bin w --backend emulator --max-context 4000000000"
  (ulimit -v "$limit"; "${TIMEOUT[@]}" "$MKRUN" s.bin w --backend emulator --max-context 4000000000 >"$WORK/stdout" 2>"$WORK/stderr")
  RC=$?
  exact_error mkrun "a context of 4000000000 positions is outside 1 to 1073741824; lower --max-context"
  finish "mkrun --max-context 4000000000: over the limit, said plainly, before allocating for it"
  begin
  run "$MKRUN" s.bin w --backend emulator --max-context 1000000000
  clean_error mkrun '^mkrun: a context of 1000000000 positions needs 768[0-9]{9} bytes \([0-9.]+ GiB\) of host memory for the KV caches and activations, more than the [0-9]+ bytes \([0-9.]+ GiB\) there is; lower --max-context$'
  finish "mkrun --max-context 1000000000: says how much memory it needs instead of std::bad_alloc"
}

# --- mkrun's messages ---------------------------------------------------------------------------

# fixed_numbers FILE: every number in FILE is in fixed notation (no 1.26644e+06).
fixed_numbers() { ! grep -Eq '[0-9]e[-+]?[0-9]' "$1"; }

check_run_messages() {
  have_fixtures || { skip "mkrun's timings and notes" "no fixtures"; return; }
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2,3 --tokens 5
  expect "exit status is $RC, expected 0" rc_is 0
  expect "the timing line is not 'N steps on emulator: X us/token (Y tokens/s)' in fixed notation" \
    out_has '^7 steps on emulator: [0-9]+(\.[0-9]+)? us/token \([0-9]+(\.[0-9]+)? tokens/s\)$'
  expect "the decode line is not in fixed notation" out_has '^decode after the prompt: [0-9]+ steps, [0-9]+(\.[0-9]+)? us/token at context 3\.\.7$'
  expect "a number is printed with an exponent" fixed_numbers "$WORK/stdout"
  expect "stderr is not empty with a prompt" err_lines 0
  finish "mkrun prints us/token and tokens/s in fixed notation"
  begin
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1,2 --tokens 0
  expect "exit status is $RC, expected 0" rc_is 0
  expect "--tokens 0 does not say that no token was generated" \
    out_has '^2 prompt steps on emulator: [0-9.]+ us/token \([0-9.]+ tokens/s\); no token generated \(--tokens 0\)$'
  expect "--tokens 0 printed tokens" out_has '^tokens:$'
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1 --tokens 0
  expect "one prompt step is not 'step'" out_has '^1 prompt step on emulator: '
  finish "mkrun --tokens 0 says no token was generated (the rate is the prompt's)"
  begin
  run "$MKRUN" s.bin w --backend emulator --tokens 2
  expect "exit status is $RC, expected 0" rc_is 0
  expect "stderr is not the one note" err_is "mkrun: note: no prompt given; decoding started from token id 1 (give one with --prompt-ids IDS or --prompt TEXT)"
  expect "the run did not start from id 1 as --prompt-ids 1 does" test "$(tokens_of "$WORK/stdout")" == "$(
    "$MKRUN" s.bin w --backend emulator --prompt-ids 1 --tokens 2 | grep -m1 '^tokens:' | cut -d: -f2-)"
  run "$MKRUN" s.bin w --backend emulator --tokens 2 --max-context 1
  clean_error mkrun 'max-context'
  finish "mkrun without a prompt says on stderr that it starts from token id 1 (not before an error)"
  begin
  run "$MKRUN" --help
  expect "--help does not say what no prompt does" out_has 'Without a prompt, decoding starts from token'
  finish "mkrun --help says what happens without a prompt"
}

# on_terminal OUT INPUT CMD...: runs CMD on a pseudo-terminal (stdin, stdout and stderr), types
# INPUT (Python bytes syntax; \x04 is Ctrl-D) once CMD prompts with "> ", and writes all it printed
# to OUT as Python's repr. Exit status: CMD's.
on_terminal() {
  local out=$1 input=$2
  shift 2
  LAST="$* (on a terminal, typing $input)"
  "${TIMEOUT[@]}" python3 - "$out" "$input" "$@" <<'PY' >"$WORK/stdout" 2>"$WORK/stderr"
import ast, os, pty, select, sys
out, typed, argv = sys.argv[1], ast.literal_eval("b'" + sys.argv[2] + "'"), sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
seen, sent = b"", False
while True:
    ready, _, _ = select.select([fd], [], [], 30)
    if not ready:
        break
    try:
        chunk = os.read(fd, 4096)
    except OSError:  # the child closed the terminal
        break
    if not chunk:
        break
    seen += chunk
    if not sent and b"> " in seen:
        os.write(fd, typed)
        sent = True
_, status = os.waitpid(pid, 0)
open(out, "w").write(repr(seen))
sys.exit(os.waitstatus_to_exitcode(status))
PY
  RC=$?
}

check_interactive_terminal() {
  if [[ ! -x $FIXTURE ]] || ! command -v python3 >/dev/null; then
    skip "mkrun -i at a terminal ends its lines at Ctrl-D" "needs $FIXTURE and python3"
    return
  fi
  begin
  "$MKPLAN" "$ROOT/tests/tokenizer/eos-llama.yaml" -o eos.bin --sms 4 -q >/dev/null 2>&1
  "$FIXTURE" eos.bin eos >/dev/null 2>&1
  on_terminal tty.out '\x04' "$MKRUN" eos.bin eos --backend emulator -i
  expect "Ctrl-D at the prompt: exit status $RC, expected 0" rc_is 0
  expect "Ctrl-D at the prompt left '$(cat tty.out)', expected the prompt and a newline" test "$(cat tty.out)" == "b'> \\r\\n'"
  on_terminal tty.out 'Hi\x04\x04' "$MKRUN" eos.bin eos --backend emulator -i
  expect "a message ended by Ctrl-D: exit status $RC, expected 0" rc_is 0
  expect "a message ended by Ctrl-D: the reply is not on a line of its own: $(cat tty.out)" grep -Fq "b'> Hi\\r\\nok\\xc3\\xa9!\\r\\n[prompt 25 tokens" tty.out
  expect "a message ended by Ctrl-D: a blank line or no newline at the end: $(cat tty.out)" grep -Eq "context 30 of 4096\]\\\\r\\\\n'$" tty.out
  finish "mkrun -i at a terminal: Ctrl-D ends the prompt's line (at the prompt and after a message's text)"
  begin
  run "$MKRUN" eos.bin eos --backend emulator --prompt Hi --tokens 0
  expect "exit status is $RC, expected 0" rc_is 0
  expect "stderr is not 'prompt: 3 tokens, R tokens/s; generated: none (--tokens 0) on emulator'" \
    err_has '^prompt: 3 tokens, [0-9.]+ tokens/s; generated: none \(--tokens 0\) on emulator$'
  run "$MKRUN" eos.bin eos --backend emulator --prompt Hi --tokens 20
  expect "the text run's timings are not in fixed notation" err_has '^prompt: 3 tokens, [0-9.]+ tokens/s; generated: 6 tokens, [0-9.]+ tokens/s on emulator'
  finish "mkrun --prompt --tokens 0 says nothing was generated, with no rate for it"
}

# --- outputs over inputs: refused unless --force -------------------------------------------------

check_run_overwrites() {
  have_fixtures || { skip "mkrun refuses outputs over its inputs" "no fixtures"; return; }
  rm -rf ow && cp -r w ow && cp s.bin o.bin && echo '{"mk_generated": true}' >ow/config.json
  cp ow/config.json config.saved
  begin
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --dump-logits o.bin
  exact_error mkrun "--dump-logits o.bin would overwrite the schedule o.bin; choose another output path, or pass --force to overwrite it"
  expect "the schedule changed" cmp -s o.bin s.bin
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --trace ow/config
  exact_error mkrun "--trace ow/config.json would overwrite the checkpoint's ow/config.json; choose another output path, or pass --force to overwrite it"
  expect "config.json changed" cmp -s ow/config.json config.saved
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --dump-logits ow/model.safetensors
  clean_error mkrun "would overwrite the checkpoint's ow/model.safetensors; .*--force"
  expect "the weights changed" cmp -s ow/model.safetensors w/model.safetensors
  run "$MKRUN" o.bin ow/model.safetensors --backend emulator --prompt-ids 1 --dump-logits ow/model.safetensors
  clean_error mkrun "would overwrite the checkpoint ow/model.safetensors; .*--force"
  ln -sf o.bin link.npy
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --dump-logits link.npy
  exact_error mkrun "--dump-logits link.npy would overwrite the schedule o.bin (the same file); choose another output path, or pass --force to overwrite it"
  rm -f hard.npy && ln o.bin hard.npy
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --dump-logits hard.npy
  clean_error mkrun "--dump-logits hard.npy would overwrite the schedule o.bin \(the same file\)"
  expect "the schedule changed" cmp -s o.bin s.bin
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --trace t1 --dump-logits t1.json
  exact_error mkrun "--dump-logits t1.json and --trace t1.json are the same file; choose two different output paths"
  expect "a temporary was left behind" no_temporaries
  finish "mkrun refuses --dump-logits and --trace over its inputs (the schedule, the checkpoint's files; by path, symlink or hard link), the input unchanged"
  begin
  run "$MKRUN" o.bin ow --backend emulator --prompt-ids 1 --trace ow/config --force
  expect "--force: exit status is $RC, expected 0" rc_is 0
  expect "--force: config.json is not the trace" grep -q traceEvents ow/config.json
  run "$MKRUN" s.bin w --backend emulator --prompt-ids 1 --tokens 2 --dump-logits hard.npy --force
  expect "--force: exit status is $RC, expected 0" rc_is 0
  npy_check hard.npy 2 "$VOCAB"
  finish "mkrun --force writes its outputs over its inputs"
}

check_plan_overwrites() {
  begin
  cp "$LLAMA" my.yaml && cp my.yaml my.saved
  run "$MKPLAN" my.yaml -o my.yaml
  exact_error mkplan "-o my.yaml would overwrite the model my.yaml; choose another output path, or pass --force to overwrite it"
  expect "the model changed" cmp -s my.yaml my.saved
  ln -sf my.yaml link.yaml
  run "$MKPLAN" my.yaml -o link.yaml
  exact_error mkplan "-o link.yaml would overwrite the model my.yaml (the same file); choose another output path, or pass --force to overwrite it"
  rm -f hard.yaml && ln my.yaml hard.yaml
  run "$MKPLAN" my.yaml -o x.bin --dot hard.yaml
  exact_error mkplan "--dot hard.yaml would overwrite the model my.yaml (the same file); choose another output path, or pass --force to overwrite it"
  expect "x.bin was written by a refused plan" test ! -e x.bin
  expect "the model changed" cmp -s my.yaml my.saved
  run "$MKPLAN" my.yaml -o same.bin --dot same.bin
  exact_error mkplan "-o same.bin and --dot same.bin are the same file; choose two different output paths"
  write_qwen2 ckpt
  cp ckpt/config.json ckpt.saved
  run "$MKPLAN" ckpt -o ckpt/config.json
  exact_error mkplan "-o ckpt/config.json would overwrite the checkpoint's ckpt/config.json; choose another output path, or pass --force to overwrite it"
  run "$MKPLAN" ckpt/config.json -o c.bin --emit-yaml ckpt/config.json
  clean_error mkplan "^mkplan: --emit-yaml ckpt/config.json would overwrite the checkpoint's ckpt/config.json; .*--force"
  run "$MKPLAN" ckpt -o c.bin --dot ./ckpt/config.json
  clean_error mkplan "^mkplan: --dot ./ckpt/config.json would overwrite the checkpoint's ckpt/config.json; .*--force"
  expect "config.json changed" cmp -s ckpt/config.json ckpt.saved
  expect "c.bin was written by a refused plan" test ! -e c.bin
  expect "a temporary was left behind" no_temporaries
  finish "mkplan refuses -o, --dot and --emit-yaml over the model or the checkpoint's config.json (path, symlink, hard link), which stay unchanged"
  begin
  run "$MKPLAN" my.yaml -o my.yaml --sms 8 -q --force
  expect "--force: exit status is $RC, expected 0" rc_is 0
  expect "--force: my.yaml is not the schedule" cmp -s my.yaml s.bin
  finish "mkplan --force writes the schedule over its model"
}

check_weights_overwrites() {
  have_fixtures || { skip "mkweights refuses a folder holding a checkpoint" "no fixtures"; return; }
  begin
  rm -rf real && mkdir real && cp w/model.safetensors real/ && echo '{"model_type": "llama"}' >real/config.json
  run "$MKWEIGHTS" s.bin -o real --seed 9
  exact_error mkweights "-o real already holds a checkpoint (real/model.safetensors); choose another folder, or pass --force to overwrite it with random weights"
  expect "the weights changed" cmp -s real/model.safetensors w/model.safetensors
  rm real/model.safetensors && cp w/model.safetensors real/model-00001-of-00002.safetensors
  run "$MKWEIGHTS" s.bin -o real
  clean_error mkweights "^mkweights: -o real already holds a checkpoint \(real/model-00001-of-00002\.safetensors\)"
  echo '{"weight_map": {}}' >real/model.safetensors.index.json
  run "$MKWEIGHTS" s.bin -o real --force
  exact_error mkweights "-o real holds a sharded checkpoint (real/model.safetensors.index.json), which random weights in model.safetensors would not replace; choose another folder"
  expect "a refused mkweights wrote model.safetensors" test ! -e real/model.safetensors
  finish "mkweights refuses a folder that holds a checkpoint (model.safetensors, shards; an index even with --force)"
  begin
  rm -rf real && mkdir real && cp w/model.safetensors real/ && echo '{"model_type": "llama"}' >real/config.json
  run "$MKWEIGHTS" s.bin -o real --seed 9 --force
  expect "--force: exit status is $RC, expected 0" rc_is 0
  expect "--force: the weights were not replaced" not_cmp real/model.safetensors w/model.safetensors
  expect "--force: config.json was replaced" grep -q '"model_type": "llama"' real/config.json
  run "$MKWEIGHTS" s.bin -o w --seed 3 --force
  expect "--force with the same seed: exit status is $RC" rc_is 0
  finish "mkweights --force replaces the weights of a folder (its config.json kept)"
  begin
  run "$MKRUN" s.bin w/config.json --backend emulator --prompt-ids 1
  exact_error mkrun "w/config.json: not a safetensors file (expected an 8-byte header length, then a JSON header starting with '{'); give a checkpoint folder or its .safetensors file"
  finish "mkrun with config.json as the weights says it is not a safetensors file"
}

# --- checkpoint folders planned from config.json -------------------------------------------------

# write_qwen2 DIR [EXTRA]: a tiny Qwen2 config.json (q/k/v biases, 6 q heads per kv head).
write_qwen2() {
  mkdir -p "$1"
  cat >"$1/config.json" <<JSON
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 384, "intermediate_size": 256,
 "num_attention_heads": 12, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 320,
 "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16"${2:-}}
JSON
}

check_hf_import() {
  begin
  write_qwen2 qwen2
  run "$MKPLAN" qwen2 -o q.bin --sms 8 --emit-yaml q.yaml
  expect "mkplan DIR: exit status is $RC, expected 0" rc_is 0
  expect "mkplan DIR does not say what it generated" out_has 'model generated from qwen2/config.json \(Qwen2ForCausalLM, 2 layers, 12 q heads over 2 kv heads, head_dim 32, q/k/v biases, tied embeddings\)'
  expect "--emit-yaml wrote no q.yaml" test -s q.yaml
  expect "the generated YAML has no biases" grep -q 'bias: \["bq{layer}", "bk{layer}", "bv{layer}"\]' q.yaml
  run "$MKPLAN" q.yaml -o q2.bin --sms 8
  expect "mkplan of the emitted YAML: exit status is $RC, expected 0" rc_is 0
  expect "the emitted YAML plans differently from the folder" cmp -s q.bin q2.bin
  run "$MKPLAN" qwen2/config.json -o q3.bin --sms 8 -q
  expect "mkplan DIR/config.json plans differently from mkplan DIR" cmp -s q.bin q3.bin
  run "$MKWEIGHTS" q.bin -o qwen2
  expect "mkweights: exit status is $RC, expected 0" rc_is 0
  expect "mkweights replaced the folder's config.json" grep -q Qwen2ForCausalLM qwen2/config.json
  run "$MKRUN" q.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 4
  expect "mkrun: exit status is $RC, expected 0" rc_is 0
  local -a ids
  read -r -a ids <<<"$(tokens_of "$WORK/stdout")"
  expect "the tokens: line has ${#ids[@]} ids, expected 4" test "${#ids[@]}" -eq 4
  finish "mkplan DIR -o s.bin (config.json, no YAML), mkweights keeps config.json, mkrun s.bin DIR; --emit-yaml plans the same"
  begin
  run "$MKPLAN" qwen2 -o qs.bin --sms 8 --sample --emit-yaml qs.yaml
  expect "mkplan DIR --sample: exit status is $RC, expected 0" rc_is 0
  expect "--sample: the generated YAML has no sample op" grep -q '{op: sample, in: logits, out: next_token}' qs.yaml
  run "$MKRUN" q.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 8
  local greedy
  greedy=$(tokens_of "$WORK/stdout")
  run "$MKRUN" qs.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 8
  expect "the --sample plan without --temperature is not argmax's greedy tokens" test "$(tokens_of "$WORK/stdout")" == "$greedy"
  run "$MKRUN" qs.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 8 --temperature 1000 --top-p 0.99 --seed 7
  expect "mkrun --temperature on a --sample plan: exit status is $RC, expected 0" rc_is 0
  read -r -a ids <<<"$(tokens_of "$WORK/stdout")"
  expect "the sampled tokens: line has ${#ids[@]} ids, expected 8" test "${#ids[@]}" -eq 8
  expect "--temperature 1000 on the --sample plan gave the greedy tokens" test "$(tokens_of "$WORK/stdout")" != "$greedy"
  run "$MKRUN" q.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 4 --temperature 0.8
  clean_error mkrun 'mkplan CHECKPOINT_DIR --sample'
  run "$MKPLAN" "$ROOT/examples/tiny-llama.yaml" -o t.bin --sample
  clean_error mkplan '--sample needs a checkpoint folder'
  finish "mkplan DIR --sample plans a sample op that mkrun --temperature uses; an argmax plan names --sample; a YAML model is told where to write it"
}

check_hf_import_errors() {
  begin
  write_qwen2 bad ', "hidden_act": "gelu"'
  run "$MKPLAN" bad -o b.bin
  clean_error mkplan "bad/config.json: 'hidden_act' is 'gelu'; only silu is supported"
  expect "a refused import wrote b.bin" test ! -e b.bin
  write_qwen2 moe ', "num_experts": 8'
  run "$MKPLAN" moe -o b.bin
  clean_error mkplan "'num_experts' is 8: mixture-of-experts models are not supported"
  write_qwen2 yarn ', "rope_scaling": {"rope_type": "yarn", "factor": 4}'
  run "$MKPLAN" yarn -o b.bin
  clean_error mkplan "'rope_scaling.rope_type' is 'yarn'; supported rope types: default, llama3"
  mkdir -p empty_folder
  run "$MKPLAN" empty_folder -o b.bin
  clean_error mkplan "empty_folder/config.json: no config.json here"
  run "$MKPLAN" "$LLAMA" -o b.bin --emit-yaml b.yaml
  clean_error mkplan "--emit-yaml needs a checkpoint folder"
  finish "mkplan DIR refuses unsupported config.json fields by name (activation, MoE, rope type), a folder without config.json"
}

# Edits one field of qwen2/config.json (sed expression), runs mkrun, restores the file.
run_with_config() {
  cp qwen2/config.json qwen2/config.saved
  sed -i "$1" qwen2/config.json
  run "$MKRUN" q.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 2
  mv qwen2/config.saved qwen2/config.json
}

check_config_mismatch() {
  begin
  run_with_config 's/"rms_norm_eps": 1e-06/"rms_norm_eps": 1e-05/'
  clean_error mkrun "qwen2/config.json: rms_norm_eps is 1e-05 but the schedule was planned with eps 1e-06"
  run_with_config 's/"rope_theta": 1000000.0/"rope_theta": 10000.0/'
  clean_error mkrun "rope theta is 10000 but the schedule was planned with rope theta 1000000"
  run_with_config 's/"torch_dtype"/"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}, "torch_dtype"/'
  clean_error mkrun "the rope type is 'llama3' but the schedule was planned with rope scaling none"
  run_with_config 's/"vocab_size": 320/"vocab_size": 321/'
  clean_error mkrun "vocab_size is 321 but the schedule was planned with a vocabulary of 320"
  run_with_config 's/"tie_word_embeddings": true/"tie_word_embeddings": false/'
  clean_error mkrun "tie_word_embeddings is false but the schedule was planned with tied embeddings"
  run "$MKRUN" q.bin qwen2 --backend emulator --prompt-ids 1,2,3 --tokens 2
  expect "the restored config.json runs: exit status is $RC" rc_is 0
  # Mistral's sliding window: exact below it, refused past it.
  mkdir -p mistral
  cat >mistral/config.json <<JSON
{"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 128, "intermediate_size": 256,
 "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 256,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 6, "tie_word_embeddings": false}
JSON
  run "$MKPLAN" mistral -o m.bin --sms 4
  expect "mkplan mistral: exit status is $RC" rc_is 0
  expect "mkplan mistral does not mention the window" out_has 'sliding_window 6: exact up to that context'

  run "$MKWEIGHTS" m.bin -o mistral
  run "$MKRUN" m.bin mistral --backend emulator --prompt-ids 1,2,3 --tokens 4
  expect "a context of 6 within the window of 6: exit status is $RC, expected 0" rc_is 0
  run "$MKRUN" m.bin mistral --backend emulator --prompt-ids 1,2,3 --tokens 5
  clean_error mkrun "sliding_window is 6 and this run needs a context of 7"
  finish "mkrun s.bin DIR refuses a config.json that differs from the planned eps, rope, vocab or tie, naming both; a context past Mistral's window"
}

# --- main ----------------------------------------------------------------------------------------

check_help
help_layout mkplan "$MKPLAN"
help_layout mkrun "$MKRUN"
help_layout mkweights "$MKWEIGHTS"
version_says mkplan "$MKPLAN"
version_says mkrun "$MKRUN"
version_says mkweights "$MKWEIGHTS"
check_typos
check_plan
check_dot_renders
check_dot_task_level
check_pictures
check_dot_option_errors
check_trace
check_policy_critical_path
check_weights
check_run
check_dump_logits
check_repeatable
check_shuffled

check_yaml_syntax
check_unknown_op
check_missing_model
check_sms_zero
check_policy_bogus
check_max_tokens
check_speculate
check_plan_unwritable

check_schedule_truncated
check_schedule_corrupt
check_schedule_not_a_schedule
check_weights_missing_folder
check_weights_empty_folder
check_weights_other_model
check_weights_missing_key
check_weights_truncated
check_prompt_ids
check_backend_cuda
check_max_context
check_max_context_zero
check_run_unwritable
check_weights_tool_errors

check_inferred_outputs
check_yaml_loops
check_sizes_wrap
check_deep_nesting
check_outputs
check_nan_weights
check_checkpoint_refusals
check_hf_import
check_hf_import_errors
check_config_mismatch

check_run_messages
check_interactive_terminal
check_run_overwrites
check_plan_overwrites
check_weights_overwrites

echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
