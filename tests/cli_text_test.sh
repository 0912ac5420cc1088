#!/usr/bin/env bash
# Command-line tests for text in, text out: mktoken, and mkrun --prompt/--prompt-file/--chat/
# --json/--ignore-eos on the emulator, with the checkpoint of tests/fixtures/eos_fixture.cpp, whose greedy
# continuation is "oké!" followed by <|eot_id|> (then "." forever). Errors must end in exit
# status 1 with one line on stderr starting with the tool's name.
#
# Usage: tests/cli_text_test.sh BUILD_DIR   (BUILD_DIR holds mkplan, mkrun, mktoken, mk_eos_fixture)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 2
# shellcheck source=tests/cli_harness.sh
source "$ROOT/tests/cli_harness.sh"
cli_begin cli_text_test "mkplan mkrun mktoken mk_eos_fixture" "$@"
MKPLAN=$BUILD/mkplan
MKRUN=$BUILD/mkrun
MKTOKEN=$BUILD/mktoken
FIXTURE=$BUILD/mk_eos_fixture
stdout_is() { [[ "$(cat "$WORK/stdout")" == "$1" ]]; }
clean_error() {
  local tool=$1 pattern=$2
  expect "exit status is $RC, expected 1" rc_is 1
  expect "stderr has $(wc -l <"$WORK/stderr") lines, expected exactly 1" test "$(wc -l <"$WORK/stderr")" -eq 1
  expect "stderr does not start with '$tool: '" test "$(head -n 1 "$WORK/stderr" | cut -d' ' -f1)" == "$tool:"
  expect "stderr does not match /$pattern/" err_has "$pattern"
}

"$MKPLAN" "$ROOT/tests/tokenizer/eos-llama.yaml" -o s.bin --sms 4 -q >/dev/null 2>&1
"$FIXTURE" s.bin w >/dev/null 2>&1
EMU=(--backend emulator)

check_mktoken() {
  begin
  run "$MKTOKEN" w "Hi"
  expect "encode: exit $RC" rc_is 0
  expect "encode 'Hi' is '$(cat stdout)', expected 256,72,105" stdout_is "256,72,105"
  run "$MKTOKEN" w --decode 256,72,105,260
  expect "decode: exit $RC" rc_is 0
  expect "decode gave '$(cat stdout)'" stdout_is "<|begin_of_text|>Hi<|eot_id|>"
  run "$MKTOKEN" w --decode 256,72,105,260 --skip-special
  expect "decode --skip-special gave '$(cat stdout)'" stdout_is "Hi"
  printf 'Hi\n' >prompt.txt
  run "$MKTOKEN" w --file prompt.txt --no-add-special
  expect "--file gave '$(cat stdout)', expected 72,105,10" stdout_is "72,105,10"
  run "$MKTOKEN" w "a<|eot_id|>" --no-add-special --no-parse-special
  expect "--no-parse-special gave '$(cat stdout)'" test "$(tr ',' '\n' <stdout | wc -l)" -gt 2
  finish "mktoken encodes TEXT and --file, decodes --decode (with and without special tokens)"
  begin
  mkfifo prompt.fifo
  run "$MKTOKEN" w --file prompt.fifo
  clean_error mktoken "prompt.fifo: not a regular file"
  finish "mktoken --file on a FIFO: refused at once instead of blocking"
}

