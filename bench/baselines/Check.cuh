//===- Check.cuh - What the hand-written baselines share ------------------===//
//
// The benchmark baselines in this folder are single-file programs built with
// nvcc alone; a failed CUDA runtime call prints the call and its error and
// ends the program (CK), host memory is read with 16-byte non-coherent
// loads (loadNc), stores are pinned with every page touched
// (pinnedMapped), and rates are medians (median, medianMs) set beside the
// pinned copy's (pinnedCopyRate).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <thread>
#include <vector>

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

/// The median of `v`.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// `bytes` of pinned host memory, mapped (with unified addressing the host
/// pointer is the device's too), every page touched on every core
/// (gigabytes).
inline char *pinnedMapped(std::size_t bytes) {
  char *p = nullptr;
  CK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped));
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([=] {
      const std::size_t begin = bytes / workers * w;
      const std::size_t end = w + 1 == workers ? bytes : bytes / workers * (w + 1);
      std::memset(p + begin, static_cast<int>(w + 1), end - begin);
    });
  for (std::thread &t : pool)
    t.join();
  return p;
}

/// The pinned host-to-device copy rate, GB/s: the median of 5 copies of the
/// first GiB of `pinned` (at least that long).
inline double pinnedCopyRate(const char *pinned) {
  const std::size_t bytes = std::size_t(1) << 30;
  char *out = nullptr;
  CK(cudaMalloc(&out, bytes));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(start));
    CK(cudaMemcpyAsync(out, pinned, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(stop));
    CK(cudaEventSynchronize(stop));
    float t = 0;
    CK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  CK(cudaFree(out));
  return bytes / median(ms) / 1e6;
}

/// The median time (ms) of `runs` runs of `enqueue` (work it enqueues on
/// `stream`), after one run more to warm up.
template <class Enqueue>
double medianMs(Enqueue enqueue, cudaStream_t stream = nullptr, int runs = 5) {
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r <= runs; ++r) {
    CK(cudaEventRecord(start, stream));
    enqueue();
    CK(cudaGetLastError());
    CK(cudaEventRecord(stop, stream));
    CK(cudaEventSynchronize(stop));
    float t = 0;
    CK(cudaEventElapsedTime(&t, start, stop));
    if (r > 0) // the first is a warm-up
      ms.push_back(t);
  }
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
  return median(ms);
}
