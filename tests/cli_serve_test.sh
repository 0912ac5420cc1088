#!/usr/bin/env bash
# mkserve over loopback, on the emulator, with the checkpoint and tokenizer of
# tests/fixtures/eos_fixture.cpp (greedy continuation of "Hi": "oké!" then <|eot_id|>; of ".": "."
# forever): the answers against mkrun's for the same prompts (completions and chat, whole and
# streamed, with their usage), the SSE framing, the hostile requests (each status and an
# OpenAI-style error, the next request still served), a full queue (503), a client that leaves
# mid-stream (its slot comes back), 200 requests from 16 clients at once, the official openai
# npm client (tests/serve/openai_client.mjs; skipped, saying so, without its package:
# scripts/fetch_test_deps.sh), and SIGTERM (exit 0).
#
# Usage: tests/cli_serve_test.sh BUILD_DIR   (BUILD_DIR holds mkplan, mkrun, mkserve, mk_eos_fixture)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 2
# shellcheck source=tests/cli_harness.sh
source "$ROOT/tests/cli_harness.sh"
cli_begin cli_serve_test "mkplan mkrun mkserve mk_eos_fixture" "$@"
command -v curl >/dev/null || { echo "cli_serve_test: curl is needed (apt-get install curl)" >&2; exit 2; }
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BUILD/mkplan" "$ROOT/tests/tokenizer/eos-llama.yaml" -o s.bin --sms 4 --max-tokens 4 -q >/dev/null 2>&1 || exit 2
"$BUILD/mk_eos_fixture" s.bin w >/dev/null 2>&1 || exit 2
KEY=secret

# start_server NAME ARGS...: mkserve on a free port, its stderr in NAME.log; sets URL and SERVER.
start_server() {
  local name=$1
  shift
  "$BUILD/mkserve" s.bin w --backend emulator --port 0 --api-key "$KEY" "$@" 2>"$name.log" &
  SERVER=$!
  PIDS+=("$SERVER")
  local port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$name.log")
    [[ -n $port ]] && break
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.05
  done
  [[ -n $port ]] || { echo "cli_serve_test: mkserve did not start:" >&2; cat "$name.log" >&2; exit 1; }
  URL=http://127.0.0.1:$port
}

# post PATH BODY [CURL ARGS...]: the status in STATUS, the body in $WORK/stdout.
post() {
  local path=$1 body=$2
  shift 2
  STATUS=$(curl -s -o "$WORK/stdout" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    --max-time 60 -d "$body" "$@" "$URL$path")
}
json_get() { python3 -c "import json,sys; d=json.load(open('$WORK/stdout')); print($1)"; }
healthy() { [[ $(curl -s -o /dev/null -w '%{http_code}' "$URL/health") == 200 ]]; }

start_server main --max-context 2048 --queue 64
MAIN_URL=$URL

# What mkrun gives for the same prompts.
"$BUILD/mkrun" s.bin w --backend emulator --prompt Hi --tokens 8 --json >mkrun_hi.json 2>/dev/null
"$BUILD/mkrun" s.bin w --backend emulator --chat --prompt Hi --tokens 8 --json >mkrun_chat.json 2>/dev/null
want_hi=$(python3 -c "import json; print(json.load(open('mkrun_hi.json'))['text'])")
want_chat=$(python3 -c "import json; print(json.load(open('mkrun_chat.json'))['text'])")
hi_prompt=$(python3 -c "import json; print(len(json.load(open('mkrun_hi.json'))['prompt_ids']))")
chat_prompt=$(python3 -c "import json; print(len(json.load(open('mkrun_chat.json'))['prompt_ids']))")
hi_tokens=$(python3 -c "import json; print(len(json.load(open('mkrun_hi.json'))['ids']))")

