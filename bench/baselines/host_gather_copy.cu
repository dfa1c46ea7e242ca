//===- host_gather_copy.cu - Missing rows gathered by host cores, copied by DMA ===//
//
// A benchmark baseline, hand-written (not product code), for the question of
// bench/NOTES.md (thirtieth session): the mixed steps miss their 1.10x target
// because SM loads cannot read scattered host rows faster than ~47 GB/s (656
// B rows) or ~51 GB/s (in order), and the copy engines, which reach the
// pinned copy's ~55 GB/s, cost ~1.5 us a piece (0.4 GB/s for 656 B rows).
// Could the host's own cores gather the missing rows out of the pinned store
// into a contiguous pinned staging buffer, chunk by chunk, while the copy
// engine carries each gathered chunk to HBM at the copy rate and a kernel
// that waits on a flag per chunk (cuStreamWriteValue32 after each chunk's
// copy) consumes it? Then the SMs would read only HBM, and the missing bytes
// would arrive at ~min(host gather rate, copy rate).
//
// On a store of 128 requests (656-byte FP8 rows, 32768 a request: the mixed
// steps' 2.75 GB; 2624-byte layer-group tokens, argv[2] a request, default
// 65536: the retrieval benchmark's 22 GB), for 5 / 14 / 30% of each
// request's random top-2048 missing (in the selection's order, not sorted),
// median of 7 runs, GB/s of useful bytes:
//   - the pinned copy of 1 GB, contiguous (the floor's rate);
//   - SM loads gathering the same rows into HBM (a warp a row, every load of
//     the row in flight: the generated fetch's pattern), CUDA events;
//   - the missing ids' way to the host: a copy and an event waited on, or
//     the kernel writing them into mapped pinned memory and a flag the host
//     spins on;
//   - host threads alone gathering into pinned staging (memcpy a row, or
//     16-byte loads with non-temporal stores and software prefetches 8 rows
//     ahead), 1 / 2 / 4 / 8 / all threads but the timing one, the wall clock;
//   - the pipeline: the missing ids copied from HBM to the host (they come
//     from the device's residency lookup), all threads but one gathering
//     slices of 0.03-4 MB in order, the dispatching thread enqueueing each
//     finished chunk's copy (0.25-4 MB: a slice or several, gathered by
//     several workers at once) and flag write in order, a grid of 132 CTAs
//     reading each chunk from HBM once its flag says it arrived; from the
//     ids' copy until the grid ends (wall clock), with the time until the
//     first chunk's copy was enqueued. Every consumer and gather checks an
//     XOR of the bytes against the host's.
// The staging buffer holds the whole step (no ring).
// `cpu` as argv[1] runs the host gathers on ordinary memory, with smaller
// stores, and the pipeline's logic with its copies done by memcpy (for a
// machine without a GPU).
//
//   nvcc -O3 -arch=sm_90a -o host_gather_copy bench/baselines/host_gather_copy.cu
//
//===----------------------------------------------------------------------===//
#include "Check.cuh"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <emmintrin.h>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include <xmmintrin.h>

constexpr int kRequests = 128, kTopK = 2048;

static double nowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

//===----------------------------------------------------------------------===//
// Host gathers
//===----------------------------------------------------------------------===//

/// Copies pieces ids[0..n) of `store` (each `bytes` long, a multiple of 16)
/// to dst, one after another, by memcpy.
static void gatherMemcpy(const char *store, const std::uint32_t *ids, size_t n, char *dst,
                         int bytes) {
  for (size_t i = 0; i < n; ++i)
    std::memcpy(dst + i * bytes, store + (size_t)ids[i] * bytes, bytes);
}

/// The same by 16-byte loads and non-temporal stores (no read for ownership
/// of the staging lines, which only the copy engine reads next), with
/// software prefetches of the piece 8 ahead (more misses in flight than the
/// hardware prefetchers start for scattered pieces). Ends with a store fence.
static void gatherStreaming(const char *store, const std::uint32_t *ids, size_t n, char *dst,
                            int bytes) {
  constexpr size_t kAhead = 8;
  auto prefetch = [&](size_t i) {
    const char *p = store + (size_t)ids[i] * bytes;
    for (int o = 0; o < bytes; o += 64)
      _mm_prefetch(p + o, _MM_HINT_T0);
    _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
  };
  for (size_t i = 0; i < std::min(n, kAhead); ++i)
    prefetch(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n)
      prefetch(i + kAhead);
    const __m128i *s = reinterpret_cast<const __m128i *>(store + (size_t)ids[i] * bytes);
    __m128i *d = reinterpret_cast<__m128i *>(dst + i * bytes);
    for (int c = 0; c < bytes / 16; ++c)
      _mm_stream_si128(d + c, _mm_loadu_si128(s + c));
  }
  _mm_sfence();
}

