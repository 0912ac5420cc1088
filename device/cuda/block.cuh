// Block-level helpers shared by the CUDA op bodies.
// A block has kBlockThreads threads: kWarps compute warps run the op bodies, and the last warp
// streams weights into a shared-memory ring with the bulk-copy engine (device/cuda/ring.cuh).
// Op bodies synchronise with block_sync(), a named barrier over the compute warps only.
#pragma once
#include <cstdint>

namespace mk::device {

// 384 threads (eleven compute warps: a ring of 11 stages, Llama-3.2-1B's and Qwen3-4B's, has a
// warp per stage) leave 168 registers per thread, and nothing spills: the register file is four
// quarters of 16K registers, one per warp scheduler, so 12 warps (3 a quarter) get 168 each
// where 13 to 16 warps get 128. At 512 threads the
// kernel spilled 36 bytes and the op bodies 8-12 (four of the fifteen compute warps idle in
// the matvec, whose stages are a warp each); 384 took every benchmark row down by 2-4 %
// (docs/notes.md entry 68). At 1024 threads (64 registers) it spilled its loop state
// (Llama-3.2-1B 1413 -> 1229 us from 1024 to 512).
inline constexpr uint32_t kBlockThreads = 384;
inline constexpr uint32_t kWarps = kBlockThreads / 32 - 1;  // compute warps
inline constexpr uint32_t kThreads = kWarps * 32;           // compute threads

__device__ __forceinline__ void block_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

// The GPU's nanosecond clock (the watchdog's, the trace's).
__device__ __forceinline__ uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// block_sync that also tells every compute thread whether any of them passed true.
__device__ __forceinline__ bool block_any(bool p) {
  uint32_t r;
  asm volatile(
      "{ .reg .pred a, b; setp.ne.u32 a, %1, 0; bar.red.or.pred b, 1, %2, a; selp.u32 %0, 1, 0, b; }"
      : "=r"(r) : "r"(static_cast<uint32_t>(p)), "n"(kThreads) : "memory");
  return r != 0;
}

// v combined over the warp by f (every lane gets the result).
template <class F>
__device__ __forceinline__ float warp_reduce(float v, F f) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  return warp_reduce(v, [](float a, float b) { return a + b; });
}
__device__ __forceinline__ float warp_max(float v) {
  return warp_reduce(v, [](float a, float b) { return fmaxf(a, b); });
}

// Sum over the compute threads; every one gets the result. `scratch` holds kWarps floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  block_sync();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  block_sync();
  float total = lane < kWarps ? scratch[lane] : 0.0f;
  return warp_sum(total);
}

// Activations written by other SMs in this launch: read through L2, never a stale L1 line. Every
// such read must bypass L1 (this, __ldcg or a bulk copy): the counter polls are relaxed and do
// not invalidate it (kernel.cuh, load_counter).
__device__ __forceinline__ float load_activation(const float* p) { return __ldcg(p); }

__device__ __forceinline__ float bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// Dot product of 8 bf16 weights with 8 floats.
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b) {
  float s = bf16_lo(w.x) * a.x;
  s = fmaf(bf16_hi(w.x), a.y, s);
  s = fmaf(bf16_lo(w.y), a.z, s);
  s = fmaf(bf16_hi(w.y), a.w, s);
  s = fmaf(bf16_lo(w.z), b.x, s);
  s = fmaf(bf16_hi(w.z), b.y, s);
  s = fmaf(bf16_lo(w.w), b.z, s);
  s = fmaf(bf16_hi(w.w), b.w, s);
  return s;
}

}  // namespace mk::device
