// Asynchronous copies from global to shared memory by the compute threads themselves (cp.async,
// 16 bytes a thread an instruction), and the tensor-core helpers the op bodies share. A step of
// several rows streams nothing through the weight ring (its op bodies have all of shared memory,
// BlockContext): they load what they read in pipelines of these copies.
#pragma once
#include <cstdint>

#include "device/cuda/ring.cuh"

namespace mk::device {

// 16 bytes from src to dst (both 16-byte aligned), the bytes past `valid` (0 or 16 here) zero:
// a row or column past a tensor's end is copied as zeros without being read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, uint32_t valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid) : "memory");
}
// The copies this thread issued since the last commit form one group.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most `pending` of this thread's groups are still in flight (0 to 7).
__device__ __forceinline__ void cp_async_wait(uint32_t pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}

// d += a b on the tensor cores: a 16x16 (row major), b 16x8 (column major), bf16 in, f32 sums.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A operand of mma_bf16 from shared memory in one instruction: four 8x8 bf16 matrices, lane l
// giving the address of row l % 8 of matrix l / 8 (16-byte aligned): for a 16x16 tile, rows
// (l % 16) at column 8 (l / 16), as a[0..3] = rows 0-7 and 8-15 of columns 0-7, then of 8-15.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&a)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(smem_addr(row))
               : "memory");
}

// x0, x1 as a pair of bf16 (x0 in the low half) and what that rounding left, as another pair:
// hi + lo holds each value to about 16 bits, so the tensor cores lose little against f32.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(hi) : "f"(x1), "f"(x0));
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(lo) : "f"(x1 - __uint_as_float(hi & 0xffff0000u)), "f"(x0 - __uint_as_float(hi << 16)));
}

}  // namespace mk::device