using Gather = void (*)(const char *, const std::uint32_t *, size_t, char *, int);

/// XOR of the 32-bit words of `bytes` bytes at p.
static std::uint32_t xorOf(const char *p, size_t bytes) {
  std::uint32_t x = 0;
  for (size_t o = 0; o < bytes; o += 4) {
    std::uint32_t w;
    std::memcpy(&w, p + o, 4);
    x ^= w;
  }
  return x;
}

/// Worker threads for the gathers. A worker spins for 0.2 ms after a job,
/// then sleeps until the next (a serving engine's pool cannot hold cores
/// spinning all the time); the medians below are of workers woken while
/// still spinning, the first run of each series from sleep. `start(n, job)`
/// runs job(i) on workers 0..n-1; `wait()` returns once they all returned.
class Pool {
public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    stop_ = true;
    start(0, nullptr);
    for (auto &t : threads_)
      t.join();
  }
  int size() const { return (int)threads_.size(); }
  void start(int n, std::function<void(int)> job) {
    job_ = std::move(job);
    active_ = n;
    finished_.store(0);
    {
      // The generation and the job's worker count in one word, read by a
      // worker at once: a worker that had no part in the last job and wakes
      // for it late (after wait() returned and start() began this one) would
      // otherwise pair the old generation with this job's count, call job_
      // while it is being replaced, and then run the job a second time.
      std::lock_guard<std::mutex> lock(mutex_);
      ticket_.store(((ticket_.load() >> 32) + 1) << 32 | (std::uint32_t)n,
                    std::memory_order_release);
    }
    wake_.notify_all();
  }
  void wait() {
    while (finished_.load(std::memory_order_acquire) < active_)
      _mm_pause();
  }

private:
  void loop(int index) {
    std::uint64_t seen = 0, ticket;
    for (;;) {
      const double spinUntil = nowMs() + 0.2;
      for (int i = 0; (ticket = ticket_.load(std::memory_order_acquire)) == seen; ++i) {
        _mm_pause();
        if (i % 64 == 0 && nowMs() > spinUntil) {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait(lock, [&] { return ticket_.load() != seen; });
        }
      }
      seen = ticket;
      if (stop_)
        return;
      // Only the job's own workers touch job_, and start() replaces it only
      // after wait() counted them all.
      if (index < (int)(ticket & 0xffffffffu)) {
        job_(index);
        finished_.fetch_add(1, std::memory_order_release);
      }
    }
  }
  std::vector<std::thread> threads_;
  std::function<void(int)> job_;
  std::atomic<std::uint64_t> ticket_{0}; ///< generation << 32 | workers
  std::atomic<int> finished_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  int active_ = 0; ///< the main thread's own copy, for wait()
  std::atomic<bool> stop_{false};
};

//===----------------------------------------------------------------------===//
// Device side
//===----------------------------------------------------------------------===//

/// SM loads gathering the listed pieces from mapped host memory into out, a
/// warp a piece, all of a lane's loads in flight before its stores; XOR of
/// the words into *x.
template <int kBytes>
__global__ void smGather(const char *store, const std::uint32_t *ids, int n, char *out,
                         unsigned *x) {
  constexpr int kChunks = kBytes / 16, kLoads = (kChunks + 31) / 32;
  const int lane = threadIdx.x % 32, warps = gridDim.x * blockDim.x / 32;
  unsigned acc = 0;
  for (int i = (blockIdx.x * blockDim.x + threadIdx.x) / 32; i < n; i += warps) {
    const char *src = store + (size_t)ids[i] * kBytes;
    char *dst = out + (size_t)i * kBytes;
    int4 v[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int c = lane + 32 * j;
      v[j] = c < kChunks ? loadNc(src + 16 * c) : make_int4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int c = lane + 32 * j;
      if (c < kChunks) {
        *(int4 *)(dst + 16 * c) = v[j];
        acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
      }
    }
  }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (lane == 0)
    atomicXor(x, acc);
}

