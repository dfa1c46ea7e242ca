//===- sysmem_gather.cu - Gathers of scattered rows from pinned host memory ===//
//
// A benchmark baseline, hand-written (not product code): the rate at which
// SM loads gather scattered 656-byte FP8 rows from mapped pinned host memory,
// in the store of bench/attention.sh's mixed steps (128 requests x 32768 rows,
// 2.75 GB), for 5 / 14 / 30 / 100% of a request's top-2048 rows, with the
// loads of a warp laid out four ways:
//   - a warp per row (lanes 0..31 then 0..8 read 16-byte chunks: 512
//     contiguous bytes an instruction),
//   - 8 rows x 64 bytes an instruction (the tensor-core producer's FP8 map),
//   - 4 rows x 128 bytes, 2 rows x 256 bytes;
// the same from an HBM copy of the store; and whether an L2 prefetch of the
// rows (cp.async.bulk.prefetch.L2 or prefetch.global.L2) makes a later gather
// of them faster; whether cp.async (16 B) of the rows into a shared ring
// reaches the rate of ld.global.nc (it does not: 38%, twelfth session), and
// whether whole-row bulk copies (cp.async.bulk, the TMA) do (not either: half
// of it, seventeenth session); and, beside the pinned copy rate, the rate of
// SM loads reading the store in order (argv[2] "sequential": that alone).
// Figures: bench/NOTES.md (sixth, seventh and twelfth sessions).
//
//   nvcc -O3 -arch=sm_90a -o sysmem_gather bench/baselines/sysmem_gather.cu
//
//===----------------------------------------------------------------------===//
#include "Check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <random>
#include <string>
#include <sys/mman.h>
#include <vector>

constexpr int kRequests = 128, kRowBytes = 656, kChunks = kRowBytes / 16;
/// Rows of a request's history (argv[1]; 32768: the mixed steps' 2.75 GB store).
static int history = 32768;
__constant__ int deviceHistory; ///< the same, for the kernels

__device__ __forceinline__ void bulkPrefetch(const void *p) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(kRowBytes) : "memory");
}
__device__ __forceinline__ void linePrefetch(const char *p) {
  for (int o = 0; o < kRowBytes; o += 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p + kRowBytes - 1));
}

