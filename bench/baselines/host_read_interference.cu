//===- host_read_interference.cu - Do host reads slow an SM's HBM loads? -===//
//
// A benchmark baseline, hand-written (not product code). The fused FP8
// kernel's producer waits two to three times longer for its HBM and L2
// loads when the same CTA's second consumer warpgroup reads host rows
// (bench/NOTES.md, fifty-first session). This program measures that alone:
// "probe" warps gather random 656-byte rows from HBM (`depth` rows in flight
// a warp, coherent 16-byte loads as the producer's mixed form issues them)
// and time each batch, while "host" warps read random 656-byte rows of a
// 2.75 GB mapped pinned store (a warp a row, two rows in flight unless
// `depth` says otherwise) until every probe is done:
//   none   probes alone: 128 CTAs (one an SM) of 4 probe warps;
//   same   4 host warps beside the 4 probe warps of each of the 128 CTAs;
//   other  the probes' 128 CTAs, and the host warps in 4 CTAs of 32 warps
//          on the 4 SMs the probes leave free (one CTA an SM: each asks
//          for most of an SM's shared memory);
//   host   host warps alone as in `same` (a fixed count of rows each).
// `flavors` reads the host rows four ways (`same` and `host`, two rows in
// flight a warp): ld.global.nc, ld.global.cg, ld.global.nc.L1::no_allocate,
// and bulk copies (the TMA) of whole rows into shared memory. `depth` (the
// default) reads them by ld.global.nc and varies the host warps of a `same`
// CTA (1 or 4) and the rows each has in flight (1, 2 or 8), and the rows in
// flight of `other`'s host warps (2, 4 or 8). Each line: the mode, the host
// reads, the probes' depth, their mean ns a batch and HBM rate, and the
// host warps' rate.
//
//   nvcc -O3 -arch=sm_90a -o host_read_interference \
//     bench/baselines/host_read_interference.cu
//   ./host_read_interference [depth|flavors]
//
//===----------------------------------------------------------------------===//
#include "Check.cuh"

#include <cstdint>
#include <cstdio>
#include <string>

constexpr int kRowBytes = 656, kChunks = kRowBytes / 16;
constexpr int kProbeCtas = 128, kProbeWarps = 4, kHostCtas = 4;
constexpr std::size_t kHostRows = std::size_t(128) * 32768; // 2.75 GB
constexpr std::size_t kHbmRows = std::size_t(128) * 2048;   // 172 MB
constexpr int kProbeBatches = 2000;
constexpr int kSharedBytes = 200 * 1024; // one CTA an SM

__device__ unsigned doneProbes;
__device__ unsigned long long probeCycles, probeBatches, hostRowsRead, sink;

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

/// A coherent 16-byte load (ld.global.ca, ld.global's default), as the
/// mixed form's producer issues.
__device__ __forceinline__ int4 loadCoherent(const char *p) {
  return __ldca(reinterpret_cast<const int4 *>(p));
}

template <int kDepth> __device__ void probe(const char *hbm, int lane, uint64_t seed) {
  unsigned acc = 0;
  unsigned long long cycles = 0;
  for (int batch = 0; batch < kProbeBatches; ++batch) {
    int4 v[kDepth][2];
    long long start = clock64();
#pragma unroll
    for (int r = 0; r < kDepth; ++r) {
      const char *row = hbm + mix(seed + batch * kDepth + r) % kHbmRows * kRowBytes;
      v[r][0] = loadCoherent(row + 16 * lane);
      v[r][1] = lane + 32 < kChunks ? loadCoherent(row + 16 * (lane + 32)) : int4{};
    }
#pragma unroll
    for (int r = 0; r < kDepth; ++r)
      acc += v[r][0].x ^ v[r][1].y;
    __syncwarp();
    cycles += clock64() - start;
  }
  if (lane == 0) {
    atomicAdd(&probeCycles, cycles);
    atomicAdd(&probeBatches, kProbeBatches);
  }
  atomicAdd(&sink, acc);
}

/// How the host warps read a row: 0 ld.global.nc, 1 ld.global.cg (L2
/// only), 2 ld.global.nc.L1::no_allocate, 3 a bulk copy (the TMA,
/// cp.async.bulk) of the whole row into shared memory by one lane,
/// completed on an mbarrier.
__device__ int hostFlavor;
/// Rows a host warp has in flight (1 to kMaxHostDepth; bulk copies: 2).
__device__ int hostDepth;
constexpr int kMaxHostDepth = 8;