/// The ids handed to the host by the kernel that has them: each CTA writes
/// its part into mapped pinned memory (posted writes over PCIe); the last
/// CTA to finish (by *done, zeroed before) sets *hostFlag to `value` after a
/// system-scope fence, which the host spins on.
__global__ void publish(const std::uint32_t *ids, int n, std::uint32_t *hostIds, unsigned *done,
                        unsigned *hostFlag, unsigned value) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    hostIds[i] = ids[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(done, 1) == gridDim.x - 1) {
    __threadfence_system();
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(hostFlag), "r"(value) : "memory");
  }
}

/// Reads chunk k of `staged` (chunkBytes each, total bytes in all) once
/// *arrived >= k + 1, CTAs taking chunks in turn; XOR of the words into *x.
__global__ void consume(const char *staged, const unsigned *arrived, size_t chunkBytes,
                        size_t total, int chunks, unsigned *x) {
  unsigned acc = 0;
  for (int k = blockIdx.x; k < chunks; k += gridDim.x) {
    if (threadIdx.x == 0) {
      unsigned seen;
      for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrived) : "memory");
        if (seen >= (unsigned)k + 1)
          break;
        __nanosleep(64);
      }
    }
    __syncthreads();
    const size_t begin = (size_t)k * chunkBytes;
    const size_t end = total < begin + chunkBytes ? total : begin + chunkBytes;
    for (size_t o = begin + 16 * threadIdx.x; o < end; o += 16 * blockDim.x) {
      const int4 v = __ldcg((const int4 *)(staged + o));
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncthreads();
  }
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (threadIdx.x % 32 == 0)
    atomicXor(x, acc);
}

/// cuStreamWriteValue32, from the driver through the runtime (no -lcuda, so
/// that the `cpu` mode runs where no driver is installed).
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
static WriteValue32 streamWriteValue32() {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault,
                                      &found));
  if (found != cudaDriverEntryPointSuccess || !fn) {
    printf("the driver has no cuStreamWriteValue32\n");
    exit(1);
  }
  return reinterpret_cast<WriteValue32>(fn);
}

//===----------------------------------------------------------------------===//
// One store
//===----------------------------------------------------------------------===//

struct Store {
  int bytes;         ///< a piece's bytes (656: a row; 2624: a group's token)
  long long history; ///< pieces a request
  char *host = nullptr;
  char *mapped = nullptr; ///< the device's address of host (GPU runs)
  size_t size() const { return (size_t)kRequests * history * bytes; }
};

/// Fills the store with the words' own hashes (never zeros), on every core.
static void fill(Store &s, int threads) {
  std::vector<std::thread> ts;
  const size_t words = s.size() / 8;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (size_t w = words * t / threads; w < words * (t + 1) / threads; ++w) {
        std::uint64_t z = w + 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        reinterpret_cast<std::uint64_t *>(s.host)[w] = z ^ (z >> 31);
      }
    });
  for (auto &t : ts)
    t.join();
}

/// Each request's missing pieces: the first `fraction` of a random top-2048
/// of its history, in the selection's (random) order; global piece indices.
static std::vector<std::uint32_t> missingOf(const Store &s, double fraction, unsigned seed) {
  std::mt19937_64 rng(seed);
  const int perRequest = (int)(fraction * kTopK + 0.5);
  std::vector<std::uint32_t> ids;
  std::vector<char> taken(s.history);
  for (int r = 0; r < kRequests; ++r) {
    std::fill(taken.begin(), taken.end(), 0);
    for (int k = 0; k < perRequest;) {
      const long long row = (long long)(rng() % s.history);
      if (taken[row])
        continue;
      taken[row] = 1;
      ids.push_back((std::uint32_t)(r * s.history + row));
      ++k;
    }
  }
  return ids;
}