check_mktoken_batch() {
  begin
  printf 'Hi\n\nok\r\nlast' >lines.txt
  run "$MKTOKEN" w --lines lines.txt
  expect "--lines: exit $RC" rc_is 0
  expect "--lines gave '$(cat stdout)'" stdout_is $'256,72,105\n256\n256,111,107\n256,108,97,115,116'
  run "$MKTOKEN" w --lines - --no-add-special <lines.txt
  expect "--lines - (stdin): exit $RC" rc_is 0
  expect "--lines - --no-add-special gave '$(cat stdout)'" stdout_is $'72,105\n\n111,107\n108,97,115,116'
  printf '"Hi"\n{"text": "ok", "n": 1}\n"\\u00e9"\n' >in.jsonl
  run "$MKTOKEN" w --jsonl in.jsonl
  expect "--jsonl: exit $RC" rc_is 0
  expect "--jsonl gave '$(cat stdout)'" stdout_is $'{"ids":[256,72,105]}\n{"ids":[256,111,107]}\n{"ids":[256,195,169]}'
  run "$MKTOKEN" w --jsonl - --time <in.jsonl
  expect "--jsonl - gave '$(cat stdout)'" stdout_is $'{"ids":[256,72,105]}\n{"ids":[256,111,107]}\n{"ids":[256,195,169]}'
  expect "--time: no load time on stderr" err_has '^mktoken: loaded .*tokenizer.json \(261 ids\) in [0-9.]+ ms$'
  expect "--time: no encode time on stderr" err_has '^mktoken: encoded 3 texts \(6 bytes, 9 ids\) in [0-9.]+ ms'
  finish "mktoken --lines and --jsonl: one line of ids per line, from a file or stdin; --time"
  begin
  # The order of many lines: each line's ids are its bytes after the BOS (the fixture is byte-level).
  : >many.txt
  : >want.txt
  local i line
  for ((i = 0; i < 300; ++i)); do
    line="n$i $((i * 7919 % 1000))é ${i: -1}"
    printf '%s\n' "$line" >>many.txt
    printf '256%s\n' "$(printf '%s' "$line" | od -An -tu1 -v | tr -s ' \n' ',,' | sed 's/,$//')" >>want.txt
  done
  run "$MKTOKEN" w --lines - <many.txt
  expect "--lines on 300 lines: exit $RC" rc_is 0
  expect "--lines on 300 lines: the output differs from each line's bytes in order ($(diff stdout want.txt | head -2 | tr '\n' ' '))" \
    cmp -s stdout want.txt
  finish "mktoken --lines keeps the input's order (300 lines)"
  begin
  printf '"Hi"\n{"text": "ok"\n"after"\n' >bad.jsonl
  run "$MKTOKEN" w --jsonl bad.jsonl
  clean_error mktoken "bad.jsonl: line 2, column 14: not valid JSON: unexpected end of text"
  expect "invalid JSON line: stdout is '$(cat stdout)', expected the first line's ids only" stdout_is '{"ids":[256,72,105]}'
  printf '"Hi"\n{"text": 5}\n' >bad.jsonl
  run "$MKTOKEN" w --jsonl - <bad.jsonl
  clean_error mktoken 'stdin: line 2: "text" is 5, not a string'
  printf '[1]\n' >bad.jsonl
  run "$MKTOKEN" w --jsonl bad.jsonl
  clean_error mktoken 'line 1: expected a JSON string or an object with a "text" string, not an array'
  printf '"a"\n\n' >bad.jsonl
  run "$MKTOKEN" w --jsonl bad.jsonl
  clean_error mktoken "line 2: .*not a blank line"
  run "$MKTOKEN" w --lines nowhere.txt
  clean_error mktoken "nowhere.txt: cannot open"
  mkfifo lines.fifo
  run "$MKTOKEN" w --lines lines.fifo
  clean_error mktoken "lines.fifo: not a regular file"
  run "$MKTOKEN" w --lines lines.txt --tokens
  clean_error mktoken "--tokens goes with one text"
  run "$MKTOKEN" w "Hi" --jsonl in.jsonl
  clean_error mktoken "exactly one of"
  finish "mktoken --jsonl and --lines refuse bad input with the line: invalid JSON, the wrong type, a blank line, a FIFO"
}

