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
// 128 (a warpgroup an SM, as the attention's producers read), one form's
// store in pinned memory at a time. A warp copies a row (16-byte
// ld.global.nc loads, lanes on consecutive chunks, lane 0 the scales) into
// HBM; warps take the missing rows in turn, request by request as the
// kernels do (DHS_SHUFFLE=1: in one random order over all requests).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o split_row_gather \
//       bench/baselines/split_row_gather.cu
//
// Predicted (before any run): A 44-48 GB/s as the fetch kernel measures; E
// the same as A (six lines either way); B ~50 (five lines for 640 bytes,
// the rate whole tokens reach); C no better than A (a second request a row,
// a line for 16 bytes); D close to B. Measured on an H100 (bench/NOTES.md,
// thirty-eighth session): A 45-47, E 46-48, B 48-51, C 46-48, D 49-52 GB/s;
// in one random order over all requests every form fell to 27-31 GB/s at
// 30% and 100% missing.
//
//===----------------------------------------------------------------------===//
#include "Check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <random>
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

  {
    // The pinned copy rate, for scale.
    char *copyIn = pinnedMapped(std::size_t(1) << 30);
    printf("stores: %d requests x %lld rows (656-byte rows %.2f GB); pinned copy %.1f GB/s\n",
           kRequests, static_cast<long long>(history), rows * double(kRowBytes) / 1e9,
           pinnedCopyRate(copyIn));
    CK(cudaFreeHost(copyIn));
  }

  // Each fraction's list: each request's top-2048 (distinct rows),
  // `fraction` of them missing, scattered over the request's range.
  std::mt19937_64 rng(7);
  std::vector<std::int64_t *> lists;
  std::vector<int> counts;
  int most = 0;
  for (double fraction : fractions) {
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
    if (std::getenv("DHS_SHUFFLE"))
      std::shuffle(missing.begin(), missing.end(), rng);
    std::int64_t *list = nullptr;
    CK(cudaMalloc(&list, missing.size() * sizeof(std::int64_t)));
    CK(cudaMemcpy(list, missing.data(), missing.size() * sizeof(std::int64_t),
                  cudaMemcpyHostToDevice));
    lists.push_back(list);
    counts.push_back(static_cast<int>(missing.size()));
    most = std::max(most, counts.back());
  }
  char *out = nullptr;
  CK(cudaMalloc(&out, static_cast<std::size_t>(most) * kRowBytes));
  char *hbmScales = nullptr;
  CK(cudaMalloc(&hbmScales, rows * kScaleBytes));
  CK(cudaMemset(hbmScales, 1, rows * kScaleBytes));

  // One form at a time, its store alone in pinned memory (the footprint of
  // a one-layer pool's store: 4 of them at once, 8.7 GB, slowed every form
  // to ~30 GB/s at 30% and 100% missing in the first run).
  struct Form {
    const char *name;
    std::int64_t pitch;
    int bodyBytes;
    int scales; // 0: none, 1: a host array, 2: an HBM array
  };
  const Form forms[] = {
      {"A 656-byte rows, 656 pitch", kRowBytes, kRowBytes, 0},
      {"E 656-byte rows, 768 pitch", 768, kRowBytes, 0},
      {"B 640-byte bodies, 640 pitch (no scales)", kBodyBytes, kBodyBytes, 0},
      {"C bodies + host scales", kBodyBytes, kBodyBytes, 1},
      {"D bodies + HBM scales", kBodyBytes, kBodyBytes, 2},
  };
  printf("\n  %-52s", "gather (GB/s of useful bytes; ms)");
  for (double fraction : fractions)
    printf(" %13.0f%%", fraction * 100);
  printf("\n");
  for (const Form &form : forms) {
    char *store = pinnedMapped(rows * form.pitch);
    char *hostScales = form.scales == 1 ? pinnedMapped(rows * kScaleBytes) : nullptr;
    const char *scales = form.scales == 1 ? hostScales : form.scales == 2 ? hbmScales : nullptr;
    const int useful = form.bodyBytes + (scales ? kScaleBytes : 0);
    for (auto [gridBlocks, blockThreads] : {std::pair{512, 256}, std::pair{124, 128}}) {
      const int blocks = gridBlocks, threads = blockThreads;
      char name[96];
      snprintf(name, sizeof name, "%s, %d x %d", form.name, blocks, threads);
      printf("  %-52s", name);
      for (std::size_t f = 0; f < fractions.size(); ++f) {
        const double m = medianMs([&] {
          gather<<<blocks, threads>>>(store, form.pitch, form.bodyBytes, scales, lists[f],
                                      counts[f], out);
        });
        printf(" %5.1f (%6.3f)", counts[f] * double(useful) / m / 1e6, m);
      }
      printf("\n");
    }
    CK(cudaFreeHost(store));
    if (hostScales)
      CK(cudaFreeHost(hostScales));
  }
  for (std::int64_t *list : lists)
    CK(cudaFree(list));
  CK(cudaFree(out));
  CK(cudaFree(hbmScales));
  return 0;
}