/// GB/s of the host threads alone: `threads` workers split ids into equal
/// parts, each gathering its part into staging; median of 7.
static double hostRate(Pool &pool, int threads, Gather gather, const Store &s,
                       const std::vector<std::uint32_t> &ids, char *staging, std::uint32_t expect) {
  // Zeros first: the staging already holds these very bytes from the other
  // gather (or thread count), so a gather that wrote nothing would pass.
  memset(staging, 0, ids.size() * s.bytes);
  std::vector<double> ms;
  for (int rep = 0; rep < 8; ++rep) {
    const double t0 = nowMs();
    pool.start(threads, [&](int i) {
      const size_t a = ids.size() * i / threads, b = ids.size() * (i + 1) / threads;
      gather(s.host, ids.data() + a, b - a, staging + a * s.bytes, s.bytes);
    });
    pool.wait();
    if (rep > 0)
      ms.push_back(nowMs() - t0);
  }
  if (xorOf(staging, ids.size() * s.bytes) != expect) {
    printf("\nFAIL: the host gather's bytes differ from the store's\n");
    exit(1);
  }
  return ids.size() * (double)s.bytes / median(ms) / 1e6;
}

struct Gpu {
  cudaStream_t compute, copy;
  cudaEvent_t idsReady, s, e;
  unsigned *arrived, *x;
  char *dev;                       ///< HBM destination (the step's staging in HBM)
  std::uint32_t *idsDev;           ///< the missing ids where the device's lookup left them
  std::uint32_t *idsHost;          ///< pinned, mapped
  std::uint32_t *idsMapped;        ///< the device's address of idsHost
  unsigned *flagHost, *flagMapped; ///< publish's flag (pinned, mapped)
  char *staging;                   ///< pinned, the whole step
};

