//===- split_row_gather.cu - One-layer FP8 rows gathered whole or split ---===//
//
// A benchmark baseline, hand-written (not product code), for the question
// bench/NOTES.md leaves open (thirty-eighth session): the one-layer mixed
// steps cannot reach 1.10x of their floor because a 656-byte row at a
// 16-byte offset spans six 128-byte lines (768 bytes on the link for 656
// used). Would a split row format, 640-byte bodies (512 e4m3 values and the
// 128 bytes of bf16 RoPE dims) on a 640-byte pitch (five whole lines) and
// the 16 bytes of scales kept apart, move more useful bytes a second, and
// does that hold when the scales are read from the host too, or only when
// they stay in HBM? On stores of 128 requests x argv[1] rows (default
// 32768: the mixed steps' 2.75 GB), for each fraction of a request's
// top-2048 missing (argv[2...], default 5 14 30 100 %), median of 5 runs,
// GB/s of useful bytes (656 a row, or 640 for bodies alone):
//   - A: 656-byte rows on a 656-byte pitch (today's one-layer store);
//   - E: 656-byte rows on a 768-byte pitch (aligned starts, still six lines);
//   - B: 640-byte bodies on a 640-byte pitch, no scales;
//   - C: bodies and their scales from a host array of 16-byte entries;
//   - D: bodies from the host and their scales from an HBM array;
// each by 512 CTAs of 256 threads (the generated fetch's grid) and 124 of
// 128 (a warpgroup an SM, as the attention's producers read). A warp copies
// a row (16-byte ld.global.nc loads, lanes on consecutive chunks, lane 0
// the scales) into HBM; warps take the missing rows in turn.
//
//   nvcc -O3 -arch=sm_90a -o split_row_gather bench/baselines/split_row_gather.cu
//
// Predicted (before any run): A 44-48 GB/s as the fetch kernel measures; E
// the same as A (six lines either way); B ~50 (five lines for 640 bytes,
// the rate whole tokens reach); C no better than A (a second request a row,
// a line for 16 bytes); D close to B.
//
//===----------------------------------------------------------------------===//
#include "Check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <random>
#include <thread>
#include <vector>

constexpr int kRequests = 128, kTopK = 2048, kRowBytes = 656, kBodyBytes = 640, kScaleBytes = 16;

/// Copies `bodyBytes` from each listed row of `store` (pitch `pitch`) into
/// `out` (a row every kRowBytes) and, where `scales` is set, the row's
/// 16 bytes of scales from `scales` (16 a row) after them; a warp a row.
__global__ void gather(const char *store, std::int64_t pitch, int bodyBytes, const char *scales,
                       const std::int64_t *rows, int count, char *out) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * blockDim.x / 32;
  const int chunks = bodyBytes / 16;
  for (int t = (blockIdx.x * blockDim.x + threadIdx.x) / 32; t < count; t += warps) {
    const std::int64_t row = rows[t];
    const char *src = store + row * pitch;
    char *dst = out + static_cast<std::int64_t>(t) * kRowBytes;
    // All of a lane's loads first (two a lane: up to 1024 bytes a row), the
    // scales by lane 0 beside them.
    int4 v[2], s{};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = j * 32 + lane;
      if (c < chunks)
        v[j] = loadNc(src + c * 16);
    }
    if (scales && lane == 0)
      s = loadNc(scales + row * kScaleBytes);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = j * 32 + lane;
      if (c < chunks)
        *reinterpret_cast<int4 *>(dst + c * 16) = v[j];
    }
    if (scales && lane == 0)
      *reinterpret_cast<int4 *>(dst + kBodyBytes) = s;
  }
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Pinned host memory, mapped, every page touched (on every core).
static char *pinned(std::size_t bytes) {
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
  char *device = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void **>(&device), p, 0));
  return device;
}