// Warp per row: 41 chunks of 16 B, lanes 0..31 then 0..8.
__device__ __forceinline__ void copyRow(const char *src, char *dst, int lane) {
  for (int c = lane; c < kChunks; c += 32) {
    int4 v;
    asm volatile("ld.global.nc.v4.s32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src + 16 * c));
    *(int4 *)(dst + 16 * c) = v;
  }
}

// mode 0: gather; 1: prefetch only (bulk); 2: prefetch only (lines);
// 3: gather with bulk prefetch `ahead` rows ahead (per warp);
// 4: prefetch all of the warp's rows first, then gather.
__global__ void kernel(const char *host, const int *rows, int perCta, char *out, int mode,
                       int ahead) {
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int *mine = rows + blockIdx.x * perCta;
  const char *base = host + (size_t)blockIdx.x * deviceHistory * kRowBytes;
  char *dst = out + (size_t)blockIdx.x * perCta * kRowBytes;
  if (mode == 1 || mode == 2) {
    for (int i = threadIdx.x; i < perCta; i += blockDim.x) {
      const char *p = base + (size_t)mine[i] * kRowBytes;
      if (mode == 1)
        bulkPrefetch(p);
      else
        linePrefetch(p);
    }
    return;
  }
  if (mode == 4) {
    for (int i = threadIdx.x; i < perCta; i += blockDim.x)
      bulkPrefetch(base + (size_t)mine[i] * kRowBytes);
  }
  if (mode == 3 && lane < ahead) {
    for (int j = warp + warps * lane; j < perCta && j < warps * ahead; j += warps * 32)
      bulkPrefetch(base + (size_t)mine[j] * kRowBytes);
  }
  if (mode == 5 || mode == 6 || mode == 7) {
    // The attention producer's FP8 mapping (mode 5: a warp instruction covers
    // 8 rows x 64 B) or 2 rows x 256 B (mode 6).
    int rowsPer = mode == 5 ? 8 : mode == 7 ? 4 : 2, lanesPer = 32 / rowsPer;
    int seg = lane % lanesPer, sub = lane / lanesPer;
    if (mode == 5) {
      seg = lane / 8;
      sub = lane % 8;
    }
    for (int i0 = warp * rowsPer; i0 < perCta; i0 += warps * rowsPer) {
      int i = i0 + sub;
      if (i >= perCta)
        continue;
      const char *src = base + (size_t)mine[i] * kRowBytes;
      char *d = dst + (size_t)i * kRowBytes;
      int4 v[11];
      auto ld = [&](int off) { return loadNc(src + off); };
      if (mode == 5) {
        for (int g = 0; g < 8; ++g)
          v[g] = ld(seg * 16 + g * 64);
        v[8] = ld(512);
        for (int c = 0; c < 2; ++c)
          v[9 + c] = ld(528 + seg * 32 + 16 * c);
        for (int g = 0; g < 8; ++g)
          *(int4 *)(d + seg * 16 + g * 64) = v[g];
        *(int4 *)(d + 512) = v[8];
        for (int c = 0; c < 2; ++c)
          *(int4 *)(d + 528 + seg * 32 + 16 * c) = v[9 + c];
      } else if (mode == 7) {
        for (int g = 0; g < 4; ++g)
          v[g] = ld(seg * 16 + g * 128);
        v[4] = ld(512);
        v[5] = ld(528 + seg * 16);
        for (int g = 0; g < 4; ++g)
          *(int4 *)(d + seg * 16 + g * 128) = v[g];
        *(int4 *)(d + 512) = v[4];
        *(int4 *)(d + 528 + seg * 16) = v[5];
      } else {
        for (int g = 0; g < 2; ++g)
          v[g] = ld(seg * 16 + g * 256);
        v[2] = ld(512);
        if (seg < 8)
          v[3] = ld(528 + seg * 16);
        for (int g = 0; g < 2; ++g)
          *(int4 *)(d + seg * 16 + g * 256) = v[g];
        *(int4 *)(d + 512) = v[2];
        if (seg < 8)
          *(int4 *)(d + 528 + seg * 16) = v[3];
      }
    }
    return;
  }
  for (int i = warp, n = 0; i < perCta; i += warps, ++n) {
    if (mode == 3 && lane == 0) {
      int j = i + warps * ahead;
      if (j < perCta)
        bulkPrefetch(base + (size_t)mine[j] * kRowBytes);
    }
    copyRow(base + (size_t)mine[i] * kRowBytes, dst + (size_t)i * kRowBytes, lane);
  }
}

// All requests' rows from a few CTAs (gridDim.x CTAs of blockDim.x threads,
// 4 rows x 128 B a warp instruction): can a handful of SMs beside an
// attention grid reach the gather rate?
template <bool kNc, bool kSpread = false>
__global__ void fewCtas(const char *host, const int *rows, int perCta, char *out) {
  int lane = threadIdx.x % 32, seg = lane % 8, sub = lane / 8;
  int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int warps = gridDim.x * blockDim.x / 32;
  size_t total = (size_t)kRequests * perCta;
  for (size_t i0 = (size_t)warp * 4; i0 < total; i0 += (size_t)warps * 4) {
    size_t i = i0 + sub;
    if (i >= total)
      continue;
    size_t request = i / perCta;
    if (kSpread) {
      // The consecutive rows of a warp from consecutive requests (the
      // overlapped fetch's order: every request's first tile first).
      request = i % kRequests;
      i = request * perCta + i / kRequests;
    }
    const char *src = host + (request * deviceHistory + rows[i]) * kRowBytes;
    char *d = out + i * kRowBytes;
    int4 v[6];
    auto ld = [&](int off) { return kNc ? loadNc(src + off) : *(const int4 *)(src + off); };
    for (int g = 0; g < 4; ++g)
      v[g] = ld(seg * 16 + g * 128);
    v[4] = ld(512);
    v[5] = ld(528 + seg * 16);
    for (int g = 0; g < 4; ++g)
      *(int4 *)(d + seg * 16 + g * 128) = v[g];
    *(int4 *)(d + 512) = v[4];
    *(int4 *)(d + 528 + seg * 16) = v[5];
  }
}

__device__ __forceinline__ void cpAsync16(char *sharedDst, const char *globalSrc) {
  unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(sharedDst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(globalSrc) : "memory");
}

// The rows by cp.async (16 B, .cg) into a shared ring `kDepth` batches deep
// per warp (a batch: 4 rows, 4 rows x 128 B an instruction as mode 7), then
// from shared memory to `out`: no register waits for a host load, and
// kDepth - 1 batches stay in flight while one is written out. Does a
// producer that stages host rows this way reach the rate of ld.global.nc?
template <int kDepth>
__global__ void asyncGather(const char *host, const int *rows, int perCta, char *out) {
  extern __shared__ __align__(16) char ring[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int seg = lane % 8, sub = lane / 8;
  const int *mine = rows + blockIdx.x * perCta;
  const char *base = host + (size_t)blockIdx.x * deviceHistory * kRowBytes;
  char *dst = out + (size_t)blockIdx.x * perCta * kRowBytes;
  char *warpRing = ring + (size_t)warp * kDepth * 4 * kRowBytes;
  const int batches = (perCta + 4 * warps - 1) / (4 * warps);
  // Row `sub` of batch b: (b * warps + warp) * 4 + sub. The lane's chunks
  // (41 of a row over 8 lanes): seg * 16 + g * 128 (g < 4), 528 + seg * 16,
  // and 512 (seg 0).
  auto forChunks = [&](auto &&f) {
    for (int g = 0; g < 4; ++g)
      f(seg * 16 + g * 128);
    f(528 + seg * 16);
    if (seg == 0)
      f(512);
  };
  auto issue = [&](int b) {
    const int i = (b * warps + warp) * 4 + sub;
    if (b < batches && i < perCta) {
      const char *src = base + (size_t)mine[i] * kRowBytes;
      char *slot = warpRing + ((b % kDepth) * 4 + sub) * kRowBytes;
      forChunks([&](int offset) { cpAsync16(slot + offset, src + offset); });
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int b = 0; b < kDepth - 1; ++b)
    issue(b);
  for (int b = 0; b < batches; ++b) {
    issue(b + kDepth - 1);
    asm volatile("cp.async.wait_group %0;" ::"n"(kDepth - 1) : "memory");
    // (Each lane writes out the chunks it copied itself: no other lane's.)
    const int i = (b * warps + warp) * 4 + sub;
    if (i < perCta) {
      const char *slot = warpRing + ((b % kDepth) * 4 + sub) * kRowBytes;
      char *d = dst + (size_t)i * kRowBytes;
      forChunks([&](int offset) { *(int4 *)(d + offset) = *(const int4 *)(slot + offset); });
    }
  }
}

// The TMA's pieces: a bulk copy of `bytes` from global memory into shared
// memory completed on `bar` (after expecting them there), and a wait for a
// barrier's phase.
__device__ __forceinline__ void bulkCopy(void *to, const void *from, int bytes, void *bar) {
  const unsigned toShared = (unsigned)__cvta_generic_to_shared(to);
  const unsigned barShared = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
               "%2, [%3];" ::"r"(toShared),
               "l"(from), "r"(bytes), "r"(barShared)
               : "memory");
}
__device__ __forceinline__ void expectBytes(void *bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   (unsigned)__cvta_generic_to_shared(bar)),
               "r"(bytes)
               : "memory");
}
/// A warp's `count` barriers, one arrival each, initialized by `lane` 0.
__device__ __forceinline__ void initBarriers(unsigned long long *bars, int count, int lane) {
  if (lane == 0)
    for (int d = 0; d < count; ++d)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
                       (unsigned)__cvta_generic_to_shared(bars + d))
                   : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
}
__device__ __forceinline__ void waitPhase(void *bar, unsigned parity) {
  asm volatile("{ .reg .pred done;\n"
               "wait: mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait; }" ::"r"((unsigned)__cvta_generic_to_shared(bar)),
               "r"(parity)
               : "memory");
}

