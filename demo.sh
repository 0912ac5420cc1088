#!/usr/bin/env bash
# The main job on the embedded default: plan the tiny example model, generate random weights
# for it, and run it (on the GPU when there is one, else on the CPU emulator). Builds only the
# three tools it runs, in build/ with the flags test.sh uses (scripts/setup.sh), so test.sh
# afterwards reuses their objects, and the demo after test.sh builds nothing.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh mkplan mkweights mkrun
mkdir -p out
build/mkplan examples/tiny-llama.yaml -o out/tiny-llama.bin --dot out/tiny-llama.dot
command -v dot >/dev/null && dot -Tsvg out/tiny-llama.dot -o out/tiny-llama.svg && echo "wrote out/tiny-llama.svg"
build/mkweights out/tiny-llama.bin -o out/tiny-llama-weights --seed 1
build/mkrun out/tiny-llama.bin out/tiny-llama-weights --prompt-ids 1,2,3 --tokens 32 "$@"
