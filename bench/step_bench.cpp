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
// outputs. Then splits a step's time into its calls (select, attend, end),
// for fresh selections and for the same ones again.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "runtime/Runtime.h"
#include "runtime/core/RowFormat.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

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
    const CudaDriver &cuda = dhs::bench::requireGpu();
    std::vector<std::string> steps(argv + 2, argv + argc);
    RuntimeConfig config;
    config.layersPerGroup = static_cast<std::int32_t>(steps.size());
    config.layers = 2 * config.layersPerGroup; // two layer groups
    // Room for every request's history (4096 rows + 256 appends).
    config.hostRows = std::max<std::int64_t>(1 << 16, 64 * (4096 + 256));
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
    std::vector<bf16_t> outHost(
        static_cast<std::size_t>(L * s.batch * s.queries * s.heads * s.vDim)),
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
    // Where the time of a step goes (host selections, the granular calls):
    // select (checks, resolve), attend (staging and enqueueing every layer),
    // end (waiting for the kernels, then booking and promotions); and the
    // same with the previous step's selections again (nearly all resident:
    // nothing to promote).
    auto phases = [&](MemorySpace memory, bool repeat, double &select, double &attend,
                      double &end) {
      std::vector<double> sel, att, fin;
      for (int i = 0; i < 30; ++i) {
        if (!repeat)
          randomSelections();
        auto t0 = std::chrono::steady_clock::now();
        rt.beginStep(ids.data(), s.batch);
        const std::int32_t *selections =
            memory == MemorySpace::Device ? reinterpret_cast<const std::int32_t *>(deviceRows.get())
                                          : rows.data();
        for (std::int32_t g = 0; g < rt.groups(); ++g)
          rt.selectGroup(g, selections + g * perGroup, memory);
        auto t1 = std::chrono::steady_clock::now();
        const std::int64_t qPerLayer = s.batch * s.queries * s.heads * s.qkDim;
        const std::int64_t oPerLayer = s.batch * s.queries * s.heads * s.vDim;
        for (std::int64_t l = 0; l < L; ++l)
          rt.attendLayer(static_cast<std::int32_t>(l), q.data() + l * qPerLayer,
                         outHost.data() + l * oPerLayer);
        auto t2 = std::chrono::steady_clock::now();
        rt.endStep();
        auto t3 = std::chrono::steady_clock::now();
        if (i >= 5) {
          sel.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          att.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
          fin.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
        }
      }
      for (auto *v : {&sel, &att, &fin})
        std::sort(v->begin(), v->end());
      select = sel[sel.size() / 2];
      attend = att[att.size() / 2];
      end = fin[fin.size() / 2];
    };
    double missSelect, missAttend, missEnd, hitSelect, hitAttend, hitEnd;
    phases(MemorySpace::Host, false, missSelect, missAttend, missEnd);
    const ResidencyStepStats missStats = rt.stats().lastStep;
    phases(MemorySpace::Host, true, hitSelect, hitAttend, hitEnd);
    const ResidencyStepStats hitStats = rt.stats().lastStep;
    // Device selections: the host books each group from its resolve
    // kernel's log at the end (no selection ever reaches the host).
    double dMissSelect, dMissAttend, dMissEnd, dHitSelect, dHitAttend, dHitEnd;
    phases(MemorySpace::Device, false, dMissSelect, dMissAttend, dMissEnd);
    const ResidencyStepStats dMissStats = rt.stats().lastStep;
    phases(MemorySpace::Device, true, dHitSelect, dHitAttend, dHitEnd);
    const ResidencyStepStats dHitStats = rt.stats().lastStep;
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
    auto report = [](const char *what, const ResidencyStepStats &miss, double missSelect,
                     double missAttend, double missEnd, const ResidencyStepStats &hit,
                     double hitSelect, double hitAttend, double hitEnd) {
      std::printf("phases, %s, median ms: fresh selections (%lld selected, %lld promoted): "
                  "select %.3f, attend %.3f, end %.3f; repeated selections (%lld selected, "
                  "%lld resident): select %.3f, attend %.3f, end %.3f\n",
                  what, static_cast<long long>(miss.selected),
                  static_cast<long long>(miss.promoted), missSelect, missAttend, missEnd,
                  static_cast<long long>(hit.selected), static_cast<long long>(hit.resident),
                  hitSelect, hitAttend, hitEnd);
    };
    report("host selections", missStats, missSelect, missAttend, missEnd, hitStats, hitSelect,
           hitAttend, hitEnd);
    report("device selections (booked from the step log)", dMissStats, dMissSelect, dMissAttend,
           dMissEnd, dHitStats, dHitSelect, dHitAttend, dHitEnd);
    return differing == 0 ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-step-bench: %s\n", e.what());
    return 1;
  }
}