__device__ __forceinline__ int4 loadFlavor(const char *p, int flavor) {
  int4 x;
  if (flavor == 1)
    x = __ldcg(reinterpret_cast<const int4 *>(p));
  else if (flavor == 2)
    asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w)
                 : "l"(p));
  else
    x = loadNc(p);
  return x;
}

__device__ void host(const char *store, int lane, uint64_t seed, int fixedRows, char *landing,
                     uint64_t *barrier) {
  const int flavor = hostFlavor, depth = hostDepth;
  unsigned acc = 0, phase = 0;
  unsigned long long rows = 0;
  unsigned barrierAddress = static_cast<unsigned>(__cvta_generic_to_shared(barrier));
  if (flavor == 3 && lane == 0)
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(barrierAddress));
  __syncwarp();
  for (int n = 0;; n += 2) {
    if (fixedRows ? n >= fixedRows : *(volatile unsigned *)&doneProbes >= kProbeCtas)
      break;
    if (flavor == 3) {
      if (lane == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(barrierAddress),
                     "r"(2 * kRowBytes));
        for (int r = 0; r < 2; ++r) {
          const char *row = store + mix(seed + n + r) % kHostRows * kRowBytes;
          unsigned destination =
              static_cast<unsigned>(__cvta_generic_to_shared(landing + r * kRowBytes));
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                       "[%0], [%1], %2, [%3];" ::"r"(destination),
                       "l"(row), "r"(kRowBytes), "r"(barrierAddress)
                       : "memory");
        }
      }
      asm volatile("{\n .reg .pred done;\n wait:\n"
                   " mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
                   " @!done bra wait;\n}" ::"r"(barrierAddress),
                   "r"(phase)
                   : "memory");
      phase ^= 1;
      acc += landing[lane * 16];
      __syncwarp();
      rows += 2;
      continue;
    }
    int4 v[kMaxHostDepth][2];
#pragma unroll
    for (int r = 0; r < kMaxHostDepth; ++r)
      if (r < depth) {
        const char *row = store + mix(seed + n + r) % kHostRows * kRowBytes;
        v[r][0] = loadFlavor(row + 16 * lane, flavor);
        v[r][1] = lane + 32 < kChunks ? loadFlavor(row + 16 * (lane + 32), flavor) : int4{};
      }
#pragma unroll
    for (int r = 0; r < kMaxHostDepth; ++r)
      if (r < depth)
        acc += v[r][0].x ^ v[r][1].y;
    rows += depth;
    n += depth - 2;
  }
  if (lane == 0)
    atomicAdd(&hostRowsRead, rows);
  atomicAdd(&sink, acc);
}

/// Blocks below kProbeCtas: warps below `probeWarps` probe, the others read
/// the host where `hostBesideProbes` (else they idle); blocks from
/// kProbeCtas on read the host with every warp.
template <int kDepth>
__global__ void kernel(const char *hbm, const char *store, int probeWarps, bool hostBesideProbes,
                       int fixedRows) {
  extern __shared__ __align__(128) char landing[]; // 2 rows a warp, then barriers
  __shared__ unsigned probesLeft;
  if (threadIdx.x == 0)
    probesLeft = probeWarps;
  __syncthreads();
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint64_t seed = mix((uint64_t(blockIdx.x) << 16 | warp) + 1) << 20;
  if (blockIdx.x < kProbeCtas && warp < probeWarps) {
    probe<kDepth>(hbm, lane, seed);
    // The CTA's probes are done when its last probe warp is.
    if (lane == 0 && atomicSub(&probesLeft, 1) == 1)
      atomicAdd(&doneProbes, 1);
    return;
  }
  if (blockIdx.x < kProbeCtas && !hostBesideProbes)
    return;
  host(store, lane, seed, fixedRows, landing + warp * 2 * kRowBytes,
       reinterpret_cast<uint64_t *>(landing + 32 * 2 * kRowBytes) + warp);
}