check_mktoken_real() {
  local models=${MK_TOKENIZER_MODELS:-$ROOT/tests/tokenizer/models}
  if [[ ! -f $models/llama3_1/tokenizer.json ]]; then
    skip "mktoken on the real Llama-3.1 and Qwen3 tokenizers" "no tokenizer files in $models: run scripts/fetch_tokenizers.sh"
    return
  fi
  begin
  run "$MKTOKEN" "$models/llama3_1" "Hello world" --time
  expect "Llama-3.1 'Hello world' is '$(cat stdout)'" stdout_is "128000,9906,1917"
  expect "Llama-3.1 --time: no load time on stderr" err_has '^mktoken: loaded .*tokenizer.json \(128256 ids\) in [0-9.]+ ms$'
  run "$MKTOKEN" "$models/qwen3" --decode 9707,1879
  expect "Qwen3 decode is '$(cat stdout)'" stdout_is "Hello world"
  finish "mktoken on the real Llama-3.1 and Qwen3 tokenizers"
}

check_mktoken_errors() {
  begin
  run "$MKTOKEN" nowhere "Hi"
  clean_error mktoken "tokenizer.json: not found"
  run "$MKTOKEN" w
  clean_error mktoken "exactly one of"
  run "$MKTOKEN" w "Hi" --decode 1
  clean_error mktoken "exactly one of"
  run "$MKTOKEN" w --decode 1,x
  clean_error mktoken "not a token id"
  run "$MKTOKEN" w --decode 99999
  clean_error mktoken "outside the vocabulary"
  run "$MKTOKEN" w --file nowhere.txt
  clean_error mktoken "cannot open"
  finish "mktoken errors: missing tokenizer, no input, two inputs, bad ids, missing file"
}

check_prompt_stops_at_eos() {
  begin
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt Hi --tokens 20
  expect "exit $RC" rc_is 0
  expect "stdout is '$(cat stdout)', expected 'oké!'" stdout_is "oké!"
  expect "stderr does not say it stopped at the end of sequence" err_has "stopped at end of sequence"
  expect "stderr has no prompt/generation rates" err_has "prompt: 3 tokens, .* tokens/s; generated: 6 tokens"
  finish "mkrun --prompt streams the text to stdout and stops at generation_config's eos_token_id"
}

check_prompt_file_and_chat() {
  begin
  printf 'Hi' >hi.txt
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt-file hi.txt --tokens 20
  expect "--prompt-file: stdout is '$(cat stdout)'" stdout_is "oké!"
  run "$MKRUN" s.bin w "${EMU[@]}" --chat --prompt "Write a haiku about GPUs" --tokens 20
  expect "--chat: exit $RC" rc_is 0
  expect "--chat: stdout is '$(cat stdout)'" stdout_is "oké!"
  run "$MKRUN" s.bin w "${EMU[@]}" --chat --system "Be brief." --prompt "Hi" --tokens 20 --json
  expect "--chat --system --json: exit $RC" rc_is 0
  # <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>...
  expect "--chat --system: prompt ids do not start with the system header" out_has '"prompt_ids":\[256,258,115,121,115,116,101,109,259,10,10,66,101'
  finish "mkrun --prompt-file, --chat and --chat --system (Llama-3 header format) stop at the end of the turn"
}

check_ignore_eos_and_tokens() {
  begin
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt Hi --tokens 10 --ignore-eos
  expect "--ignore-eos: stdout is '$(cat stdout)', expected 'oké!....'" stdout_is "oké!...."
  expect "--ignore-eos: stderr does not say --tokens was reached" err_has "tokens reached"
  # Three tokens end inside the é: the held-back byte becomes U+FFFD at the end.
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt Hi --tokens 3
  expect "--tokens 3: stdout is '$(cat stdout)', expected 'ok\xEF\xBF\xBD'" stdout_is $'ok\xEF\xBF\xBD'
  finish "mkrun --ignore-eos runs to --tokens; --tokens stays the maximum; an incomplete character is held back"
}