// Whole rows by the Tensor Memory Accelerator: one cp.async.bulk of 656 B a
// row into a shared ring `kDepth` batches deep per warp (a batch: 4 rows,
// issued by lanes 0-3, completed on the slot's mbarrier), then from shared
// memory to `out`. No register and no 16-byte request of the SM waits for a
// host load: does the bulk copy engine read mapped host memory at the rate of
// ld.global.nc (the 16-byte cp.async above did not)?
template <int kDepth>
__global__ void bulkGather(const char *host, const int *rows, int perCta, char *out) {
  extern __shared__ __align__(16) char bulkRing[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int *mine = rows + blockIdx.x * perCta;
  const char *base = host + (size_t)blockIdx.x * deviceHistory * kRowBytes;
  char *dst = out + (size_t)blockIdx.x * perCta * kRowBytes;
  char *warpRing = bulkRing + (size_t)warp * kDepth * 4 * kRowBytes;
  unsigned long long *bars =
      reinterpret_cast<unsigned long long *>(bulkRing + (size_t)warps * kDepth * 4 * kRowBytes) +
      warp * kDepth;
  const int batches = (perCta + 4 * warps - 1) / (4 * warps);
  initBarriers(bars, kDepth, lane);
  auto rowOf = [&](int b, int sub) { return (b * warps + warp) * 4 + sub; };
  auto issue = [&](int b) {
    if (b >= batches)
      return;
    const int slot = b % kDepth;
    const int valid = max(0, min(4, perCta - rowOf(b, 0)));
    if (lane == 0)
      expectBytes(bars + slot, valid * kRowBytes);
    __syncwarp();
    if (lane < valid)
      bulkCopy(warpRing + (slot * 4 + lane) * kRowBytes,
               base + (size_t)mine[rowOf(b, lane)] * kRowBytes, kRowBytes, bars + slot);
  };
  for (int b = 0; b < kDepth - 1; ++b)
    issue(b);
  for (int b = 0; b < batches; ++b) {
    issue(b + kDepth - 1);
    const int slot = b % kDepth;
    waitPhase(bars + slot, (b / kDepth) & 1);
    // The batch's rows, 16 bytes a lane.
    const int valid = max(0, min(4, perCta - rowOf(b, 0)));
    for (int c = lane; c < valid * kChunks; c += 32) {
      const int sub = c / kChunks, chunk = c % kChunks;
      *(int4 *)(dst + (size_t)rowOf(b, sub) * kRowBytes + 16 * chunk) =
          *(const int4 *)(warpRing + (slot * 4 + sub) * kRowBytes + 16 * chunk);
    }
    // The slot's reads are done before a later bulk copy overwrites it.
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
}

__global__ void flushL2(char *p, size_t n) {
  for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 16; i < n;
       i += (size_t)gridDim.x * blockDim.x * 16)
    *(int4 *)(p + i) = make_int4(i, 1, 2, 3);
}

// Sequential SM loads of pinned host memory: a warp reads 512 contiguous
// bytes an instruction, kUnroll instructions in flight, a CTA's
// kUnroll x blockDim x 16 bytes contiguous, grid-stride. The ceiling of
// SM-issued host reads, against which the gathers' rate is read.
template <int kUnroll> __global__ void sequentialRead(const char *src, size_t bytes, int *sink) {
  const size_t stride = (size_t)gridDim.x * blockDim.x * 16 * kUnroll;
  int acc = 0;
  for (size_t off = (size_t)blockIdx.x * blockDim.x * 16 * kUnroll + threadIdx.x * 16; off < bytes;
       off += stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const size_t o = off + (size_t)u * blockDim.x * 16;
      v[u] = o < bytes ? loadNc(src + o) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678)
    sink[0] = acc;
}

// Reads of host memory by the Tensor Memory Accelerator in blocks of
// `blockBytes` (one cp.async.bulk each, issued by lane 0 of the CTA's one
// warp into a shared ring kDepth blocks deep, completed on the slot's
// mbarrier; the warp touches a word of each): in order (tokens null: block
// blockIdx.x + k x gridDim.x of `bytes`) or gathered (block
// tokens[blockIdx.x x perCta + k] of the store). Do bulk reads of whole
// tokens read the host faster than SM loads' 16-byte requests?
template <int kDepth>
__global__ void bulkRead(const char *src, size_t bytes, int blockBytes, const int *tokens,
                         int perCta, int *sink) {
  extern __shared__ __align__(16) char bulkBlocks[];
  __shared__ __align__(8) unsigned long long bars[kDepth];
  const int lane = threadIdx.x;
  initBarriers(bars, kDepth, lane);
  const size_t blocks = bytes / blockBytes;
  const int count =
      tokens ? perCta
             : (int)(blocks > blockIdx.x ? (blocks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0);
  auto srcOf = [&](int k) {
    return tokens ? src + (size_t)tokens[(size_t)blockIdx.x * perCta + k] * blockBytes
                  : src + ((size_t)blockIdx.x + (size_t)k * gridDim.x) * blockBytes;
  };
  auto issue = [&](int k) {
    if (k >= count || lane != 0)
      return;
    const int slot = k % kDepth;
    expectBytes(bars + slot, blockBytes);
    bulkCopy(bulkBlocks + (size_t)slot * blockBytes, srcOf(k), blockBytes, bars + slot);
  };
  for (int k = 0; k < kDepth - 1; ++k)
    issue(k);
  int acc = 0;
  for (int k = 0; k < count; ++k) {
    issue(k + kDepth - 1);
    const int slot = k % kDepth;
    waitPhase(bars + slot, (k / kDepth) & 1);
    acc ^= *(const int *)(bulkBlocks + (size_t)slot * blockBytes + (lane * 16) % blockBytes);
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  if (acc == 0x12345678)
    sink[0] = acc;
}

// The same gathered tokens by SM loads: a warp a token, 16 bytes a lane,
// every load of the token in flight before any use.
template <int kTokenBytes>
__global__ void tokenLoads(const char *src, const int *tokens, int perCta, int *sink) {
  constexpr int kLoads = (kTokenBytes / 16 + 31) / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  int acc = 0;
  for (int k = warp; k < perCta; k += warps) {
    const char *token = src + (size_t)tokens[(size_t)blockIdx.x * perCta + k] * kTokenBytes;
    int4 v[kLoads];
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int chunk = lane + 32 * i;
      v[i] = chunk < kTokenBytes / 16 ? loadNc(token + 16 * chunk) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i)
      acc ^= v[i].x ^ v[i].y ^ v[i].z ^ v[i].w;
  }
  if (acc == 0x12345678)
    sink[0] = acc;
}

int main(int argc, char **argv) {
  // argv[1]: rows a request (the store's size); argv[2]: "thp" to pin
  // memory the kernel backs with 2 MB transparent huge pages (mmap +
  // madvise, then cudaHostRegister) instead of cudaHostAlloc's.
  if (argc > 1)
    history = std::atoi(argv[1]);
  const bool thp = argc > 2 && std::string(argv[2]) == "thp";
  const bool sequentialOnly = argc > 2 && std::string(argv[2]) == "sequential";
  CK(cudaMemcpyToSymbol(deviceHistory, &history, sizeof(int)));
  size_t storeBytes = (size_t)kRequests * history * kRowBytes;
  char *host;
  if (thp) {
    size_t huge = size_t(2) << 20;
    storeBytes = (storeBytes + huge - 1) / huge * huge;
    void *p = mmap(nullptr, storeBytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) {
      printf("mmap failed\n");
      return 1;
    }
    host = (char *)(((uintptr_t)p + huge - 1) / huge * huge);
    if (madvise(host, storeBytes, MADV_HUGEPAGE) != 0)
      printf("madvise(MADV_HUGEPAGE) failed\n");
    for (size_t i = 0; i < storeBytes; i += 4096)
      host[i] = (char)i;
    CK(cudaHostRegister(host, storeBytes, cudaHostRegisterMapped));
  } else
    CK(cudaHostAlloc(&host, storeBytes, cudaHostAllocMapped));
  printf("store: %d rows a request, %.2f GB, %s\n", history, storeBytes / 1e9,
         thp ? "THP-backed, cudaHostRegister" : "cudaHostAlloc");
  for (size_t i = 0; i < storeBytes; i += 4096)
    host[i] = (char)i;
  char *hostDev;
  CK(cudaHostGetDevicePointer((void **)&hostDev, host, 0));
  char *out, *flush;
  size_t flushBytes = 256 << 20;
  CK(cudaMalloc(&out, (size_t)kRequests * 2048 * kRowBytes));
  CK(cudaMalloc(&flush, flushBytes));
  int *rowsDev;
  CK(cudaMalloc(&rowsDev, kRequests * 2048 * sizeof(int)));
  cudaEvent_t s, e;
  cudaEventCreate(&s);
  cudaEventCreate(&e);
  // Pinned copy rate.
  {
    size_t copyBytes = std::min(storeBytes, size_t(1) << 30);
    char *dev;
    CK(cudaMalloc(&dev, copyBytes));
    CK(cudaMemcpyAsync(dev, host, copyBytes, cudaMemcpyHostToDevice));
    cudaEventRecord(s);
    for (int r = 0; r < 5; ++r)
      CK(cudaMemcpyAsync(dev, host, copyBytes, cudaMemcpyHostToDevice));
    cudaEventRecord(e);
    CK(cudaEventSynchronize(e));
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    printf("pinned copy: %.1f GB/s\n", 5.0 * copyBytes / ms / 1e6);
    // The same bytes read by SM loads (ld.global.nc, 16 B a lane).
    char *hostBase;
    CK(cudaHostGetDevicePointer((void **)&hostBase, host, 0));
    // GB/s of `launch` reading `gb`: once to warm up, then 3 times.
    auto readRate = [&](auto launch, double gb) {
      launch();
      CK(cudaDeviceSynchronize());
      CK(cudaGetLastError());
      cudaEventRecord(s);
      for (int r = 0; r < 3; ++r)
        launch();
      cudaEventRecord(e);
      CK(cudaEventSynchronize(e));
      CK(cudaGetLastError());
      float t;
      cudaEventElapsedTime(&t, s, e);
      return 3.0 * gb / t * 1e3;
    };
    printf("SM loads of the same %.2f GB, in order (CTAs x 256 threads, loads in flight a "
           "thread):",
           copyBytes / 1e9);
    for (int ctas : {132, 264, 528, 1056})
      for (int unroll : {4, 8}) {
        printf(" %d x %d: %.1f GB/s;", ctas, unroll,
               readRate(
                   [&] {
                     if (unroll == 4)
                       sequentialRead<4><<<ctas, 256>>>(hostBase, copyBytes, (int *)dev);
                     else
                       sequentialRead<8><<<ctas, 256>>>(hostBase, copyBytes, (int *)dev);
                   },
                   copyBytes / 1e9));
      }
    printf("\n");
    // The TMA's bulk reads: in order, blocks of 4 and 16 KB; then 2624 B
    // tokens (a layer group's, the store read as tokens) gathered at
    // random, against SM loads of the same tokens.
    printf("TMA bulk reads in order (CTAs of one warp, a ring 4 blocks deep):");
    for (int blockBytes : {4096, 16384})
      for (int ctas : {132, 264, 528}) {
        const int sharedBytes = 4 * blockBytes;
        CK(cudaFuncSetAttribute(bulkRead<4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                sharedBytes));
        const double gb = (double)(copyBytes / blockBytes * blockBytes) / 1e9;
        printf(" %d B x %d CTAs: %.1f GB/s;", blockBytes, ctas,
               readRate(
                   [&] {
                     bulkRead<4><<<ctas, 32, sharedBytes>>>(hostBase, copyBytes, blockBytes,
                                                            nullptr, 0, (int *)dev);
                   },
                   gb));
      }
    printf("\n");
    {
      constexpr int kToken = 2624, kCtas = 512, kPer = 256;
      const long long storeTokens = (long long)(storeBytes / kToken);
      std::vector<int> tokens((size_t)kCtas * kPer);
      std::mt19937 pick(11);
      for (int &t : tokens)
        t = (int)(pick() % storeTokens);
      int *tokensDev;
      CK(cudaMalloc(&tokensDev, tokens.size() * sizeof(int)));
      CK(cudaMemcpy(tokensDev, tokens.data(), tokens.size() * sizeof(int), cudaMemcpyHostToDevice));
      const double gb = (double)tokens.size() * kToken / 1e9;
      printf("2624 B tokens gathered at random over the store (%d CTAs x %d, %.0f MB): SM loads "
             "(8 warps a CTA) %.1f GB/s; TMA bulk, ring depth",
             kCtas, kPer, gb * 1e3,
             readRate(
                 [&] { tokenLoads<kToken><<<kCtas, 256>>>(hostBase, tokensDev, kPer, (int *)dev); },
                 gb));
      auto depthRun = [&](auto kernelOf, int depth) {
        const int sharedBytes = depth * kToken;
        CK(cudaFuncSetAttribute(kernelOf, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                sharedBytes));
        printf(" %d: %.1f GB/s;", depth,
               readRate(
                   [&] {
                     kernelOf<<<kCtas, 32, sharedBytes>>>(hostBase, storeBytes, kToken, tokensDev,
                                                          kPer, (int *)dev);
                   },
                   gb));
      };
      depthRun(bulkRead<4>, 4);
      depthRun(bulkRead<8>, 8);
      depthRun(bulkRead<16>, 16);
      printf("\n");
      cudaFree(tokensDev);
    }
    cudaFree(dev);
  }
  if (sequentialOnly)
    return 0;
  char *hbmStore;
  CK(cudaMalloc(&hbmStore, storeBytes));
  std::mt19937 rng(7);
  // Times `launch` (kernel launches), after flushing L2 where `flushFirst`.
  auto timedLaunch = [&](auto launch, bool flushFirst = true) {
    if (flushFirst)
      flushL2<<<264, 512>>>(flush, flushBytes);
    cudaEventRecord(s);
    launch();
    cudaEventRecord(e);
    CK(cudaEventSynchronize(e));
    CK(cudaGetLastError());
    float ms;
    cudaEventElapsedTime(&ms, s, e);
    return ms;
  };
  auto timeIt = [&](int perCta, int mode, int ahead, int threads, bool flushFirst) {
    return timedLaunch(
        [&] { kernel<<<kRequests, threads>>>(hostDev, rowsDev, perCta, out, mode, ahead); },
        flushFirst);
  };
  for (double missing : {0.05, 0.14, 0.30, 1.0}) {
    int perCta = (int)(missing * 2048);
    std::vector<int> rows(kRequests * perCta);
    auto draw = [&] {
      for (int r = 0; r < kRequests; ++r) {
        std::vector<int> ids(history);
        for (int i = 0; i < history; ++i)
          ids[i] = i;
        for (int i = 0; i < perCta; ++i)
          std::swap(ids[i], ids[i + rng() % (history - i)]);
        std::copy(ids.begin(), ids.begin() + perCta, rows.begin() + r * perCta);
      }
      CK(cudaMemcpy(rowsDev, rows.data(), rows.size() * sizeof(int), cudaMemcpyHostToDevice));
    };
    double mb = (double)kRequests * perCta * kRowBytes / 1e6;
    printf("\n== missing %.0f%%: %d rows a CTA, %.1f MB\n", missing * 100, perCta, mb);
    // L2 prefetches of host rows, then a gather of the same rows.
    for (int rep = 0; rep < 2; ++rep) {
      draw();
      flushL2<<<264, 512>>>(flush, flushBytes);
      float prefetch = timeIt(perCta, 1, 0, 128, false);
      float after = timeIt(perCta, 0, 0, 128, false);
      draw();
      float cold = timeIt(perCta, 0, 0, 128, true);
      float again = timeIt(perCta, 0, 0, 128, false);
      printf("host: bulk L2 prefetch %.4f ms, then the gather %.4f; the gather after a flush %.4f, "
             "again %.4f\n",
             prefetch, after, cold, again);
    }
    // The copy engines instead of SM loads: one cudaMemcpyBatchAsync of
    // the rows (656 B each), and of 4-row pieces (2624 B, a layer group's
    // token) at the same positions.
    for (int piece : {1, 4}) {
      draw();
      std::vector<void *> dsts(rows.size());
      std::vector<const void *> srcs(rows.size());
      std::vector<size_t> sizes(rows.size(), (size_t)piece * kRowBytes);
      char *batchOut;
      CK(cudaMalloc(&batchOut, rows.size() * piece * kRowBytes));
      for (size_t i = 0; i < rows.size(); ++i) {
        size_t request = i / perCta;
        size_t row = std::min<size_t>(rows[i], history - piece);
        srcs[i] = host + (request * history + row) * kRowBytes;
        dsts[i] = batchOut + i * piece * kRowBytes;
      }
      cudaMemcpyAttributes attr = {};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
      size_t attrIndex = 0;
      float best = 1e30f;
      cudaStream_t stream; // (batches refuse the legacy default stream)
      CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      for (int rep = 0; rep < 3; ++rep) {
        cudaEventRecord(s, stream);
        CK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), rows.size(), &attr,
                                &attrIndex, 1, stream));
        cudaEventRecord(e, stream);
        CK(cudaEventSynchronize(e));
        float ms;
        cudaEventElapsedTime(&ms, s, e);
        best = std::min(best, ms);
      }
      double bytes = (double)rows.size() * piece * kRowBytes / 1e6;
      printf("copy engines, cudaMemcpyBatchAsync of %zu pieces of %d B: %.4f ms = %.1f GB/s\n",
             rows.size(), piece * kRowBytes, best, bytes / best);
      CK(cudaStreamDestroy(stream));
      CK(cudaFree(batchOut));
    }
    // A few CTAs of 1024 threads for all requests' rows.
    {
      draw();
      for (int nc = 2; nc >= 0; --nc) {
        printf("host, few CTAs x 1024 threads, %s loads:",
               nc == 2 ? "ld.global.nc, rows of a warp from 4 requests"
               : nc    ? "ld.global.nc"
                       : "ld.global");
        for (int ctas : {2, 4, 8, 16, 32, 132}) {
          const float ms = timedLaunch([&] {
            if (nc == 2)
              fewCtas<true, true><<<ctas, 1024>>>(hostDev, rowsDev, perCta, out);
            else if (nc)
              fewCtas<true><<<ctas, 1024>>>(hostDev, rowsDev, perCta, out);
            else
              fewCtas<false><<<ctas, 1024>>>(hostDev, rowsDev, perCta, out);
          });
          printf(" %d: %.1f GB/s;", ctas, mb / ms);
        }
        printf("\n");
      }
    }
    // cp.async into a shared ring, against ld.global.nc with the same map
    // (4 rows x 128 B), on the same rows.
    for (int rep = 0; rep < 2; ++rep) {
      printf("host, 4 rows x 128 B: ld.global.nc");
      draw();
      printf(" %.1f GB/s; cp.async into a shared ring, batches in flight a warp:",
             mb / timeIt(perCta, 7, 0, 128, true));
      auto ringed = [&](auto kernelOf, int depth) {
        const int sharedBytes = 4 * depth * 4 * kRowBytes; // 4 warps
        CK(cudaFuncSetAttribute(kernelOf, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                sharedBytes));
        draw();
        const float ms = timedLaunch(
            [&] { kernelOf<<<kRequests, 128, sharedBytes>>>(hostDev, rowsDev, perCta, out); });
        printf(" %d: %.1f GB/s;", depth, mb / ms);
      };
      ringed(asyncGather<2>, 2);
      ringed(asyncGather<4>, 4);
      ringed(asyncGather<8>, 8);
      printf("\n  cp.async.bulk (whole rows) into a shared ring, batches in flight a warp:");
      auto bulked = [&](auto kernelOf, int depth) {
        const int sharedBytes = 4 * depth * (4 * kRowBytes + 8); // 4 warps
        CK(cudaFuncSetAttribute(kernelOf, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                sharedBytes));
        draw();
        const float ms = timedLaunch(
            [&] { kernelOf<<<kRequests, 128, sharedBytes>>>(hostDev, rowsDev, perCta, out); });
        CK(cudaGetLastError());
        printf(" %d: %.1f GB/s;", depth, mb / ms);
      };
      bulked(bulkGather<2>, 2);
      bulked(bulkGather<4>, 4);
      bulked(bulkGather<8>, 8);
      bulked(bulkGather<16>, 16);
      printf("\n");
    }
    for (int tier = 0; tier < 2; ++tier) {
      const char *src = tier ? hbmStore : hostDev;
      draw();
      kernel<<<kRequests, 128>>>(src, rowsDev, perCta, out, 0, 0);
      for (int rep = 0; rep < 2; ++rep) {
        float t[4];
        int modes[4] = {0, 5, 7, 6};
        for (int m = 0; m < 4; ++m) {
          draw();
          flushL2<<<264, 512>>>(flush, flushBytes);
          cudaEventRecord(s);
          kernel<<<kRequests, 128>>>(src, rowsDev, perCta, out, modes[m], 0);
          cudaEventRecord(e);
          CK(cudaEventSynchronize(e));
          cudaEventElapsedTime(&t[m], s, e);
        }
        printf("%s: warp per row %.4f ms = %.1f GB/s; 8 rows x 64 B %.4f = %.1f; 4 rows x 128 B "
               "%.4f = %.1f; "
               "2 rows x 256 B %.4f = %.1f\n",
               tier ? "HBM " : "host", t[0], mb / t[0], t[1], mb / t[1], t[2], mb / t[2], t[3],
               mb / t[3]);
      }
    }
  }
  return 0;
}
