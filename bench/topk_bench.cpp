//===- topk_bench.cpp - Times the generated top-k kernel ------------------===//
//
// Usage: dhs-topk-bench <compiled step dir>
// Runs the step's topk launch on random scores (full histories), checks one
// query's selection against a CPU partial sort, then times 20 launches with
// CUDA events after 5 warm-ups and prints the median in ms and the score
// bytes read per ms. bench/topk.sh puts it beside torch.topk and the memory
// floor measured in the same run.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;

int main(int argc, char **argv) {
  if (argc != 2 || dhs::bench::wantsHelp(argc, argv)) {
    const bool help = dhs::bench::wantsHelp(argc, argv);
    std::fprintf(help ? stdout : stderr, "usage: dhs-topk-bench <compiled step dir>\n");
    return help ? 0 : 2;
  }
  try {
    const Manifest manifest = dhs::bench::loadSingleLaunchStep(argv[1], abi::LaunchKind::TopK);
    const CudaDriver &cuda = dhs::bench::requireGpu();
    const std::vector<std::int64_t> &shape = manifest.argument(ArgumentRole::Scores).shape;
    const std::int64_t B = shape[0], Q = shape[1], N = shape[2];
    const std::int64_t K = manifest.argument(ArgumentRole::RowIds).shape[2];
    std::vector<float> scores(static_cast<std::size_t>(B * Q * N));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float &s : scores)
      s = normal(rng);
    std::vector<std::int32_t> length(static_cast<std::size_t>(B), static_cast<std::int32_t>(N));

    CudaStep cudaStep(manifest, 0);
    cudaStep.makeCurrent();
    DeviceBuffer scoresBuffer(scores.size() * 4, "scores");
    DeviceBuffer lengthBuffer(length.size() * 4, "history_len");
    DeviceBuffer rowsBuffer(static_cast<std::size_t>(B * Q * K) * 4, "rows");
    DeviceBuffer status(4, "status");
    cuda.check(cuda.memcpyHtoD(scoresBuffer.get(), scores.data(), scores.size() * 4), "scores");
    cuda.check(cuda.memcpyHtoD(lengthBuffer.get(), length.data(), length.size() * 4),
               "history_len");
    cuda.check(cuda.memsetD32(status.get(), 0, 1), "status");
    CudaStepBuffers buffers;
    buffers.arguments = {scoresBuffer.get(), lengthBuffer.get(), rowsBuffer.get()};
    buffers.status = status.get();
    Stream stream;
    cudaStep.launchAsync(buffers, stream.get());
    cuda.check(cuda.streamSynchronize(stream.get()), "topk");

    // Check the last query of the last request against a CPU partial sort.
    std::vector<std::int32_t> got(static_cast<std::size_t>(K));
    const std::size_t last = static_cast<std::size_t>((B * Q - 1) * K);
    cuda.check(cuda.memcpyDtoH(got.data(), rowsBuffer.get() + last * 4, got.size() * 4), "rows");
    const float *row = &scores[static_cast<std::size_t>((B * Q - 1) * N)];
    std::vector<std::int32_t> ids(static_cast<std::size_t>(N));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + K, ids.end(), [&](std::int32_t x, std::int32_t y) {
      return row[x] != row[y] ? row[x] > row[y] : x < y;
    });
    if (!std::equal(got.begin(), got.end(), ids.begin()))
      throw Error("the selection differs from the CPU partial sort");

    std::vector<float> times;
    Event start, stop;
    for (int i = 0; i < 25; ++i) {
      cuda.check(cuda.eventRecord(start.get(), stream.get()), "event");
      cudaStep.launchAsync(buffers, stream.get());
      cuda.check(cuda.eventRecord(stop.get(), stream.get()), "event");
      cuda.check(cuda.eventSynchronize(stop.get()), "event");
      float ms = 0;
      cuda.check(cuda.eventElapsedTime(&ms, start.get(), stop.get()), "event");
      if (i >= 5)
        times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    std::printf("dhs_topk B=%lld Q=%lld N=%lld K=%lld median_ms=%.4f "
                "score_GBps=%.1f checked=1\n",
                static_cast<long long>(B), static_cast<long long>(Q), static_cast<long long>(N),
                static_cast<long long>(K), median,
                static_cast<double>(scores.size()) * 4 / (median * 1e6));
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-topk-bench: %s\n", e.what());
    return 1;
  }
}
