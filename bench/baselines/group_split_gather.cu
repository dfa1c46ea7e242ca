//===- group_split_gather.cu - A layer group's tokens gathered whole or split ===//
//
// A benchmark baseline, hand-written (not product code), for the question of
// bench/NOTES.md (twenty-sixth session): in a decode the first layer of a
// group needs its 656-byte rows of the missing tokens at once (its attention
// reads them from the host), the later layers' rows (bytes 656..2623 of each
// 2624-byte token) could come on a side stream while the first layers run.
// Does a side gather of those rows cost link time beside the critical one
// (two requests and two page walks a token), or do the two rates add up to
// what one gather of whole tokens reaches? On a store of 2624-byte tokens
// (128 requests x argv[1] tokens; 65536: the 22 GB of the retrieval
// benchmark), for each fraction of a request's top-2048 missing (argv[2...],
// default 5 14 30 %), median of 5 runs, GB/s of useful bytes:
//   - whole tokens [0, 2624) by 512 CTAs (the generated fetch's grid);
//   - the first layer's rows [0, 656) by 512 CTAs, and by 124 CTAs of 128
//     threads (a warpgroup an SM, as the attention's producers read);
//   - the later layers' rows from byte 640 (31 x 64 bytes, sector-aligned)
//     and from byte 656 (where they start) by 4, 8, 16 and 132 CTAs of 1024
//     threads;
//   - the first layer's rows (124 CTAs) and the later ones' (from 640, 8
//     CTAs, launched first on a stream of their own) at once: the time until
//     both ended, and each one's.
// A warp copies a token's range (16-byte ld.global.nc loads, lanes on
// consecutive chunks) into HBM; warps take the missing tokens in turn.
//
//   nvcc -O3 -arch=sm_90a -o group_split_gather bench/baselines/group_split_gather.cu
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

constexpr int kRequests = 128, kTopK = 2048, kTokenBytes = 2624, kLayerBytes = 656;

/// Copies bytes [offset, offset + bytes) of each listed token (`tokens`:
/// indices into `store`) into `out` (count x bytes), a warp a token; the
/// warps of the grid take the tokens in turn. offset and bytes are
/// multiples of 16.
__global__ void gather(const char *store, const std::int64_t *tokens, int count, int offset,
                       int bytes, char *out) {
  const int lane = threadIdx.x % 32;
  const int warps = gridDim.x * blockDim.x / 32;
  const int chunks = bytes / 16;
  for (int t = (blockIdx.x * blockDim.x + threadIdx.x) / 32; t < count; t += warps) {
    const char *src = store + tokens[t] * kTokenBytes + offset;
    char *dst = out + static_cast<std::int64_t>(t) * bytes;
    // All of a lane's loads first (up to 4 a lane: 2048 bytes a round).
    for (int base = 0; base < chunks; base += 128) {
      int4 v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = base + j * 32 + lane;
        if (c < chunks)
          v[j] = loadNc(src + c * 16);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = base + j * 32 + lane;
        if (c < chunks)
          *reinterpret_cast<int4 *>(dst + c * 16) = v[j];
      }
    }
  }
}

struct Gather {
  int offset, bytes, blocks, threads;
};

/// Enqueues one launch of `g` over `count` tokens on `stream`.
static void launch(const Gather &g, const char *store, const std::int64_t *tokens, int count,
                   char *out, cudaStream_t stream) {
  gather<<<g.blocks, g.threads, 0, stream>>>(store, tokens, count, g.offset, g.bytes, out);
  CK(cudaGetLastError());
}