int main(int argc, char **argv) {
  const bool cpuOnly = argc > 1 && std::string(argv[1]) == "cpu";
  const long long tokenHistory = argc > 2 ? std::atoll(argv[2]) : cpuOnly ? 4096 : 65536;
  const int cores = (int)std::max(2u, std::thread::hardware_concurrency());
  Pool pool(cores - 1); // the main thread times and dispatches
  printf("host: %d hardware threads, %d workers%s\n", cores, pool.size(),
         cpuOnly ? " (cpu: ordinary memory, the pipeline's copies by memcpy)" : "");
  Gpu g{};
  WriteValue32 writeValue32 = nullptr;
  const size_t maxMissing = (size_t)(0.3 * kTopK + 1) * kRequests;
  if (!cpuOnly) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    writeValue32 = streamWriteValue32();
    CK(cudaStreamCreateWithFlags(&g.compute, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&g.copy, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g.idsReady));
    CK(cudaEventCreate(&g.s));
    CK(cudaEventCreate(&g.e));
    CK(cudaMalloc(&g.arrived, 4));
    CK(cudaMalloc(&g.x, 4));
    CK(cudaMalloc(&g.dev, std::max(maxMissing * 2624, size_t(1) << 30)));
    CK(cudaMalloc(&g.idsDev, maxMissing * 4));
    CK(cudaHostAlloc(&g.idsHost, maxMissing * 4, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&g.idsMapped, g.idsHost, 0));
    CK(cudaHostAlloc(&g.flagHost, 4, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&g.flagMapped, g.flagHost, 0));
    *g.flagHost = 0;
    CK(cudaHostAlloc(&g.staging, maxMissing * 2624, cudaHostAllocDefault));
    // The floor's rate: one contiguous pinned copy of 1 GB.
    char *src;
    const size_t copyBytes = size_t(1) << 30;
    CK(cudaHostAlloc(&src, copyBytes, cudaHostAllocDefault));
    memset(src, 1, copyBytes);
    std::vector<double> ms;
    for (int rep = 0; rep < 8; ++rep) {
      CK(cudaEventRecord(g.s, g.copy));
      CK(cudaMemcpyAsync(g.dev, src, copyBytes, cudaMemcpyHostToDevice, g.copy));
      CK(cudaEventRecord(g.e, g.copy));
      CK(cudaEventSynchronize(g.e));
      float t;
      CK(cudaEventElapsedTime(&t, g.s, g.e));
      if (rep > 0)
        ms.push_back(t);
    }
    printf("pinned copy, 1 GB contiguous: %.1f GB/s\n", copyBytes / median(ms) / 1e6);
    CK(cudaFreeHost(src));
    // The consumer loaded (lazy loading would load it inside the first
    // pipeline's cold run) and the flag write tried once while nothing waits
    // on it, so that a driver refusing it fails here rather than under a
    // grid that spins.
    consume<<<1, 32, 0, g.compute>>>(g.dev, g.arrived, 16, 0, 0, g.x);
    CK(cudaStreamSynchronize(g.compute));
    CK(cudaGetLastError());
    if (writeValue32(g.copy, (CUdeviceptr)g.arrived, 0, 0) != CUDA_SUCCESS) {
      printf("cuStreamWriteValue32 failed\n");
      return 1;
    }
    CK(cudaStreamSynchronize(g.copy));
  } else {
    // The pipeline's logic runs too, its copies by memcpy into g.dev.
    g.staging = (char *)aligned_alloc(4096, maxMissing * 2624);
    g.dev = (char *)aligned_alloc(4096, maxMissing * 2624);
    g.idsHost = (std::uint32_t *)aligned_alloc(4096, maxMissing * 4);
    memset(g.staging, 0, maxMissing * 2624);
  }

  for (int bytes : {656, 2624}) {
    Store s{bytes, bytes == 656 ? (cpuOnly ? 8192 : 32768) : tokenHistory};
    const double t0 = nowMs();
    if (cpuOnly)
      s.host = (char *)aligned_alloc(4096, s.size());
    else {
      CK(cudaHostAlloc(&s.host, s.size(), cudaHostAllocMapped));
      CK(cudaHostGetDevicePointer((void **)&s.mapped, s.host, 0));
    }
    fill(s, cores);
    printf("\nstore: %d B pieces, %lld a request, %.2f GB (allocated and filled in %.1f s)\n",
           bytes, s.history, s.size() / 1e9, (nowMs() - t0) / 1e3);
    for (double fraction : {0.05, 0.14, 0.30}) {
      const auto ids = missingOf(s, fraction, 7 + bytes);
      const size_t n = ids.size(), useful = n * (size_t)bytes;
      std::uint32_t expect = 0;
      for (std::uint32_t id : ids)
        expect ^= xorOf(s.host + (size_t)id * bytes, bytes);
      printf("%2.0f%% missing: %zu pieces, %.1f MB; floor (55 GB/s) %.3f ms\n", fraction * 100, n,
             useful / 1e6, useful / 55e6);

      if (!cpuOnly) {
        CK(cudaMemcpy(g.idsDev, ids.data(), n * 4, cudaMemcpyHostToDevice));
        std::vector<double> ms;
        for (int rep = 0; rep < 8; ++rep) {
          CK(cudaMemsetAsync(g.x, 0, 4, g.compute));
          CK(cudaEventRecord(g.s, g.compute));
          if (bytes == 656)
            smGather<656><<<528, 256, 0, g.compute>>>(s.mapped, g.idsDev, (int)n, g.dev, g.x);
          else
            smGather<2624><<<528, 256, 0, g.compute>>>(s.mapped, g.idsDev, (int)n, g.dev, g.x);
          CK(cudaEventRecord(g.e, g.compute));
          CK(cudaEventSynchronize(g.e));
          CK(cudaGetLastError());
          float t;
          CK(cudaEventElapsedTime(&t, g.s, g.e));
          if (rep > 0)
            ms.push_back(t);
        }
        unsigned got;
        CK(cudaMemcpy(&got, g.x, 4, cudaMemcpyDeviceToHost));
        printf("  SM loads (528 CTAs x 8 warps, a warp a piece): %.3f ms, %.1f GB/s%s\n",
               median(ms), useful / median(ms) / 1e6, got == expect ? "" : "  XOR MISMATCH");
        if (got != expect)
          return 1;
        // The ids' way to the host (the pipeline uses the copy): a copy and
        // an event waited on, or the kernel writing them into mapped memory
        // and a flag the host spins on; from the enqueue until the host may
        // read them.
        std::vector<double> copyMs, publishMs;
        for (int rep = 0; rep < 8; ++rep) {
          memset(g.idsHost, 0, n * 4);
          double t0 = nowMs();
          CK(cudaMemcpyAsync(g.idsHost, g.idsDev, n * 4, cudaMemcpyDeviceToHost, g.copy));
          CK(cudaEventRecord(g.idsReady, g.copy));
          CK(cudaEventSynchronize(g.idsReady));
          if (rep > 0)
            copyMs.push_back(nowMs() - t0);
          if (memcmp(g.idsHost, ids.data(), n * 4) != 0) {
            printf("FAIL: the ids' copy differs\n");
            return 1;
          }
          memset(g.idsHost, 0, n * 4);
          CK(cudaMemsetAsync(g.arrived, 0, 4, g.compute));
          CK(cudaStreamSynchronize(g.compute));
          const unsigned value = 1000 + rep;
          t0 = nowMs();
          publish<<<32, 256, 0, g.compute>>>(g.idsDev, (int)n, g.idsMapped, g.arrived, g.flagMapped,
                                             value);
          while (reinterpret_cast<volatile unsigned *>(g.flagHost)[0] != value)
            _mm_pause();
          std::atomic_thread_fence(std::memory_order_acquire);
          if (rep > 0)
            publishMs.push_back(nowMs() - t0);
          if (memcmp(g.idsHost, ids.data(), n * 4) != 0) {
            printf("FAIL: the published ids differ\n");
            return 1;
          }
          CK(cudaStreamSynchronize(g.compute));
        }
        printf("  the ids (%.0f KB) to the host: copy + event %.3f ms; kernel writes + flag "
               "%.3f ms\n",
               n * 4 / 1e3, median(copyMs), median(publishMs));
      }

      printf("  host threads alone, GB/s (memcpy / streaming):");
      std::vector<int> counts;
      for (int t : {1, 2, 4, 8, pool.size()})
        if (t <= pool.size() && std::find(counts.begin(), counts.end(), t) == counts.end())
          counts.push_back(t);
      for (int threads : counts) {
        printf(" %d: %.1f / %.1f;", threads,
               hostRate(pool, threads, gatherMemcpy, s, ids, g.staging, expect),
               hostRate(pool, threads, gatherStreaming, s, ids, g.staging, expect));
        fflush(stdout);
      }
      printf("\n");

      // The pipeline: both gathers on every core but the dispatching one at
      // each chunk size, then memcpy on 4 and 8 workers (a serving engine
      // keeps cores of its own).
      // A run's workers take slices of `sliceBytes` in order; a chunk (a
      // copy and its flag) is sent once all its slices are gathered. A slice
      // as large as its chunk gives each chunk to one worker, so the first
      // copy waits for a whole chunk's gather by one thread; smaller slices
      // let all workers gather each chunk together.
      struct Run {
        Gather gather;
        size_t chunkBytes, sliceBytes;
        int workers;
      };
      const size_t kK = 1024;
      std::vector<Run> runs;
      for (size_t chunkBytes : {256 * kK, 1024 * kK, 4096 * kK})
        runs.push_back({gatherMemcpy, chunkBytes, chunkBytes, pool.size()});
      for (auto [chunkBytes, sliceBytes] :
           {std::pair{256 * kK, 32 * kK}, {1024 * kK, 64 * kK}, {2048 * kK, 128 * kK}})
        runs.push_back({gatherMemcpy, chunkBytes, sliceBytes, pool.size()});
      runs.push_back({gatherStreaming, 1024 * kK, 1024 * kK, pool.size()});
      runs.push_back({gatherStreaming, 1024 * kK, 64 * kK, pool.size()});
      for (int workers : {4, 8})
        if (workers < pool.size())
          runs.push_back({gatherMemcpy, 1024 * kK, 64 * kK, workers});
      for (const Run &run : runs) {
        const Gather gather = run.gather;
        const size_t perSlice = std::max<size_t>(1, run.sliceBytes / bytes);
        const size_t slicesPerChunk = std::max<size_t>(1, run.chunkBytes / bytes / perSlice);
        const size_t perChunk = perSlice * slicesPerChunk;
        const int chunks = (int)((n + perChunk - 1) / perChunk);
        const int slices = (int)((n + perSlice - 1) / perSlice);
        const size_t chunkSize = perChunk * bytes;
        std::vector<double> total, first, device;
        double cold = 0;
        for (int rep = 0; rep < 8; ++rep) {
          std::vector<std::atomic<int>> done(chunks);
          for (auto &d : done)
            d.store(0);
          std::atomic<int> next{0};
          if (!cpuOnly) {
            CK(cudaMemsetAsync(g.arrived, 0, 4, g.compute));
            CK(cudaMemsetAsync(g.x, 0, 4, g.compute));
          }
          // Zeros where the rows land: the HBM already holds these very bytes
          // (the SM loads' and the earlier runs' layout is the same), so a
          // grid reading a chunk before its copy would pass the XOR. Every
          // run's first (cold) pass also zeros the staging, which the host
          // gathers left holding them too; not the warm ones, whose cache
          // state stays that of the previous pass.
          if (cpuOnly)
            memset(g.dev, 0, useful);
          else
            CK(cudaMemsetAsync(g.dev, 0, useful, g.compute));
          if (rep == 0)
            memset(g.staging, 0, useful);
          if (!cpuOnly)
            CK(cudaStreamSynchronize(g.compute));
          if (rep == 0) { // the workers fall asleep
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          } else {
            // The previous pass's tail (its last copies, the grid, the
            // synchronizations above) can outlast the workers' 0.2 ms of
            // spinning; an empty job restarts it, so the warm passes are of
            // spinning workers as the Pool's comment says.
            pool.start(run.workers, [](int) {});
            pool.wait();
          }
          const double t0 = nowMs();
          if (cpuOnly)
            memcpy(g.idsHost, ids.data(), n * 4);
          else {
            CK(cudaMemcpyAsync(g.idsHost, g.idsDev, n * 4, cudaMemcpyDeviceToHost, g.copy));
            CK(cudaEventRecord(g.idsReady, g.copy));
            CK(cudaEventRecord(g.s, g.compute));
            consume<<<132, 256, 0, g.compute>>>(g.dev, g.arrived, chunkSize, useful, chunks, g.x);
            CK(cudaEventRecord(g.e, g.compute));
            CK(cudaEventSynchronize(g.idsReady));
          }
          pool.start(run.workers, [&](int) {
            for (int i; (i = next.fetch_add(1)) < slices;) {
              const size_t a = (size_t)i * perSlice, b = std::min(n, a + perSlice);
              gather(s.host, g.idsHost + a, b - a, g.staging + a * bytes, bytes);
              done[i / slicesPerChunk].fetch_add(1, std::memory_order_release);
            }
          });
          double firstAt = 0;
          for (int k = 0; k < chunks; ++k) {
            const int chunkSlices =
                (int)std::min<size_t>(slicesPerChunk, slices - (size_t)k * slicesPerChunk);
            while (done[k].load(std::memory_order_acquire) < chunkSlices)
              _mm_pause();
            const size_t a = (size_t)k * chunkSize, b = std::min(useful, a + chunkSize);
            if (cpuOnly) { // the dispatch's logic alone: the copy by memcpy
              memcpy(g.dev + a, g.staging + a, b - a);
              if (k == 0)
                firstAt = nowMs() - t0;
              continue;
            }
            CK(cudaMemcpyAsync(g.dev + a, g.staging + a, b - a, cudaMemcpyHostToDevice, g.copy));
            if (writeValue32(g.copy, (CUdeviceptr)g.arrived, k + 1, 0) != CUDA_SUCCESS) {
              // exit, not return: returning would destroy done, next and the
              // Pool under workers still running this job (as CK does).
              printf("cuStreamWriteValue32 failed\n");
              exit(1);
            }
            if (k == 0)
              firstAt = nowMs() - t0;
          }
          pool.wait();
          float t = 0;
          unsigned got;
          if (cpuOnly)
            got = xorOf(g.dev, useful);
          else {
            CK(cudaStreamSynchronize(g.compute));
            CK(cudaGetLastError());
          }
          const double t1 = nowMs();
          if (!cpuOnly) {
            CK(cudaEventElapsedTime(&t, g.s, g.e));
            CK(cudaMemcpy(&got, g.x, 4, cudaMemcpyDeviceToHost));
          }
          if (got != expect) {
            printf("FAIL: the pipeline's bytes in HBM differ from the store's (chunk %zu B)\n",
                   chunkSize);
            return 1;
          }
          if (rep == 0)
            cold = t1 - t0;
          else {
            total.push_back(t1 - t0);
            first.push_back(firstAt);
            device.push_back(t);
          }
        }
        printf("  pipeline, %s on %d workers, %4zu KB chunks (%d) of %zu KB slices: %.3f ms = %.1f "
               "GB/s, %.2fx the "
               "floor; first chunk's copy enqueued at %.3f ms; consumer grid %.3f ms by events; "
               "workers woken from sleep %.3f ms\n",
               gather == gatherMemcpy ? "memcpy" : "streaming", run.workers, chunkSize >> 10,
               chunks, perSlice * bytes >> 10, median(total), useful / median(total) / 1e6,
               median(total) / (useful / 55e6), median(first), median(device), cold);
        fflush(stdout);
      }
    }
    if (cpuOnly)
      free(s.host);
    else
      CK(cudaFreeHost(s.host));
  }
  return 0;
}