int main(int argc, char **argv) {
  const std::int64_t history = argc > 1 ? std::atoll(argv[1]) : 32768;
  std::vector<double> fractions;
  for (int i = 2; i < argc; ++i)
    fractions.push_back(std::atof(argv[i]) / 100.0);
  if (fractions.empty())
    fractions = {0.05, 0.14, 0.30, 1.0};
  if (history < kTopK) {
    printf("a request needs at least %d rows\n", kTopK);
    return 1;
  }
  const std::int64_t rows = kRequests * history;
  // The stores (device pointers to pinned host memory) and the scales'
  // HBM copy.
  char *rows656 = pinned(rows * kRowBytes);
  char *rows768 = pinned(rows * 768);
  char *bodies = pinned(rows * kBodyBytes);
  char *hostScales = pinned(rows * kScaleBytes);
  char *hbmScales = nullptr;
  CK(cudaMalloc(&hbmScales, rows * kScaleBytes));
  CK(cudaMemset(hbmScales, 1, rows * kScaleBytes));

  // The pinned copy rate, for scale.
  const std::size_t copyBytes = std::size_t(1) << 30;
  char *copyOut = nullptr, *copyIn = nullptr;
  CK(cudaMalloc(&copyOut, copyBytes));
  CK(cudaHostAlloc(&copyIn, copyBytes, cudaHostAllocDefault));
  std::memset(copyIn, 3, copyBytes);
  cudaEvent_t start, stop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  std::vector<double> copyMs;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(start));
    CK(cudaMemcpyAsync(copyOut, copyIn, copyBytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(stop));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    copyMs.push_back(ms);
  }
  CK(cudaFree(copyOut));
  CK(cudaFreeHost(copyIn));
  printf("stores: %d requests x %lld rows (656-byte rows %.2f GB); pinned copy %.1f GB/s\n",
         kRequests, static_cast<long long>(history), rows * double(kRowBytes) / 1e9,
         copyBytes / median(copyMs) / 1e6);

  std::mt19937_64 rng(7);
  for (double fraction : fractions) {
    // Each request's top-2048 (distinct rows), `fraction` of them missing,
    // scattered over the request's range of the store.
    std::vector<std::int64_t> missing;
    const int perRequest = static_cast<int>(fraction * kTopK + 0.5);
    for (int r = 0; r < kRequests; ++r) {
      std::vector<char> taken(history, 0);
      for (int n = 0; n < perRequest;) {
        const std::int64_t id = static_cast<std::int64_t>(rng() % history);
        if (!taken[id]) {
          taken[id] = 1;
          missing.push_back(r * history + id);
          ++n;
        }
      }
    }
    std::shuffle(missing.begin(), missing.end(), rng);
    const int count = static_cast<int>(missing.size());
    std::int64_t *list = nullptr;
    char *out = nullptr;
    CK(cudaMalloc(&list, missing.size() * sizeof(std::int64_t)));
    CK(cudaMemcpy(list, missing.data(), missing.size() * sizeof(std::int64_t),
                  cudaMemcpyHostToDevice));
    CK(cudaMalloc(&out, static_cast<std::size_t>(count) * kRowBytes));
    printf("\n%.0f%% missing: %d rows (%.1f MB of 656-byte rows)\n", fraction * 100, count,
           count * double(kRowBytes) / 1e6);
    printf("  %-52s %9s %9s\n", "gather", "ms", "GB/s");
    struct Form {
      const char *name;
      const char *store;
      std::int64_t pitch;
      int bodyBytes;
      const char *scales;
    };
    const Form forms[] = {
        {"A 656-byte rows, 656 pitch", rows656, kRowBytes, kRowBytes, nullptr},
        {"E 656-byte rows, 768 pitch", rows768, 768, kRowBytes, nullptr},
        {"B 640-byte bodies, 640 pitch (no scales)", bodies, kBodyBytes, kBodyBytes, nullptr},
        {"C bodies + host scales", bodies, kBodyBytes, kBodyBytes, hostScales},
        {"D bodies + HBM scales", bodies, kBodyBytes, kBodyBytes, hbmScales},
    };
    for (const Form &form : forms)
      for (auto [blocks, threads] : {std::pair{512, 256}, std::pair{124, 128}}) {
        std::vector<double> ms;
        for (int r = 0; r < 6; ++r) {
          CK(cudaEventRecord(start));
          gather<<<blocks, threads>>>(form.store, form.pitch, form.bodyBytes, form.scales, list,
                                      count, out);
          CK(cudaGetLastError());
          CK(cudaEventRecord(stop));
          CK(cudaEventSynchronize(stop));
          float t = 0;
          CK(cudaEventElapsedTime(&t, start, stop));
          if (r > 0) // the first is a warm-up
            ms.push_back(t);
        }
        const double m = median(ms);
        const int useful = form.bodyBytes + (form.scales ? kScaleBytes : 0);
        char name[96];
        snprintf(name, sizeof name, "%s, %d x %d", form.name, blocks, threads);
        printf("  %-52s %9.4f %9.1f\n", name, m, count * double(useful) / m / 1e6);
      }
    CK(cudaFree(list));
    CK(cudaFree(out));
  }
  return 0;
}
