//===- sysmem_translation.cu - Address translation of pinned host memory -===//
//
// A benchmark baseline, hand-written (not product code): how the GPU
// translates addresses of mapped pinned host memory, the question behind the
// mixed steps' sensitivity to the host store's size (bench/NOTES.md,
// sixteenth session). Pointer chases through a pinned buffer:
//   - latency: one thread follows a random cycle of nodes `stride` bytes
//     apart over a `footprint`, after one warm-up lap; the mean time a hop
//     rises where the footprint's pages outgrow what the GPU's TLBs (and the
//     host's IOMMU, if one translates) hold, at the granularity they hold;
//   - throughput: 132 x 32 warps (one lane each) chase independent cycles at
//     once, hops per second: how many translations a second the GPU (and
//     PCIe) serve when most miss.
// Footprints 64 MB .. 4 GB, strides 4 KB, 64 KB and 2 MB (the driver maps
// non-contiguous pinned memory with 4 KB GPU pages, NVIDIA's open kernel
// module says; if that is so here, the 4 KB stride's latency steps up at a
// footprint of (TLB entries x 4 KB) and the 2 MB stride's does not flatten).
//
//   nvcc -O3 -arch=sm_90a -o sysmem_translation bench/baselines/sysmem_translation.cu
//   ./sysmem_translation [max footprint in MB, default 4096]
//
//===----------------------------------------------------------------------===//
#include "Check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <numeric>
#include <random>
#include <vector>

/// The GPU's global nanosecond timer.
__device__ __forceinline__ std::uint64_t nanoseconds() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Follows `hops` links from `start` (each node holds the next node's
/// offset from `base`); writes the nanoseconds taken and the end (so the
/// chase is not optimized away).
__global__ void chaseLatency(const char *base, std::uint64_t start, int hops,
                             std::uint64_t *elapsed, std::uint64_t *end) {
  std::uint64_t at = start;
  // A warm-up pass over the nodes the timed pass visits (the first `hops`
  // of the cycle from `start`).
  for (int i = 0; i < hops; ++i)
    at = *reinterpret_cast<const volatile std::uint64_t *>(base + at);
  at = start; // (the warm-up's loads are volatile: they stay)
  const std::uint64_t t0 = nanoseconds();
  for (int i = 0; i < hops; ++i)
    at = *reinterpret_cast<const volatile std::uint64_t *>(base + at);
  *elapsed = nanoseconds() - t0;
  *end = at;
}

/// Lane 0 of every warp follows its own cycle (starts[warp]) for `hops`
/// links: many translations in flight at once.
__global__ void chaseThroughput(const char *base, const std::uint64_t *starts, int hops,
                                std::uint64_t *ends) {
  if (threadIdx.x % 32 != 0)
    return;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  std::uint64_t at = starts[warp];
  for (int i = 0; i < hops; ++i)
    at = *reinterpret_cast<const volatile std::uint64_t *>(base + at);
  ends[warp] = at;
}

int main(int argc, char **argv) {
  const std::size_t maxMb = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 4096;
  const std::size_t maxBytes = maxMb << 20;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs; pinned host buffer %zu MB (cudaHostAlloc, mapped)\n", prop.name,
         prop.multiProcessorCount, maxMb);
  char *host = nullptr;
  CK(cudaHostAlloc(&host, maxBytes, cudaHostAllocMapped));
  char *device = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&device), host, 0));
  std::uint64_t *elapsed, *end;
  CK(cudaMalloc(&elapsed, sizeof(std::uint64_t)));
  CK(cudaMalloc(&end, sizeof(std::uint64_t)));
  const int warps = prop.multiProcessorCount * 32;
  std::uint64_t *starts, *ends;
  CK(cudaMalloc(&starts, warps * sizeof(std::uint64_t)));
  CK(cudaMalloc(&ends, warps * sizeof(std::uint64_t)));
  std::mt19937_64 rng(11);
  const std::size_t strides[] = {4096, 64 << 10, 2 << 20};
  printf("%12s %10s %10s %14s %16s\n", "footprint", "stride", "nodes", "latency ns/hop",
         "warps' Mhops/s");
  for (std::size_t footprint = 64 << 20; footprint <= maxBytes; footprint *= 2) {
    for (std::size_t stride : strides) {
      const std::size_t nodes = footprint / stride;
      if (nodes < 64)
        continue;
      // One random cycle through the nodes; a node sits at a random 64-byte
      // line of its stride (so nodes do not share cache sets by alignment).
      std::vector<std::size_t> order(nodes);
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::uint64_t> at(nodes);
      for (std::size_t i = 0; i < nodes; ++i)
        at[i] = order[i] * stride + (rng() % (stride / 64)) * 64;
      for (std::size_t i = 0; i < nodes; ++i)
        *reinterpret_cast<std::uint64_t *>(host + at[i]) = at[(i + 1) % nodes];
      const int hops = static_cast<int>(std::min<std::size_t>(nodes, 1 << 16));
      chaseLatency<<<1, 1>>>(device, at[0], hops, elapsed, end);
      CK(cudaDeviceSynchronize());
      std::uint64_t took = 0;
      CK(cudaMemcpy(&took, elapsed, sizeof took, cudaMemcpyDeviceToHost));
      const double ns = static_cast<double>(took) / hops;
      // Throughput: each warp starts at its own place on the cycle.
      std::vector<std::uint64_t> s(warps);
      for (int w = 0; w < warps; ++w)
        s[w] = at[(static_cast<std::size_t>(w) * nodes) / warps];
      CK(cudaMemcpy(starts, s.data(), warps * sizeof(std::uint64_t), cudaMemcpyHostToDevice));
      const int perWarp = 256;
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      chaseThroughput<<<prop.multiProcessorCount, 1024>>>(device, starts, perWarp, ends);
      CK(cudaEventRecord(e0));
      chaseThroughput<<<prop.multiProcessorCount, 1024>>>(device, starts, perWarp, ends);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
      printf("%9zu MB %7zu KB %10zu %14.0f %16.1f\n", footprint >> 20, stride >> 10, nodes, ns,
             static_cast<double>(warps) * perWarp / ms / 1e3);
      fflush(stdout);
    }
  }
  CK(cudaFreeHost(host));
  return 0;
}