int main(int argc, char **argv) {
  const std::int64_t history = argc > 1 ? std::atoll(argv[1]) : 65536;
  std::vector<double> fractions;
  for (int i = 2; i < argc; ++i)
    fractions.push_back(std::atof(argv[i]) / 100.0);
  if (fractions.empty())
    fractions = {0.05, 0.14, 0.30};
  if (history < kTopK) {
    printf("a request needs at least %d tokens\n", kTopK);
    return 1;
  }
  const std::size_t storeBytes = static_cast<std::size_t>(kRequests) * history * kTokenBytes;
  char *store = pinnedMapped(storeBytes);
  const char *deviceStore = store;
  printf("store: %d requests x %lld tokens x %d bytes = %.1f GB pinned; copy %.1f GB/s\n",
         kRequests, static_cast<long long>(history), kTokenBytes, storeBytes / 1e9,
         pinnedCopyRate(store));
  cudaEvent_t start, stop, sideStop;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaEventCreate(&sideStop));

  cudaStream_t main, side;
  CK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::mt19937_64 rng(7);
  for (double fraction : fractions) {
    // Each request's top-2048 (distinct tokens), its first `fraction`
    // missing, scattered over the request's range of the store.
    std::vector<std::int64_t> missing;
    const int perRequest = static_cast<int>(fraction * kTopK + 0.5);
    for (int r = 0; r < kRequests; ++r) {
      std::vector<std::int64_t> picked;
      while (static_cast<int>(picked.size()) < perRequest) {
        const std::int64_t id = static_cast<std::int64_t>(rng() % history);
        if (std::find(picked.begin(), picked.end(), id) == picked.end())
          picked.push_back(id);
      }
      for (std::int64_t id : picked)
        missing.push_back(r * history + id);
    }
    std::shuffle(missing.begin(), missing.end(), rng);
    const int count = static_cast<int>(missing.size());
    std::int64_t *tokens = nullptr;
    char *out = nullptr, *sideOut = nullptr;
    CK(cudaMalloc(&tokens, missing.size() * sizeof(std::int64_t)));
    CK(cudaMemcpy(tokens, missing.data(), missing.size() * sizeof(std::int64_t),
                  cudaMemcpyHostToDevice));
    CK(cudaMalloc(&out, static_cast<std::size_t>(count) * kTokenBytes));
    CK(cudaMalloc(&sideOut, static_cast<std::size_t>(count) * kTokenBytes));
    printf("\n%.0f%% missing: %d tokens (%.1f MB whole, %.1f MB of first-layer rows)\n",
           fraction * 100, count, count * double(kTokenBytes) / 1e6,
           count * double(kLayerBytes) / 1e6);
    printf("  %-44s %9s %9s\n", "gather", "ms", "GB/s");
    auto timeAlone = [&](const char *name, const Gather &g) {
      const double m =
          medianMs([&] { launch(g, deviceStore, tokens, count, out, main); }, main);
      printf("  %-44s %9.4f %9.1f\n", name, m, count * double(g.bytes) / m / 1e6);
    };
    timeAlone("whole tokens [0, 2624), 512 x 256", {0, kTokenBytes, 512, 256});
    timeAlone("first layer [0, 656), 512 x 256", {0, kLayerBytes, 512, 256});
    timeAlone("first layer [0, 656), 124 x 128", {0, kLayerBytes, 124, 128});
    for (int offset : {640, 656})
      for (int blocks : {4, 8, 16, 132}) {
        char name[64];
        snprintf(name, sizeof name, "later layers [%d, 2624), %d x 1024", offset, blocks);
        timeAlone(name, {offset, kTokenBytes - offset, blocks, 1024});
      }
    // Both at once: the side gather first on its stream, the critical one
    // on the main stream; both streams wait for `start`.
    const Gather critical{0, kLayerBytes, 124, 128}, later{640, kTokenBytes - 640, 8, 1024};
    std::vector<double> both, criticalMs, sideMs;
    for (int r = 0; r < 6; ++r) {
      CK(cudaEventRecord(start, main));
      CK(cudaStreamWaitEvent(side, start, 0));
      launch(later, deviceStore, tokens, count, sideOut, side);
      launch(critical, deviceStore, tokens, count, out, main);
      CK(cudaEventRecord(stop, main));
      CK(cudaEventRecord(sideStop, side));
      CK(cudaEventSynchronize(stop));
      CK(cudaEventSynchronize(sideStop));
      float c = 0, s = 0;
      CK(cudaEventElapsedTime(&c, start, stop));
      CK(cudaEventElapsedTime(&s, start, sideStop));
      if (r > 0) {
        criticalMs.push_back(c);
        sideMs.push_back(s);
        both.push_back(std::max(c, s));
      }
    }
    const double m = median(both);
    printf("  %-44s %9.4f %9.1f\n", "at once: both ended (bytes of both)", m,
           count * double(kLayerBytes + kTokenBytes - 640) / m / 1e6);
    printf("  %-44s %9.4f %9.1f\n", "at once: first layer [0, 656), 124 x 128", median(criticalMs),
           count * double(kLayerBytes) / median(criticalMs) / 1e6);
    printf("  %-44s %9.4f %9.1f\n", "at once: later layers [640, 2624), 8 x 1024", median(sideMs),
           count * double(kTokenBytes - 640) / median(sideMs) / 1e6);
    CK(cudaFree(tokens));
    CK(cudaFree(out));
    CK(cudaFree(sideOut));
  }
  CK(cudaStreamDestroy(main));
  CK(cudaStreamDestroy(side));
  CK(cudaFreeHost(store));
  return 0;
}
