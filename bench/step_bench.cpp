//===- step_bench.cpp - Times executor steps: host vs device selections ---===//
//
// Usage: dhs-step-bench <placement step> <layer steps...>
// The layer steps must resolve on the device (dhs.resolve first, e.g. the
// unit tests' fp8_g4_resolved/layer0..3). Admits the step's B requests with
// 4096-row histories, then times, per mode, 50 whole steps (all layers and
// groups, median of the step's wall time, CUDA events are not used: the
// host's time is the point) after 10 warm-ups:
//   host    selections in host memory (checked and resolved by the
//           controller before the kernels are launched)
//   device  the same selections in device memory (resolved by the step's
//           kernel, booked by the controller after the step)
// Both with the placement kernel; checks that both modes give the same
// outputs.
//
//===----------------------------------------------------------------------===//

#include "runtime/CudaDriver.h"
#include "runtime/CudaResources.h"
#include "runtime/RowFormat.h"
#include "runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dhs-step-bench <placement step> <layer steps...>\n");
    return 2;
  }
  try {
    const CudaDriver &cuda = CudaDriver::instance();
    if (!cuda.available()) {
      std::fprintf(stderr, "dhs-step-bench: no GPU: %s\n", cuda.unavailableReason().c_str());
      return 1;
    }
    std::vector<std::string> steps(argv + 2, argv + argc);
    RuntimeConfig config;
    config.layersPerGroup = static_cast<std::int32_t>(steps.size());
    config.layers = 2 * config.layersPerGroup; // two layer groups
    config.hostRows = 1 << 16;
    config.newestWindow = 64;
    config.hotFloor = 128;
    config.backend = BackendKind::Cuda;
    Runtime rt(config);
    rt.loadSteps(steps);
    rt.loadPlacementStep(argv[1]);
    const ProblemShape s = rt.shape();
    const std::int64_t L = config.layers, n = 4096;
    std::mt19937_64 rng(3);
    std::vector<std::uint64_t> ids;
    std::vector<std::uint8_t> prefill(static_cast<std::size_t>(L * n * rt.rowBytes()));
    for (std::int64_t i = 0; i < L * n; ++i)
      fillRandomRow(s.format, prefill.data() + i * rt.rowBytes(), rng);
    for (std::int64_t b = 0; b < s.batch; ++b) {
      ids.push_back(static_cast<std::uint64_t>(b + 1));
      rt.admit(ids.back(), n, n + 256, prefill.data());
    }
    const std::int64_t perGroup = s.batch * s.queries * s.topk;
    std::vector<std::int32_t> rows(static_cast<std::size_t>(rt.groups() * perGroup));
    std::vector<bf16_t> q(static_cast<std::size_t>(L * s.batch * s.queries * s.heads * s.qkDim),
                          floatToBf16(0.25f));
    std::vector<bf16_t> outHost(static_cast<std::size_t>(L * s.batch * s.queries * s.heads * s.vDim)),
        outDevice(outHost.size());
    DeviceBuffer deviceRows(rows.size() * 4, "selections");
    auto randomSelections = [&] {
      for (auto &r : rows)
        r = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n));
      cuda.check(cuda.memcpyHtoD(deviceRows.get(), rows.data(), rows.size() * 4), "selections");
    };
    auto time = [&](MemorySpace selections, std::vector<bf16_t> &out) {
      const auto start = std::chrono::steady_clock::now();
      rt.step(ids.data(), s.batch,
              selections == MemorySpace::Device
                  ? reinterpret_cast<const std::int32_t *>(deviceRows.get())
                  : rows.data(),
              q.data(), out.data(), MemorySpace::Host, selections);
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
          .count();
    };
    std::vector<double> host, device;
    std::size_t differing = 0;
    for (int i = 0; i < 60; ++i) {
      // The same selections twice in a row: the second step sees the
      // first one's promotions, so modes alternate which goes first.
      randomSelections();
      const bool hostFirst = i % 2 == 0;
      double a = time(hostFirst ? MemorySpace::Host : MemorySpace::Device,
                      hostFirst ? outHost : outDevice);
      double b = time(hostFirst ? MemorySpace::Device : MemorySpace::Host,
                      hostFirst ? outDevice : outHost);
      if (i >= 10) {
        host.push_back(hostFirst ? a : b);
        device.push_back(hostFirst ? b : a);
      }
      for (std::size_t e = 0; e < outHost.size(); ++e)
        differing += outHost[e] != outDevice[e];
    }
    std::sort(host.begin(), host.end());
    std::sort(device.begin(), device.end());
    std::printf("B=%lld Q=%lld H=%lld K=%lld, %lld layers in %d groups, placement kernel on\n",
                static_cast<long long>(s.batch), static_cast<long long>(s.queries),
                static_cast<long long>(s.heads), static_cast<long long>(s.topk),
                static_cast<long long>(L), rt.groups());
    std::printf("step wall time, median of 50: host selections %.3f ms, device selections "
                "%.3f ms (%.2fx); outputs differing: %zu\n",
                host[host.size() / 2], device[device.size() / 2],
                host[host.size() / 2] / device[device.size() / 2], differing);
    return differing == 0 ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-step-bench: %s\n", e.what());
    return 1;
  }
}
