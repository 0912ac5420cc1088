#!/usr/bin/env bash
# Command-line tests of steps of many tokens on the emulator: mkplan --max-tokens, mkrun
# prefilling a prompt in chunks (the same tokens as one position a step), and mkrun --batch (each
# prompt's tokens those of its own run; --json; --dump-logits; refusals, one line each).
#
# Usage: tests/cli_batch_test.sh BUILD_DIR   (BUILD_DIR holds mkplan, mkweights and mkrun)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 2
# shellcheck source=tests/cli_harness.sh
source "$ROOT/tests/cli_harness.sh"
cli_begin cli_batch_test "mkplan mkweights mkrun" "$@"
MKPLAN=$BUILD/mkplan
MKWEIGHTS=$BUILD/mkweights
MKRUN=$BUILD/mkrun
clean_error() {
  local pattern=$1
  expect "exit status is $RC, expected 1" rc_is 1
  expect "stderr has $(wc -l <"$WORK/stderr") lines, expected exactly 1" test "$(wc -l <"$WORK/stderr")" -eq 1
  expect "stderr does not match /$pattern/" err_has "$pattern"
  expect "something was printed on stdout" test ! -s "$WORK/stdout"
}
ids_of() { sed -n 's/^tokens: //p' "$1"; }
json_ids() { python3 -c 'import json,sys; print(" ".join(map(str, json.loads(sys.stdin.readlines()[int(sys.argv[1])])["ids"])))' "$1" <"$WORK/stdout"; }

"$MKPLAN" "$ROOT/examples/tiny-llama.yaml" -o t1.bin -q
"$MKPLAN" "$ROOT/examples/tiny-llama.yaml" -o t4.bin --max-tokens 4 -q
"$MKWEIGHTS" t1.bin -o w --seed 5 >/dev/null
PROMPT=5,9,400,17,3,8,81

check_chunks() {
  begin
  run "$MKRUN" t1.bin w --backend emulator --prompt-ids $PROMPT --tokens 12
  expect "the one-row plan did not decode (exit $RC)" rc_is 0
  ids_of "$WORK/stdout" >one.txt
  run "$MKRUN" t4.bin w --backend emulator --prompt-ids $PROMPT --tokens 12
  expect "the four-row plan did not decode (exit $RC)" rc_is 0
  expect "a prompt in chunks of four gave other tokens than one position a step" test "$(ids_of "$WORK/stdout")" = "$(cat one.txt)"
  expect "no tokens printed" test -s one.txt
  finish "mkrun prefills a prompt in chunks of the schedule's max_tokens: the tokens of one position a step"
}

check_batch() {
  begin
  printf '[[5,9,400,17,3,8,81], {"ids": [2, 7], "tokens": 3}, [400]]\n' >b.json
  "$MKRUN" t1.bin w --backend emulator --prompt-ids 2,7 --tokens 3 >own2.txt
  "$MKRUN" t1.bin w --backend emulator --prompt-ids 400 --tokens 12 >own3.txt
  run "$MKRUN" t4.bin w --backend emulator --batch b.json --tokens 12 --json
  expect "the batch did not run (exit $RC)" rc_is 0
  expect "not one JSON object a prompt" test "$(wc -l <"$WORK/stdout")" = 3
  expect "the first prompt's tokens are not those of its own run" test "$(json_ids 0)" = "$(cat one.txt)"
  expect "the second (its own token count) are not those of its own run" test "$(json_ids 1)" = "$(ids_of own2.txt)"
  expect "the third's are not those of its own run" test "$(json_ids 2)" = "$(ids_of own3.txt)"
  expect "not in order" test "$(python3 -c 'import json,sys; print([json.loads(l)["index"] for l in sys.stdin])' <"$WORK/stdout")" = "[0, 1, 2]"
  finish "mkrun --batch FILE (a JSON list of id lists and objects): each prompt's tokens those of its own run, in order"

  begin
  printf '[2, 7]\n' >ids2.txt
  run "$MKRUN" t4.bin w --backend emulator --batch b.json --tokens 4 --dump-logits l.npy
  expect "it did not run (exit $RC)" rc_is 0
  expect "no logits file for each sequence, named by its index" test -f l.0.npy -a -f l.1.npy -a -f l.2.npy
  expect "sequence 1's logits are not its 2 prompt positions and 2 more, of 512" \
    python3 -c 'import sys; d = open("l.1.npy", "rb").read(128).decode("latin1"); sys.exit(0 if "(4, 512)" in d else 1)'
  finish "mkrun --batch --dump-logits F writes each sequence's logits to F with its index before .npy"
}

check_batch_errors() {
  begin
  printf '[[1,2],[3],[4],[5],[6]]\n' >five.json
  run "$MKRUN" t4.bin w --backend emulator --batch five.json
  clean_error "more than the schedule's max_tokens \(4\); plan with mkplan --max-tokens 5"
  printf '[[1,2],[]]\n' >empty.json
  run "$MKRUN" t4.bin w --backend emulator --batch empty.json
  clean_error "empty.json item 2: the prompt is empty"
  printf '[[1,2],{"ids":[3],"tokens":0}]\n' >zero.json
  run "$MKRUN" t4.bin w --backend emulator --batch zero.json
  clean_error 'zero.json item 2: "tokens" must be a whole number from 1 to 16777216'
  printf '[[1,2],{"text":"x"}]\n' >key.json
  run "$MKRUN" t4.bin w --backend emulator --batch key.json
  clean_error "key.json item 2: unknown key 'text' \(expected prompt, ids, tokens\)"
  printf '[[1,2],[3, -1]]\n' >neg.json
  run "$MKRUN" t4.bin w --backend emulator --batch neg.json
  clean_error "neg.json item 2: token ids must be non-negative integers"
  printf '{"ids": [1]}\n' >obj.json
  run "$MKRUN" t4.bin w --backend emulator --batch obj.json
  clean_error "obj.json: expected a JSON list of prompts"
  printf '[[1, 2], [3' >cut.json
  run "$MKRUN" t4.bin w --backend emulator --batch cut.json
  clean_error "cut.json: "
  printf 'hello\n' >lines.txt
  run "$MKRUN" t4.bin w --backend emulator --batch lines.txt
  clean_error "w/tokenizer.json: not found"
  printf '\n\n' >blank.txt
  run "$MKRUN" t4.bin w --backend emulator --batch blank.txt
  clean_error "blank.txt: no prompt"
  run "$MKRUN" t4.bin w --backend emulator --batch b.json --prompt-ids 1
  clean_error "--prompt-ids excludes --batch"
  run "$MKRUN" t4.bin w --backend emulator --batch b.json --max-context 8
  clean_error "sequence 1: 22 positions do not fit a context of 8 positions"
  run "$MKRUN" t4.bin w --backend emulator --batch b.json --max-context 1000000000
  clean_error "3 sequences of 1000000000 positions needs"
  finish "mkrun --batch refuses, in one line and before any step: more prompts than max_tokens, empty prompts, bad items, contexts"
}

check_chunks
check_batch
check_batch_errors

echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