check_answers() {
  begin
  expect "mkrun's text for 'Hi' is '$want_hi', expected oké!" test "$want_hi" == "oké!"
  post /v1/completions '{"model": "m", "prompt": "Hi", "max_tokens": 8}'
  expect "completions: status $STATUS" test "$STATUS" == 200
  expect "completions: text differs from mkrun's ($want_hi)" test "$(json_get "d['choices'][0]['text']")" == "$want_hi"
  expect "completions: finish_reason" test "$(json_get "d['choices'][0]['finish_reason']")" == stop
  expect "completions: usage.prompt_tokens" test "$(json_get "d['usage']['prompt_tokens']")" == "$hi_prompt"
  expect "completions: usage.completion_tokens" test "$(json_get "d['usage']['completion_tokens']")" == "$hi_tokens"
  expect "completions: object" test "$(json_get "d['object']")" == text_completion
  post /v1/chat/completions '{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}'
  expect "chat: status $STATUS" test "$STATUS" == 200
  expect "chat: content differs from mkrun --chat's ($want_chat)" test "$(json_get "d['choices'][0]['message']['content']")" == "$want_chat"
  expect "chat: role" test "$(json_get "d['choices'][0]['message']['role']")" == assistant
  expect "chat: usage.prompt_tokens" test "$(json_get "d['usage']['prompt_tokens']")" == "$chat_prompt"
  post /v1/completions '{"prompt": ".", "max_tokens": 5}'
  expect "a length stop: text" test "$(json_get "d['choices'][0]['text']")" == "....."
  expect "a length stop: finish_reason" test "$(json_get "d['choices'][0]['finish_reason']")" == length
  post /v1/completions '{"prompt": "Hi", "max_tokens": 8, "stop": ["k"]}'
  expect "stop string: text '$(json_get "d['choices'][0]['text']")', expected o" test "$(json_get "d['choices'][0]['text']")" == o
  expect "stop string: finish_reason" test "$(json_get "d['choices'][0]['finish_reason']")" == stop
  post /v1/completions '{"prompt": "Hi", "max_tokens": 8, "stop": "é!"}'
  expect "stop string across a split character: text" test "$(json_get "d['choices'][0]['text']")" == ok
  run curl -s -H "Authorization: Bearer $KEY" "$URL/v1/models"
  expect "/v1/models does not list w" out_has '"id":"w"'
  run curl -s "$URL/health"
  expect "/health: $(cat stdout)" out_has '"status":"ok"'
  expect "/health: slots" out_has '"slots":4'
  finish "completions and chat answer as mkrun does (text, finish_reason, usage); stop strings; /v1/models, /health"
}

