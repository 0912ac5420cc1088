#!/usr/bin/env bash
# Regenerates the golden files from the corpus with the JavaScript reference implementation
# (@lenml/tokenizers 3.7.2, installed with npm into a temporary folder). Run once after changing
# the corpus; the tests themselves need neither node nor npm.
#   scripts/fetch_tokenizers.sh && tests/tokenizer/make_corpus.py && tests/tokenizer/make_golden.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund @lenml/tokenizers@3.7.2 >/dev/null)
NODE_PATH="$tmp/node_modules" node "$here/make_golden.js"
