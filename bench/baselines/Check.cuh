//===- Check.cuh - CUDA runtime error checks for the hand-written baselines -===//
//
// The benchmark baselines in this folder are single-file programs built with
// nvcc alone; a failed CUDA runtime call prints the call and its error and
// ends the program.
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
