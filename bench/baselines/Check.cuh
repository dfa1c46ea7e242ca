//===- Check.cuh - What the hand-written baselines share ------------------===//
//
// The benchmark baselines in this folder are single-file programs built with
// nvcc alone; a failed CUDA runtime call prints the call and its error and
// ends the program (CK), and host memory is read with 16-byte non-coherent
// loads (loadNc).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t err_ = (x);                                                                        \
    if (err_ != cudaSuccess) {                                                                     \
      printf("%s: %s\n", #x, cudaGetErrorString(err_));                                            \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/// A 16-byte non-coherent load (ld.global.nc).
__device__ __forceinline__ int4 loadNc(const char *p) {
  int4 x;
  asm volatile("ld.global.nc.v4.s32 {%0,%1,%2,%3}, [%4];"
               : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
               : "l"(p));
  return x;
}