/// One run: `mode` as above, host reads of `flavor` with `depth` rows in
/// flight a warp, `hostWarps` host warps a CTA in `same` and `host` (32 in
/// `other`'s host CTAs).
template <int kDepth>
void run(const char *hbm, const char *store, const std::string &mode, int flavor, int depth = 2,
         int hostWarps = kProbeWarps) {
  CK(cudaMemcpyToSymbol(hostFlavor, &flavor, sizeof flavor));
  CK(cudaMemcpyToSymbol(hostDepth, &depth, sizeof depth));
  unsigned zero32 = 0;
  unsigned long long zero = 0;
  CK(cudaMemcpyToSymbol(doneProbes, &zero32, sizeof zero32));
  CK(cudaMemcpyToSymbol(probeCycles, &zero, sizeof zero));
  CK(cudaMemcpyToSymbol(probeBatches, &zero, sizeof zero));
  CK(cudaMemcpyToSymbol(hostRowsRead, &zero, sizeof zero));
  int probeWarps = mode == "host" ? 0 : kProbeWarps;
  int warps = mode == "same" || mode == "host" ? kProbeWarps + hostWarps : kProbeWarps;
  int ctas = mode == "other" ? kProbeCtas + kHostCtas : kProbeCtas;
  int fixedRows = mode == "host" ? 4000 : 0;
  auto function = kernel<kDepth>;
  CK(cudaFuncSetAttribute(function, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventRecord(start));
  // ("other": every CTA of 32 warps, the probes' CTAs with 28 idle.)
  int threads = mode == "other" ? 32 * 32 : 32 * warps;
  function<<<ctas, threads, kSharedBytes>>>(hbm, store, probeWarps, mode != "other", fixedRows);
  CK(cudaGetLastError());
  CK(cudaEventRecord(stop));
  CK(cudaEventSynchronize(stop));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, start, stop));
  unsigned long long cycles = 0, batches = 0, rows = 0;
  CK(cudaMemcpyFromSymbol(&cycles, probeCycles, sizeof cycles));
  CK(cudaMemcpyFromSymbol(&batches, probeBatches, sizeof batches));
  CK(cudaMemcpyFromSymbol(&rows, hostRowsRead, sizeof rows));
  int clockKhz = 0;
  CK(cudaDeviceGetAttribute(&clockKhz, cudaDevAttrClockRate, 0));
  double batchNs = batches ? double(cycles) / batches / (clockKhz * 1e-6) : 0;
  double hbmGBs = batches ? double(batches) * kDepth * kRowBytes / (ms * 1e6) : 0;
  printf("%-6s flavor %d host %2d warps x %d rows  depth %2d  kernel %8.3f ms  probe batch %8.1f ns "
         "(%6.1f GB/s of HBM rows)  host %6.1f GB/s\n",
         mode.c_str(), flavor, mode == "other" ? 32 : hostWarps, depth, kDepth, ms, batchNs, hbmGBs,
         rows * kRowBytes / (ms * 1e6));
  CK(cudaEventDestroy(start));
  CK(cudaEventDestroy(stop));
}

int main(int argc, char **argv) {
  const std::string what = argc > 1 ? argv[1] : "depth";
  if (what != "depth" && what != "flavors") {
    printf("usage: host_read_interference [depth|flavors]\n");
    return 2;
  }
  char *store = pinnedMapped(kHostRows * kRowBytes);
  char *hbm = nullptr;
  CK(cudaMalloc(&hbm, kHbmRows * kRowBytes));
  CK(cudaMemset(hbm, 1, kHbmRows * kRowBytes));
  printf("pinned copy %.1f GB/s\n", pinnedCopyRate(store));
  for (int round = 0; round < 2; ++round) {
    run<1>(hbm, store, "none", 0);
    run<8>(hbm, store, "none", 0);
    if (what == "flavors") {
      // The four kinds of host load (two rows in flight, 4 warps a CTA).
      for (int flavor = 0; flavor < 4; ++flavor)
        for (const char *mode : {"same", "host"}) {
          run<1>(hbm, store, mode, flavor);
          run<8>(hbm, store, mode, flavor);
        }
      run<1>(hbm, store, "other", 0);
      run<8>(hbm, store, "other", 0);
      continue;
    }
    // How the slowdown grows with the host reads an SM has in flight, and
    // how fast 4 SMs of deeper host warps read.
    for (int hostWarps : {1, 4})
      for (int depth : {1, 2, 8}) {
        run<1>(hbm, store, "same", 0, depth, hostWarps);
        run<8>(hbm, store, "same", 0, depth, hostWarps);
      }
    for (int depth : {2, 4, 8}) {
      run<1>(hbm, store, "other", 0, depth);
      run<8>(hbm, store, "other", 0, depth);
    }
  }
  return 0;
}
