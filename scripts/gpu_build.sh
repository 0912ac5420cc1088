#!/usr/bin/env bash
# Builds the CUDA binaries here (Hopper, sm_90a, static CUDA runtime and yaml-cpp) and copies
# them to out/gpu-bin, the folder a GPU-machine call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMK_CUDA=ON >/dev/null
cmake --build build-gpu -j"$(nproc)" --target mkplan mkrun mkweights mk_gpu_tests mkbench mkserve
# No more register spills than scripts/spill_budget.txt allows (ptxas's report; ~30 s).
python3 scripts/check_spills.py build-gpu
mkdir -p out/gpu-bin
cp build-gpu/mkplan build-gpu/mkrun build-gpu/mkweights build-gpu/mk_gpu_tests build-gpu/mkbench build-gpu/mkserve out/gpu-bin/
# mkserve's HTTP library is Debian's shared one, with what it loads (OpenSSL, zlib, brotli): beside
# the binaries, for LD_LIBRARY_PATH on a GPU machine that may lack them (bench/serve.sh).
for lib in $(ldd build-gpu/mkserve | awk '/libcpp-httplib|libssl|libcrypto|libbrotli|libz\./ {print $3}'); do cp -L "$lib" out/gpu-bin/; done
# The commit the binaries were built from (a trailing + marks uncommitted changes), for RESULTS.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!out' 2>/dev/null || echo +)" > out/gpu-bin/COMMIT
du -sh out/gpu-bin
