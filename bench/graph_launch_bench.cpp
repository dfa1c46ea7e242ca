//===- graph_launch_bench.cpp - The host's cost of launching a CUDA graph =====//
//
// Usage: dhs-graph-launch-bench [--launches N]
// The host time of one cuGraphLaunch (the call alone, the device idle: the
// stream is synchronized between launches, untimed) for graphs shaped like
// a step's: K kernel nodes (an empty kernel, a hand-written PTX baseline,
// not a dhs kernel) on one stream or spread over B branches forked from
// and joined into the stream by events, with or without pinned-to-device
// copy nodes and a memset, as the runtime's step graphs have them. The
// decided step at B=128 x 20 groups is 180 kernels on 8 + 20 branches, 20
// copies and 2 memsets (dhs-decision-bench); its launch took 0.07-0.16 ms
// (bench/NOTES.md, twentieth session). Prints the median and the 10th and
// 90th percentiles of each shape.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "runtime/cuda/CudaResources.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace dhs::runtime;
using cuda_detail::DeviceBuffer;
using cuda_detail::MappedHostBuffer;
using Clock = std::chrono::steady_clock;

namespace {

/// An empty kernel (the baseline's only device code).
constexpr const char *kNoopPtx = ".version 8.0\n"
                                 ".target sm_90\n"
                                 ".address_size 64\n"
                                 ".visible .entry noop()\n"
                                 "{\n"
                                 "  ret;\n"
                                 "}\n";

struct Shape {
  int kernels = 0;  // kernel nodes
  int branches = 1; // streams they are spread over (1: the stream itself)
  int copies = 0;   // 4 KB pinned-to-device copies, on the stream first
  int memsets = 0;  // 4-byte memsets, on the stream first
};

} // namespace

int main(int argc, char **argv) {
  int launches = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--launches" && i + 1 < argc) {
      launches = std::max(10, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: dhs-graph-launch-bench [--launches N]\n");
      return 2;
    }
  }
  try {
    const CudaDriver &cuda = dhs::bench::requireGpu();
    CUdevice device;
    CUcontext context;
    cuda.check(cuda.deviceGet(&device, 0), "cuDeviceGet");
    cuda.check(cuda.devicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
    cuda.check(cuda.ctxSetCurrent(context), "cuCtxSetCurrent");
    CUmodule module;
    CUfunction noop;
    cuda.check(cuda.moduleLoadData(&module, kNoopPtx), "loading the empty kernel");
    cuda.check(cuda.moduleGetFunction(&noop, module, "noop"), "cuModuleGetFunction");
    CUstream stream;
    cuda.check(cuda.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    constexpr int kMaxBranches = 32, kMaxCopies = 32;
    std::vector<CUstream> branches(kMaxBranches);
    std::vector<CUevent> forks(kMaxBranches), joins(kMaxBranches);
    for (int b = 0; b < kMaxBranches; ++b) {
      cuda.check(cuda.streamCreate(&branches[b], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      cuda.check(cuda.eventCreate(&forks[b], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      cuda.check(cuda.eventCreate(&joins[b], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    }
    MappedHostBuffer pinned(kMaxCopies * 4096, "pinned source");
    DeviceBuffer target(kMaxCopies * 4096, "copy target");

    auto measure = [&](const Shape &s) {
      cuda.check(cuda.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                 "cuStreamBeginCapture");
      for (int m = 0; m < s.memsets; ++m)
        cuda.check(cuda.memsetD32Async(target.get() + m * 4, 0, 1, stream), "memset");
      for (int c = 0; c < s.copies; ++c)
        cuda.check(cuda.memcpyHtoDAsync(target.get() + c * 4096,
                                        static_cast<char *>(pinned.host()) + c * 4096, 4096,
                                        stream),
                   "copy");
      const int used = std::min(s.branches, kMaxBranches);
      if (used > 1)
        for (int b = 0; b < used; ++b) {
          cuda.check(cuda.eventRecord(forks[b], stream), "fork");
          cuda.check(cuda.streamWaitEvent(branches[b], forks[b], 0), "fork");
        }
      for (int k = 0; k < s.kernels; ++k)
        cuda.check(cuda.launchKernel(noop, 1, 1, 1, 32, 1, 1, 0,
                                     used > 1 ? branches[k % used] : stream, nullptr, nullptr),
                   "launch");
      if (used > 1)
        for (int b = 0; b < used; ++b) {
          cuda.check(cuda.eventRecord(joins[b], branches[b]), "join");
          cuda.check(cuda.streamWaitEvent(stream, joins[b], 0), "join");
        }
      CUgraph graph = nullptr;
      cuda.check(cuda.streamEndCapture(stream, &graph), "cuStreamEndCapture");
      CUgraphExec exec = nullptr;
      cuda.check(cuda.graphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
      std::vector<double> us;
      for (int i = 0; i < launches + 20; ++i) {
        const auto t0 = Clock::now();
        cuda.check(cuda.graphLaunch(exec, stream), "cuGraphLaunch");
        const auto t1 = Clock::now();
        cuda.check(cuda.streamSynchronize(stream), "cuStreamSynchronize");
        if (i >= 20)
          us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      cuda.graphExecDestroy(exec);
      cuda.graphDestroy(graph);
      std::sort(us.begin(), us.end());
      const auto at = [&](double q) { return us[static_cast<std::size_t>(q * (us.size() - 1))]; };
      std::printf("%8d %9d %7d %8d  %8.1f %8.1f %8.1f\n", s.kernels, s.branches, s.copies,
                  s.memsets, at(0.5), at(0.1), at(0.9));
      std::fflush(stdout);
    };
    std::printf("cuGraphLaunch host time, us (median, p10, p90 of %d launches, device idle)\n",
                launches);
    std::printf(" kernels  branches  copies  memsets    median      p10      p90\n");
    for (const Shape &s : std::vector<Shape>{{1, 1, 0, 0},
                                             {45, 1, 0, 0},
                                             {180, 1, 0, 0},
                                             {270, 1, 0, 0},
                                             {180, 8, 0, 0},
                                             {180, 28, 0, 0},
                                             {180, 1, 20, 2},
                                             {180, 8, 20, 2},
                                             {180, 28, 20, 2},
                                             {45, 10, 17, 2},
                                             {270, 32, 20, 2},
                                             {0, 1, 20, 2}})
      measure(s);
    cuda.moduleUnload(module);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-graph-launch-bench: %s\n", e.what());
    return 1;
  }
}
