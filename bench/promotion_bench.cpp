//===- promotion_bench.cpp - Times promotions: one copy per row vs a batch -===//
//
// Usage: dhs-promotion-bench [token bytes] [rows...]
// Promotions copy rows the step read from the host store into free HBM
// slots. For each count N (default 256 1024 4096 16384) of random distinct
// host rows (out of 200,000 tokens of `token bytes`, default 2624: a GLM-5
// layer group of 4 FP8 rows) into random distinct slots of 65,536, it times,
// from the first enqueue until the stream is done (median of 7):
//   per-row   one cuMemcpyHtoDAsync per row (what the runtime did before)
//   batch     copyBatch: cuMemcpyBatchAsync (what the runtime does now)
//   floor     N x token bytes as one contiguous pinned host-to-device copy
// and checks that the batch put every row in its slot.
//
//===----------------------------------------------------------------------===//

#include "runtime/CudaDriver.h"
#include "runtime/CudaResources.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;

namespace {

/// Median of `runs` timings (ms) of `work`, each from its first enqueue to
/// the end of the stream.
template <typename Work>
double medianMs(CUstream stream, int runs, Work work) {
  std::vector<double> ms;
  for (int i = 0; i < runs + 1; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    driver().check(driver().streamSynchronize(stream), "cuStreamSynchronize");
    const auto end = std::chrono::steady_clock::now();
    if (i > 0) // the first run warms up
      ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  try {
    const std::size_t tokenBytes = argc > 1 ? std::stoul(argv[1]) : 2624;
    std::vector<std::size_t> counts;
    for (int i = 2; i < argc; ++i)
      counts.push_back(std::stoul(argv[i]));
    if (counts.empty())
      counts = {256, 1024, 4096, 16384};
    const CudaDriver &cuda = CudaDriver::instance();
    if (!cuda.available()) {
      std::fprintf(stderr, "dhs-promotion-bench: no GPU: %s\n",
                   cuda.unavailableReason().c_str());
      return 1;
    }
    CUdevice device;
    cuda.check(cuda.deviceGet(&device, 0), "cuDeviceGet");
    PrimaryContext context(device);
    const std::size_t hostTokens = 200000, slots = 65536;
    MappedHostBuffer host(hostTokens * tokenBytes, "the host store");
    DeviceBuffer hbm(slots * tokenBytes, "the HBM pool");
    DeviceBuffer contiguous(counts.back() * tokenBytes, "the floor's destination");
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
    std::printf("%8s %12s %12s %12s %10s %10s %10s\n", "rows", "per-row ms", "batch ms",
                "floor ms", "per-row/b", "batch/flr", "batch GB/s");
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
      const double batch = medianMs(stream.get(), 7, [&] {
        copyBatch(destinations, sources, tokenBytes, stream.get(), "the batch");
      });
      const double floor = medianMs(stream.get(), 7, [&] {
        cuda.check(cuda.memcpyHtoDAsync(contiguous.get(), bytes, n * tokenBytes, stream.get()),
                   "the contiguous copy");
      });
      // Every row reached its slot.
      std::vector<std::uint8_t> check(tokenBytes);
      for (std::size_t i = 0; i < n; i += std::max<std::size_t>(1, n / 64)) {
        cuda.check(cuda.memcpyDtoH(check.data(), destinations[i], tokenBytes), "reading a slot");
        if (std::memcmp(check.data(), bytes + hostOrder[i] * tokenBytes, tokenBytes) != 0) {
          std::fprintf(stderr, "dhs-promotion-bench: slot %zu does not hold host row %zu\n",
                       slotOrder[i], hostOrder[i]);
          return 1;
        }
      }
      std::printf("%8zu %12.3f %12.3f %12.3f %9.1fx %9.1fx %10.1f\n", n, perRow, batch, floor,
                  perRow / batch, batch / floor,
                  static_cast<double>(n * tokenBytes) / batch / 1e6);
    }
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-promotion-bench: %s\n", e.what());
    return 1;
  }
}