check_stream() {
  begin
  post /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": true, "stream_options": {"include_usage": true}}'
  expect "status $STATUS" test "$STATUS" == 200
  cp stdout sse.txt
  expect "an event line is not 'data: ...' followed by a blank line" python3 - sse.txt <<'EOF'
import sys
text = open(sys.argv[1]).read()
events = text.split("\n\n")
assert events[-1] == "", "the stream does not end with a blank line"
assert all(e.startswith("data: ") and "\n" not in e for e in events[:-1]), events
EOF
  expect "the last event is not data: [DONE]" test "$(tail -n 2 sse.txt | head -n 1)" == "data: [DONE]"
  local got
  got=$(python3 - sse.txt <<'EOF'
import json, sys
events = [e[6:] for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: ") and e != "data: [DONE]"]
chunks = [json.loads(e) for e in events]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
usage = [c["usage"] for c in chunks if c.get("usage")]
print(text, finish, usage[0]["prompt_tokens"], usage[0]["completion_tokens"])
EOF
  )
  expect "streamed chat: '$got', expected '$want_chat ['stop'] $chat_prompt ...'" test "${got%% *}" == "$want_chat"
  expect "streamed chat: finish or usage: $got" test "${got#* }" == "['stop'] $chat_prompt $hi_tokens"
  post /v1/completions '{"prompt": "Hi", "max_tokens": 8, "stream": true}'
  got=$(python3 -c "
import json
ev=[e[6:] for e in open('$WORK/stdout').read().split('\n\n') if e.startswith('data: ') and e!='data: [DONE]']
print(''.join(json.loads(e)['choices'][0]['text'] for e in ev))")
  expect "streamed completion: '$got', expected '$want_hi'" test "$got" == "$want_hi"
  finish "streaming: server-sent events (data: lines, a blank line each, data: [DONE] last), the same text, finish_reason and usage"
}

# hostile STATUS WHAT CURL-ARGS...: the request gets STATUS and an OpenAI-style error; the server
# still answers the next request.
hostile() {
  local want=$1 what=$2
  shift 2
  begin
  STATUS=$(curl -s -o "$WORK/stdout" -w '%{http_code}' --max-time 30 "$@")
  expect "status $STATUS, expected $want" test "$STATUS" == "$want"
  expect "no error object with a message: $(head -c 300 stdout)" python3 -c "
import json; d=json.load(open('$WORK/stdout')); assert isinstance(d['error']['message'], str) and d['error']['message'] and 'type' in d['error']"
  post /v1/completions '{"prompt": "Hi", "max_tokens": 8}'
  expect "the next request: status $STATUS" test "$STATUS" == 200
  finish "$what: HTTP $want with an error object, and the server serves the next request"
}

check_hostile() {
  local auth=(-H "Authorization: Bearer $KEY" -H 'Content-Type: application/json')
  hostile 400 "malformed JSON" "${auth[@]}" -d '{"prompt": "Hi",' "$URL/v1/completions"
  hostile 400 "a body that is not an object" "${auth[@]}" -d '[1, 2]' "$URL/v1/completions"
  hostile 400 "max_tokens 0" "${auth[@]}" -d '{"prompt": "Hi", "max_tokens": 0}' "$URL/v1/completions"
  hostile 400 "max_tokens -3" "${auth[@]}" -d '{"prompt": "Hi", "max_tokens": -3}' "$URL/v1/chat/completions"
  hostile 400 "max_tokens as a string" "${auth[@]}" -d '{"prompt": "Hi", "max_tokens": "8"}' "$URL/v1/completions"
  hostile 400 "stream as a string" "${auth[@]}" -d '{"prompt": "Hi", "stream": "yes"}' "$URL/v1/completions"
  hostile 400 "messages as a string" "${auth[@]}" -d '{"messages": "Hi"}' "$URL/v1/chat/completions"
  hostile 400 "a message without a role" "${auth[@]}" -d '{"messages": [{"content": "Hi"}]}' "$URL/v1/chat/completions"
  hostile 400 "no prompt" "${auth[@]}" -d '{"max_tokens": 3}' "$URL/v1/completions"
  hostile 400 "n = 2" "${auth[@]}" -d '{"prompt": "Hi", "n": 2}' "$URL/v1/completions"
  hostile 400 "temperature on a greedy schedule" "${auth[@]}" -d '{"prompt": "Hi", "temperature": 0.7}' "$URL/v1/completions"
  python3 -c "print('{\"prompt\": \"' + 'ab ' * 2100 + '\", \"max_tokens\": 4}')" >long.json
  hostile 400 "a prompt longer than the context" "${auth[@]}" --data-binary @long.json "$URL/v1/completions"
  python3 -c "print('{\"prompt\": \"' + 'a' * 1100000 + '\"}')" >huge.json
  hostile 413 "a body over --max-body" "${auth[@]}" --data-binary @huge.json "$URL/v1/completions"
  hostile 401 "a wrong API key" -H "Authorization: Bearer nope" -d '{"prompt": "Hi"}' "$URL/v1/completions"
  hostile 401 "no API key" -d '{"prompt": "Hi"}' "$URL/v1/completions"
  hostile 404 "an unknown endpoint" "${auth[@]}" -d '{}' "$URL/v1/embeddings"
}

# A running stream, one waiting, the next refused; the stream's client leaves: its slot comes back.
check_queue_and_disconnect() {
  begin
  start_server small --slots 1 --queue 1 --max-context 4096
  local h
  curl -s -N --max-time 60 -H "Authorization: Bearer $KEY" -d '{"prompt": ".", "max_tokens": 4000, "stream": true}' \
    "$URL/v1/completions" >stream1.txt &
  local streamer=$!
  for _ in $(seq 1 400); do grep -q '"text":"\."' stream1.txt 2>/dev/null && break; sleep 0.05; done
  expect "the first stream sends no dots" grep -q '"text":"\."' stream1.txt
  curl -s -o waiter.json --max-time 60 -H "Authorization: Bearer $KEY" -d '{"prompt": "Hi", "max_tokens": 8}' "$URL/v1/completions" &
  local waiter=$!
  for _ in $(seq 1 400); do h=$(curl -s "$URL/health"); [[ $h == *'"waiting":1'* ]] && break; sleep 0.05; done
  expect "/health does not show one waiting: $h" test "${h#*\"waiting\":1}" != "$h"
  STATUS=$(curl -s -o "$WORK/stdout" -w '%{http_code}' -H "Authorization: Bearer $KEY" -d '{"prompt": "Hi"}' "$URL/v1/completions")
  expect "a third request: status $STATUS, expected 503" test "$STATUS" == 503
  expect "the 503 does not name the queue: $(cat stdout)" out_has '1 requests are already waiting'
  local left=$SECONDS
  kill "$streamer" 2>/dev/null
  wait "$streamer" 2>/dev/null
  wait "$waiter"
  # The stream had ~3990 tokens to go (over 4 s on the emulator): its slot must come back sooner.
  expect "the waiting request took $((SECONDS - left)) s after the stream's client left" test $((SECONDS - left)) -le 2
  expect "the waiting request was not answered after the stream's client left: $(cat waiter.json)" \
    python3 -c "import json; assert json.load(open('waiter.json'))['choices'][0]['text'] == 'oké!'"
  for _ in $(seq 1 400); do h=$(curl -s "$URL/health"); [[ $h == *'"running":0'* && $h == *'"waiting":0'* ]] && break; sleep 0.05; done
  expect "the slot did not come back: $h" test "${h#*\"running\":0}" != "$h"
  expect "the server did not log the cancelled stream" grep -q "(cancelled)" small.log
  expect "no note that a greedy schedule refuses temperatures" grep -q "decodes greedily" small.log
  local port=${URL##*:}
  run "$BUILD/mkserve" s.bin w --backend emulator --port "$port"
  expect "a second server on port $port: exit $RC, expected 1" rc_is 1
  expect "a second server on port $port: no 'cannot listen'" err_has "cannot listen on 127.0.0.1:$port"
  kill -TERM "$SERVER"
  wait "$SERVER"
  RC=$?
  expect "SIGTERM: exit status $RC, expected 0" rc_is 0
  URL=$MAIN_URL
  finish "a full queue answers 503 naming its length; a client that leaves mid-stream frees its slot; a port in use is refused; SIGTERM exits 0"
}

check_load() {
  begin
  seq 1 200 | xargs -P 16 -I{} sh -c "curl -s --max-time 120 -H 'Authorization: Bearer $KEY' \
    -d '{\"prompt\": \"Hi\", \"max_tokens\": 8}' $URL/v1/completions > load.{}.json"
  local good
  good=$(python3 -c "
import json
n = 0
for i in range(1, 201):
    try:
        n += json.load(open('load.%d.json' % i))['choices'][0]['text'] == 'oké!'
    except Exception:
        pass
print(n)")
  expect "$good of 200 answered correctly" test "$good" == 200
  local h
  h=$(curl -s "$URL/health")
  expect "/health after the load: $h" python3 -c "import json; d=json.loads('$h'); assert d['running'] == 0 and d['waiting'] == 0"
  finish "200 requests from 16 clients at once: every one answered correctly"
}

# A schedule with a sample op: each request its own temperature and seed, the text mkrun gives
# with them; two at once with other seeds get what each gets alone.
check_sampling() {
  begin
  sed 's/op: argmax/op: sample/' "$ROOT/tests/tokenizer/eos-llama.yaml" >sample.yaml
  "$BUILD/mkplan" sample.yaml -o s2.bin --sms 4 --max-tokens 4 -q >/dev/null 2>&1
  # Random weights (the fixture's logits are too sharp to sample), the fixture's tokenizer.
  "$BUILD/mkweights" s2.bin -o w2 --seed 3 >/dev/null 2>&1
  cp w/tokenizer.json w/tokenizer_config.json w/generation_config.json w2/
  local seed want got
  for seed in 7 8; do
    "$BUILD/mkrun" s2.bin w2 --backend emulator --prompt . --tokens 24 --temperature 1.5 --seed $seed --json >mkrun_s$seed.json 2>/dev/null
  done
  expect "the two seeds gave mkrun the same text" test "$(python3 -c "import json; print(json.load(open('mkrun_s7.json'))['text'])")" != \
    "$(python3 -c "import json; print(json.load(open('mkrun_s8.json'))['text'])")"
  "$BUILD/mkserve" s2.bin w2 --backend emulator --port 0 --max-context 256 2>sampling.log &
  local server=$!
  PIDS+=("$server")
  local port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' sampling.log)
    [[ -n $port ]] && break
    sleep 0.05
  done
  local clients=()
  for seed in 7 8; do
    curl -s --max-time 60 -d "{\"prompt\": \".\", \"max_tokens\": 24, \"temperature\": 1.5, \"seed\": $seed}" \
      "http://127.0.0.1:$port/v1/completions" >served_s$seed.json &
    clients+=($!)
  done
  wait "${clients[@]}"
  for seed in 7 8; do
    expect "seed $seed: the served text differs from mkrun's: $(head -c 300 served_s$seed.json)" python3 -c "
import json
want = json.load(open('mkrun_s$seed.json'))['text']
got = json.load(open('served_s$seed.json'))['choices'][0]['text']
assert got == want, (got, want)"
  done
  post_to() { STATUS=$(curl -s -o "$WORK/stdout" -w '%{http_code}' --max-time 60 -d "$2" "http://127.0.0.1:$port$1"); }
  "$BUILD/mkrun" s2.bin w2 --backend emulator --prompt . --tokens 24 --json >mkrun_greedy.json 2>/dev/null
  post_to /v1/completions '{"prompt": ".", "max_tokens": 24, "temperature": 0}'
  expect "temperature 0 on a sampling server is not mkrun's greedy text" python3 -c "
import json
assert json.load(open('$WORK/stdout'))['choices'][0]['text'] == json.load(open('mkrun_greedy.json'))['text']"
  kill -TERM "$server"
  wait "$server"
  finish "a sample op: each request samples with its own temperature and seed, as mkrun does with them; temperature 0 is greedy"
}

check_openai_client() {
  local modules=$ROOT/tests/serve/node_modules
  if [[ ! -d $modules/openai ]] || ! command -v node >/dev/null; then
    skip "the openai npm client" "no $modules/openai or no node: run scripts/fetch_test_deps.sh"
    return
  fi
  begin
  run node "$ROOT/tests/serve/openai_client.mjs" "$URL" "$KEY" "$want_hi" "$want_chat" "$hi_prompt" "$chat_prompt" "$hi_tokens"
  expect "exit status $RC" rc_is 0
  finish "the official openai npm client: completions and chat, whole and streamed, usage, an error status"
}

check_answers
check_stream
check_hostile
check_queue_and_disconnect
check_load
check_sampling
check_openai_client

begin
kill -INT "${PIDS[0]}"
wait "${PIDS[0]}"
RC=$?
expect "SIGINT: exit status $RC, expected 0" rc_is 0
expect "no request line in the log" grep -q "mkserve: cmpl-1: prompt" main.log
finish "SIGINT exits 0; one log line a request"

echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
