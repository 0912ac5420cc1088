// What every probe does with a CUDA call's result: stop with the call's name and the error.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace mk::probes {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace mk::probes