check_eos_from_config() {
  begin
  cp -r w w2
  rm w2/generation_config.json  # config.json's eos_token_id is 257, which the model never writes
  run "$MKRUN" s.bin w2 "${EMU[@]}" --prompt Hi --tokens 8
  expect "config.json eos: stdout is '$(cat stdout)', expected 'oké!..'" stdout_is "oké!.."
  run "$MKRUN" s.bin w2 "${EMU[@]}" --chat --prompt Hi --tokens 8
  expect "--chat stops at <|eot_id|> even when eos_token_id does not name it: '$(cat stdout)'" stdout_is "oké!"
  echo '{"eos_token_id": 260}' >w2/config.json
  run "$MKRUN" s.bin w2 "${EMU[@]}" --prompt Hi --tokens 8
  expect "config.json eos 260: stdout is '$(cat stdout)'" stdout_is "oké!"
  finish "mkrun reads eos_token_id from config.json (an id) without generation_config.json"
}

check_json() {
  begin
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt Hi --tokens 20 --json
  expect "--json: exit $RC" rc_is 0
  expect "--json: stdout is not one line" test "$(wc -l <stdout)" -eq 1
  expect "--json: no ids" out_has '"ids":\[111,107,195,169,33,260\]'
  expect "--json: no text" out_has '"text":"oké!"'
  expect "--json: no stop reason" out_has '"stop":"eos"'
  expect "--json: no timings" out_has '"timings":\{.*"decode_tokens_per_s":'
  expect "--json: no prompt ids" out_has '"prompt_ids":\[256,72,105\]'
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt-ids 256,72,105 --tokens 4 --json
  expect "--prompt-ids --json: ids" out_has '"ids":\[111,107,195,169\]'
  expect "--prompt-ids --json: stop" out_has '"stop":"length"'
  finish "mkrun --json prints one object with prompt ids, ids, text, stop reason and timings"
}

check_prompt_ids_unchanged() {
  begin
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt-ids 256,72,105 --tokens 8
  expect "--prompt-ids: exit $RC" rc_is 0
  expect "--prompt-ids: tokens line is '$(head -1 stdout)'" out_has '^tokens: 111 107 195 169 33 260 46 46$'
  finish "mkrun --prompt-ids still prints the ids and runs exactly --tokens steps"
}

check_text_errors() {
  begin
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt Hi --system x
  clean_error mkrun "--system needs --chat"
  run "$MKRUN" s.bin w "${EMU[@]}" --chat --prompt-ids 1,2
  clean_error mkrun "--chat takes --prompt"
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt Hi --prompt-ids 1,2
  clean_error mkrun "excludes"
  mkdir -p bare && cp w/model.safetensors bare/
  run "$MKRUN" s.bin bare "${EMU[@]}" --prompt Hi
  clean_error mkrun "tokenizer.json: not found"
  cp -r w w3
  sed -i 's/"chat_template": ".*"/"chat_template": "{{ messages }}"/' w3/tokenizer_config.json
  run "$MKRUN" s.bin w3 "${EMU[@]}" --chat --prompt Hi
  clean_error mkrun "chat_template .* is not a format --chat knows"
  echo '{"eos_token_id": "x"}' >w3/generation_config.json
  run "$MKRUN" s.bin w3 "${EMU[@]}" --prompt Hi
  clean_error mkrun "eos_token_id must be a token id"
  run "$MKRUN" s.bin w "${EMU[@]}" --prompt-file nowhere.txt
  clean_error mkrun "nowhere.txt: cannot open"
  finish "mkrun text errors: --system without --chat, --chat with ids, two prompts, no tokenizer, unknown chat template, bad eos, missing file"
}

