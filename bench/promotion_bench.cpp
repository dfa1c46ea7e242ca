//===- promotion_bench.cpp - Times promotions: one copy per row vs a batch -===//
//
// Usage: dhs-promotion-bench <place_rows step dir> [rows...]
// Promotions copy rows the step read from the host store into free HBM
// slots. For each count N (default 256 1024 4096 16384) of random distinct
// host rows (out of 200,000 tokens of the step's token bytes: 2624 for
// examples/place_rows_step.mlir, a GLM-5 layer group of 4 FP8 rows) into
// random distinct slots of 65,536, it times, from the first enqueue until the
// stream is done (median of 7):
//   per-row   one cuMemcpyHtoDAsync per row
//   batch     copyBatch: cuMemcpyBatchAsync
//   kernel    the compiled dhs.place_rows kernel (its N rows per launch),
//             which also records the slots in the residency map
//   floor     N x token bytes as one contiguous pinned host-to-device copy
// and checks that the kernel put every row in its slot (the runtime's tests
// check the batch).
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "bench/BenchTiming.h"
#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;
using dhs::bench::medianMs;

int main(int argc, char **argv) {
  try {
    if (argc < 2 || dhs::bench::wantsHelp(argc, argv)) {
      std::fprintf(argc < 2 ? stderr : stdout,
                   "usage: dhs-promotion-bench <place_rows step dir> [rows...]\n");
      return argc < 2 ? 2 : 0;
    }
    const Manifest manifest = dhs::bench::loadSingleLaunchStep(argv[1], abi::LaunchKind::PlaceRows);
    const KvPoolInfo &poolInfo = manifest.argument(ArgumentRole::KvPool).pool;
    const std::size_t tokenBytes = static_cast<std::size_t>(poolInfo.layers * poolInfo.rowBytes);
    const std::size_t perLaunch =
        static_cast<std::size_t>(manifest.argument(ArgumentRole::PlaceRows).shape[0]);
    std::vector<std::size_t> counts;
    for (int i = 2; i < argc; ++i)
      counts.push_back(std::stoul(argv[i]));
    if (counts.empty())
      counts = {256, 1024, 4096, 16384};
    const CudaDriver &cuda = dhs::bench::requireGpu();
    CudaStep cudaStep(manifest, 0);
    cudaStep.makeCurrent();
    const std::size_t hostTokens = 200000, slots = 65536;
    MappedHostBuffer host(hostTokens * tokenBytes, "the host store");
    DeviceBuffer hbm(slots * tokenBytes, "the HBM pool");
    DeviceBuffer contiguous(counts.back() * tokenBytes, "the floor's destination");
    DeviceBuffer map(hostTokens * 4, "the residency map");
    DeviceBuffer placeRows(perLaunch * 8, "rows to place"), placeSlots(perLaunch * 4, "slots");
    DeviceBuffer status(4, "the status word");
    cuda.check(cuda.memsetD32(status.get(), 0, 1), "the status word");
    // The replacement state the kernel stamps, and a log holding the step.
    DeviceBuffer recency(slots * 8, "the replacement state"), log(16, "the step log");
    cuda.check(cuda.memsetD32(log.get(), 1, 4), "the step log");
    CudaStepBuffers buffers;
    buffers.recency = recency.get();
    buffers.log = log.get();
    buffers.logWords = 4;
    buffers.arguments.assign(manifest.arguments.size(), 0);
    buffers.arguments[static_cast<std::size_t>(manifest.argument(ArgumentRole::PlaceRows).index)] =
        placeRows.get();
    buffers.arguments[static_cast<std::size_t>(manifest.argument(ArgumentRole::PlaceSlots).index)] =
        placeSlots.get();
    buffers.hbm = hbm.get();
    buffers.hbmSlots = static_cast<std::int64_t>(slots);
    buffers.host = host.device();
    buffers.hostRows = static_cast<std::int64_t>(hostTokens);
    buffers.map = map.get();
    buffers.status = status.get();
    MappedHostBuffer lists(perLaunch * 12, "the pinned lists");
    Stream stream;
    std::mt19937_64 rng(5);
    auto *bytes = static_cast<std::uint8_t *>(host.host());
    for (std::size_t i = 0; i < hostTokens * tokenBytes; i += 8) {
      const std::uint64_t x = rng();
      std::memcpy(bytes + i, &x, std::min<std::size_t>(8, hostTokens * tokenBytes - i));
    }
    std::printf("batched copies: %s; token %zu bytes; host store %zu tokens, pool %zu slots\n",
                cuda.memcpyBatchAsync ? "cuMemcpyBatchAsync" : "unavailable (one copy each)",
                tokenBytes, hostTokens, slots);
    std::printf("%8s %11s %11s %11s %11s %10s %10s %11s\n", "rows", "per-row ms", "batch ms",
                "kernel ms", "floor ms", "batch/kern", "kern/floor", "kern GB/s");
    std::vector<std::size_t> hostOrder(hostTokens), slotOrder(slots);
    for (std::size_t n : counts) {
      std::iota(hostOrder.begin(), hostOrder.end(), 0);
      std::iota(slotOrder.begin(), slotOrder.end(), 0);
      std::shuffle(hostOrder.begin(), hostOrder.end(), rng);
      std::shuffle(slotOrder.begin(), slotOrder.end(), rng);
      std::vector<CUdeviceptr> sources(n), destinations(n);
      for (std::size_t i = 0; i < n; ++i) {
        sources[i] = host.device() + hostOrder[i] * tokenBytes;
        destinations[i] = hbm.get() + slotOrder[i] * tokenBytes;
      }
      const double perRow = medianMs(stream.get(), 7, [&] {
        for (std::size_t i = 0; i < n; ++i)
          cuda.check(cuda.memcpyHtoDAsync(destinations[i], bytes + hostOrder[i] * tokenBytes,
                                          tokenBytes, stream.get()),
                     "cuMemcpyHtoDAsync");
      });
      cuda.check(cuda.memsetD32Async(hbm.get(), 0, slots * tokenBytes / 4, stream.get()),
                 "clearing the pool");
      std::vector<std::size_t> sizes;
      const double batch = medianMs(stream.get(), 7, [&] {
        copyBatch(destinations, sources, tokenBytes, sizes, stream.get(), "the batch");
      });
      const double floor = medianMs(stream.get(), 7, [&] {
        cuda.check(cuda.memcpyHtoDAsync(contiguous.get(), bytes, n * tokenBytes, stream.get()),
                   "the contiguous copy");
      });
      // The kernel: lists staged in pinned memory, copied up, one launch per
      // perLaunch rows (the last padded with -1).
      cuda.check(cuda.memsetD32Async(hbm.get(), 0, slots * tokenBytes / 4, stream.get()),
                 "clearing the pool");
      auto *listRows = static_cast<std::int64_t *>(lists.host());
      auto *listSlots = reinterpret_cast<std::int32_t *>(listRows + perLaunch);
      const double kernel = medianMs(stream.get(), 7, [&] {
        for (std::size_t begin = 0; begin < n; begin += perLaunch) {
          // The previous launch has read the lists: reuse them.
          cuda.check(cuda.streamSynchronize(stream.get()), "the previous launch");
          for (std::size_t i = 0; i < perLaunch; ++i) {
            const bool used = begin + i < n;
            listRows[i] = used ? static_cast<std::int64_t>(hostOrder[begin + i]) : -1;
            listSlots[i] = used ? static_cast<std::int32_t>(slotOrder[begin + i]) : -1;
          }
          cuda.check(cuda.memcpyHtoDAsync(placeRows.get(), listRows, perLaunch * 8, stream.get()),
                     "rows");
          cuda.check(cuda.memcpyHtoDAsync(placeSlots.get(), listSlots, perLaunch * 4, stream.get()),
                     "slots");
          cudaStep.launchAsync(buffers, stream.get());
        }
      });
      std::uint32_t word = 0;
      cuda.check(cuda.memcpyDtoH(&word, status.get(), 4), "status");
      if (word != 0)
        throw Error("the place_rows kernel reported status " + std::to_string(word));
      // Every row reached its slot (the kernel's run was the last).
      std::vector<std::uint8_t> check(tokenBytes);
      for (std::size_t i = 0; i < n; i += std::max<std::size_t>(1, n / 64)) {
        cuda.check(cuda.memcpyDtoH(check.data(), destinations[i], tokenBytes), "reading a slot");
        if (std::memcmp(check.data(), bytes + hostOrder[i] * tokenBytes, tokenBytes) != 0) {
          std::fprintf(stderr, "dhs-promotion-bench: slot %zu does not hold host row %zu\n",
                       slotOrder[i], hostOrder[i]);
          return 1;
        }
      }
      std::printf("%8zu %11.3f %11.3f %11.3f %11.3f %9.1fx %9.1fx %11.1f\n", n, perRow, batch,
                  kernel, floor, batch / kernel, kernel / floor,
                  static_cast<double>(n * tokenBytes) / kernel / 1e6);
    }
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-promotion-bench: %s\n", e.what());
    return 1;
  }
}