check_sampling() {
  begin
  sed 's/{op: argmax, in: logits, out: next_token[^}]*}/{op: sample, in: logits, out: next_token}/' "$ROOT/examples/tiny-llama.yaml" >sample.yaml
  expect "sample.yaml has the sample op in place of the argmax" grep -q 'op: sample' sample.yaml
  "$MKPLAN" "$ROOT/examples/tiny-llama.yaml" -o argmax.bin --sms 4 -q >/dev/null 2>&1
  "$MKPLAN" sample.yaml -o sample.bin --sms 4 -q >/dev/null 2>&1
  "$BUILD/mkweights" argmax.bin -o wr --seed 3 >/dev/null 2>&1
  run "$MKRUN" argmax.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --tokens 8
  local greedy
  greedy=$(head -1 stdout)
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --tokens 8
  expect "sample op at temperature 0 gives '$(head -1 stdout)', argmax '$greedy'" test "$(head -1 stdout)" == "$greedy"
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --tokens 8 --temperature 1000 --seed 1
  local first
  first=$(head -1 stdout)
  expect "--temperature 1000: exit $RC" rc_is 0
  expect "--temperature 1000 gives the greedy tokens" test "$first" != "$greedy"
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --tokens 8 --temperature 1000 --seed 1 --order shuffled
  expect "the same seed gave '$(head -1 stdout)', then '$first'" test "$(head -1 stdout)" == "$first"
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --tokens 8 --temperature 1000 --seed 2
  expect "another seed gave the same tokens" test "$(head -1 stdout)" != "$first"
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --tokens 8 --temperature 1000 --seed 2 --top-k 1
  expect "--top-k 1 is not greedy: '$(head -1 stdout)'" test "$(head -1 stdout)" == "$greedy"
  run "$MKRUN" argmax.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --temperature 0.8
  clean_error mkrun "decodes greedily .*op: sample"
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --top-p 1.5
  clean_error mkrun "--top-p must be in"
  run "$MKRUN" sample.bin wr "${EMU[@]}" --prompt-ids 1,2,3 --top-k 513 --temperature 1
  clean_error mkrun "larger than the vocabulary"
  finish "mkrun --temperature/--top-k/--seed on a schedule with a sample op: greedy at 0, reproducible per seed"
}

# run_with_input FILE CMD...: run, with stdin from FILE.
run_with_input() {
  local input=$1
  shift
  LAST="$* < $input"
  "${TIMEOUT[@]}" "$@" <"$input" >"$WORK/stdout" 2>"$WORK/stderr"
  RC=$?
}

check_interactive() {
  begin
  printf 'Hi\n\nHow are you?\r\n' >turns.txt
  run_with_input turns.txt "$MKRUN" s.bin w "${EMU[@]}" --interactive
  expect "exit $RC" rc_is 0
  expect "stdout is '$(cat stdout)', expected two replies" stdout_is $'oké!\noké!'
  # Turn 1: BOS, the user header, "Hi", the assistant header (25 tokens), then 6 generated, the
  # last (<|eot_id|>) not decoded: 30 positions. Turn 2 starts with that <|eot_id|>, no BOS: 35
  # tokens for "How are you?" (its \r dropped), and 40 positions more. The empty line is skipped.
  expect "turn 1's prompt or positions" err_has '^\[prompt 25 tokens, .*; reply 6 tokens, .*; context 30 of 4096\]$'
  expect "turn 2's prompt or positions" err_has '^\[prompt 35 tokens, .*; reply 6 tokens, .*; context 70 of 4096\]$'
  expect "stderr has $(wc -l <stderr) lines, expected 2" test "$(wc -l <stderr)" -eq 2
  printf 'second\n \t \nthird' >turn2.txt
  run_with_input turn2.txt "$MKRUN" s.bin w "${EMU[@]}" -i --prompt first --system "Be brief." --tokens 3
  expect "--prompt then stdin: stdout is '$(cat stdout)'" stdout_is $'ok\xEF\xBF\xBD\nok\xEF\xBF\xBD\nok\xEF\xBF\xBD'
  expect "--tokens 3 is not each reply's maximum" test "$(grep -c 'reply 3 tokens, .*cut at --tokens' stderr)" -eq 3
  # With the system turn, 48 tokens, then 3 generated: 50 positions. A reply cut short keeps its
  # last token (shown, not yet decoded): the next turn decodes it first, then <|eot_id|> and the
  # rest, 1 + 29 tokens for "second" and 1 + 28 for "third" (the blank line skipped, the last
  # line without its newline taken).
  expect "turn 1 with --system" err_has '^\[prompt 48 tokens, .*; context 50 of 4096\]$'
  expect "turn 2 after a cut reply" err_has '^\[prompt 30 tokens, .*; context 82 of 4096\]$'
  expect "turn 3 after a cut reply" err_has '^\[prompt 29 tokens, .*; context 113 of 4096\]$'
  printf 'line one\\\nline two\n' >continued.txt
  run_with_input continued.txt "$MKRUN" s.bin w "${EMU[@]}" -i
  expect "a continued line: stdout is '$(cat stdout)', expected one reply" stdout_is 'oké!'
  expect "a continued line is not one message of 17 bytes" err_has '^\[prompt 40 tokens, '
  finish "mkrun --interactive: a reply a line of stdin (after --prompt), earlier turns kept in the KV cache, each turn's prompt from where the last ended; a trailing backslash continues a message"
  begin
  printf 'one\ntwo\nthree\n' >three.txt
  run_with_input three.txt "$MKRUN" s.bin w "${EMU[@]}" -i --max-context 70
  expect "exit $RC, expected 1" rc_is 1
  expect "stdout is '$(cat stdout)', expected the two replies that fit" stdout_is $'oké!\noké!'
  expect "the last stderr line is not the error" test "$(tail -n 1 stderr)" == \
    "mkrun: the conversation has filled its context: 62 positions used, 28 more asked, 70 in all; raise --max-context"
  finish "mkrun --interactive: a turn past --max-context ends the conversation with one clear line, exit 1"
  begin
  run "$MKRUN" s.bin w "${EMU[@]}" -i --json
  clean_error mkrun "--interactive does not take --json"
  run "$MKRUN" s.bin w "${EMU[@]}" -i --prompt-ids 1,2
  clean_error mkrun "--interactive takes text"
  run "$MKRUN" s.bin w "${EMU[@]}" -i --tokens 0
  clean_error mkrun "--tokens of at least 1"
  run "$MKRUN" s.bin w "${EMU[@]}" --chat
  clean_error mkrun "--chat needs --prompt or --prompt-file \(or --interactive, --batch\)"
  finish "mkrun --interactive refuses --json, --prompt-ids and --tokens 0; --chat alone names --interactive"
}

check_help() {
  begin
  run "$MKRUN" --help
  local opt
  for opt in --prompt --prompt-file --chat --interactive --system --ignore-eos --json --tokenizer --temperature --top-k --top-p --seed; do
    expect "mkrun --help does not mention $opt" out_has "(^|[^-[:alnum:]])$opt([^-[:alnum:]]|\$)"
  done
  run "$MKTOKEN" --help
  expect "mktoken --help: exit $RC" rc_is 0
  for opt in --file --lines --jsonl --decode --skip-special --no-add-special --no-parse-special --tokens --time --version; do
    expect "mktoken --help does not mention $opt" out_has "(^|[^-[:alnum:]])$opt([^-[:alnum:]]|\$)"
  done
  expect "mktoken --help: no usage line 'Usage: mktoken DIR ...'" out_has '^Usage: mktoken DIR '
  expect "mktoken --help: no examples" out_has '^  mktoken weights/ --lines '
  run "$MKTOKEN" --version
  expect "mktoken --version: exit $RC" rc_is 0
  expect "mktoken --version says '$(cat stdout)'" out_has '^mktoken, megakernel'
  run "$MKTOKEN" w --lnes x.txt
  clean_error mktoken "unknown option --lnes; did you mean --lines\\?"
  finish "mkrun --help and mktoken --help name the text and sampling options"
}

check_help
check_mktoken
check_mktoken_batch
check_mktoken_real
check_mktoken_errors
check_prompt_stops_at_eos
check_prompt_file_and_chat
check_ignore_eos_and_tokens
check_eos_from_config
check_json
check_prompt_ids_unchanged
check_text_errors
check_sampling
check_interactive

echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
