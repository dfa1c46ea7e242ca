//===- graph_launch_bench.cpp - The host's cost of launching a CUDA graph =====//
//
// Usage: dhs-graph-launch-bench [--launches N] [--cold] [--params P]
// The host time of one cuGraphLaunch (the call alone, the device idle: the
// stream is synchronized between launches, untimed) for graphs shaped like
// a step's: K kernel nodes (an empty kernel, a hand-written PTX baseline,
// not a dhs kernel) on one stream or spread over B branches forked from
// and joined into the stream by events, with or without copy nodes (to or
// from pinned host memory, device to device, 2D) and memsets, as the
// runtime's step graphs have them. The
// decided step at B=128 x 20 groups is 180 kernels on 8 + 20 branches, 20
// copies and 2 memsets (dhs-decision-bench); its launch took 0.07-0.16 ms
// (bench/NOTES.md, twentieth session). Kernels are one parameterless empty
// kernel, or 16 distinct ones with P 8-byte parameters each (default 24; a
// dhs kernel's flattened memref descriptors are 40-90, e.g. age_rows 66). With --cold
// the host's caches are swept (64 MB written) and the thread sleeps 5 ms
// between launches, as a step's other work runs between two launches of
// its graph. The step-shaped graph is also launched as a step's kernels
// are: each from a module of its own, with 200 KB of dynamic shared
// memory, over 384 CTAs. Prints the median and the 10th and 90th
// percentiles of each shape.
//
//===----------------------------------------------------------------------===//

#include "bench/BenchSetup.h"
#include "runtime/cuda/CudaResources.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
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

/// Distinct empty kernels with `params` 8-byte parameters each, as the
/// step's kernels are distinct functions.
constexpr int kDistinctKernels = 16;

/// Their PTX: kernels [first, first + count) of them in one module.
std::string distinctKernelsPtx(int params, int first = 0, int count = kDistinctKernels) {
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n";
  for (int f = first; f < first + count; ++f) {
    ptx += ".visible .entry noop" + std::to_string(f) + "(";
    for (int p = 0; p < params; ++p)
      ptx += std::string(p ? ", " : "") + ".param .u64 p" + std::to_string(p);
    ptx += ")\n{\n  ret;\n}\n";
  }
  return ptx;
}

/// What a graph's copy nodes copy.
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice, Rows2D, Rows2DDevice };

const char *nameOf(CopyKind kind) {
  switch (kind) {
  case CopyKind::HostToDevice:
    return "h2d";
  case CopyKind::DeviceToHost:
    return "d2h";
  case CopyKind::DeviceToDevice:
    return "d2d";
  case CopyKind::Rows2D:
    return "2d";
  case CopyKind::Rows2DDevice:
    return "2d d2d";
  }
  return "?";
}

struct Shape {
  int kernels = 0;  // kernel nodes
  int branches = 1; // streams they are spread over (1: the stream itself)
  int copies = 0;   // 4 KB copies (pinned host memory on the host side), on the stream first
  int memsets = 0;  // 4-byte memsets, on the stream first
  CopyKind kind = CopyKind::HostToDevice;
  int distinct = 0; // 0: one parameterless kernel; else this many distinct kernels with parameters
  // How the distinct kernels are launched, as a step's are: each from a
  // module of its own, with this much dynamic shared memory (bytes, past
  // 48 KB opted in), over this many CTAs.
  bool ownModules = false;
  int sharedBytes = 0;
  int ctas = 1;
};

} // namespace

int main(int argc, char **argv) {
  int launches = 200;
  bool cold = false;
  int kernelParams = 24;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--launches" && i + 1 < argc) {
      launches = std::max(10, std::atoi(argv[++i]));
    } else if (arg == "--cold") {
      cold = true;
    } else if (arg == "--params" && i + 1 < argc) {
      // (4 KiB of parameters at most.)
      kernelParams = std::clamp(std::atoi(argv[++i]), 1, 512);
    } else {
      std::fprintf(stderr, "usage: dhs-graph-launch-bench [--launches N] [--cold] [--params P]\n");
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
    CUmodule distinctModule;
    const std::string distinctPtx = distinctKernelsPtx(kernelParams);
    cuda.check(cuda.moduleLoadData(&distinctModule, distinctPtx.c_str()),
               "loading the distinct kernels");
    std::vector<CUfunction> distinct(kDistinctKernels), separate(kDistinctKernels);
    std::vector<CUmodule> separateModules(kDistinctKernels);
    for (int f = 0; f < kDistinctKernels; ++f) {
      const std::string name = "noop" + std::to_string(f);
      cuda.check(cuda.moduleGetFunction(&distinct[f], distinctModule, name.c_str()),
                 "cuModuleGetFunction");
      const std::string ptx = distinctKernelsPtx(kernelParams, f, 1);
      cuda.check(cuda.moduleLoadData(&separateModules[f], ptx.c_str()), "loading a kernel");
      cuda.check(cuda.moduleGetFunction(&separate[f], separateModules[f], name.c_str()),
                 "cuModuleGetFunction");
      // Up to 200 KB of dynamic shared memory, as the attention kernels.
      for (CUfunction function : {distinct[f], separate[f]})
        cuda.check(cuda.funcSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         200 * 1024),
                   "cuFuncSetAttribute");
    }
    // Between cold launches: the host's caches swept (a step's other work
    // runs between two launches of its graph).
    std::vector<std::uint64_t> sweep(cold ? (64 << 20) / 8 : 0);
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
    DeviceBuffer source(kMaxCopies * 8192, "copy source");

    auto measure = [&](const Shape &s) {
      cuda.check(cuda.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                 "cuStreamBeginCapture");
      for (int m = 0; m < s.memsets; ++m)
        cuda.check(cuda.memsetD32Async(target.get() + m * 4, 0, 1, stream), "memset");
      for (int c = 0; c < s.copies; ++c) {
        const CUdeviceptr device = target.get() + c * 4096;
        void *host = static_cast<char *>(pinned.host()) + c * 4096;
        switch (s.kind) {
        case CopyKind::HostToDevice:
          cuda.check(cuda.memcpyHtoDAsync(device, host, 4096, stream), "copy");
          break;
        case CopyKind::DeviceToHost:
          cuda.check(cuda.memcpyDtoHAsync(host, device, 4096, stream), "copy");
          break;
        case CopyKind::DeviceToDevice:
          cuda.check(cuda.memcpyDtoDAsync(device, source.get() + c * 4096, 4096, stream), "copy");
          break;
        case CopyKind::Rows2D:
        case CopyKind::Rows2DDevice: {
          // 64 rows of 64 bytes at a 128-byte pitch, as the runtime's
          // copies of every group's words are (to pinned host memory, or
          // to device memory as the exchange's mirror is).
          CUDA_MEMCPY2D copy{};
          copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
          copy.srcDevice = source.get() + c * 8192;
          copy.srcPitch = 128;
          if (s.kind == CopyKind::Rows2D) {
            copy.dstMemoryType = CU_MEMORYTYPE_HOST;
            copy.dstHost = host;
          } else {
            copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            copy.dstDevice = device;
          }
          copy.dstPitch = 64;
          copy.WidthInBytes = 64;
          copy.Height = 64;
          cuda.check(cuda.memcpy2DAsync(&copy, stream), "copy");
          break;
        }
        }
      }
      const int used = std::min(s.branches, kMaxBranches);
      if (used > 1)
        for (int b = 0; b < used; ++b) {
          cuda.check(cuda.eventRecord(forks[b], stream), "fork");
          cuda.check(cuda.streamWaitEvent(branches[b], forks[b], 0), "fork");
        }
      std::vector<CUdeviceptr> params(static_cast<std::size_t>(kernelParams), target.get());
      std::vector<void *> pointers;
      for (CUdeviceptr &param : params)
        pointers.push_back(&param);
      for (int k = 0; k < s.kernels; ++k) {
        const std::vector<CUfunction> &functions = s.ownModules ? separate : distinct;
        cuda.check(cuda.launchKernel(s.distinct ? functions[k % s.distinct] : noop,
                                     static_cast<unsigned>(s.ctas), 1, 1, 32, 1, 1,
                                     static_cast<unsigned>(s.sharedBytes),
                                     used > 1 ? branches[k % used] : stream,
                                     s.distinct ? pointers.data() : nullptr, nullptr),
                   "launch");
      }
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
        if (cold) {
          for (std::size_t w = 0; w < sweep.size(); w += 8)
            sweep[w] += static_cast<std::uint64_t>(i);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        if (i >= 20)
          us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      cuda.graphExecDestroy(exec);
      cuda.graphDestroy(graph);
      std::sort(us.begin(), us.end());
      const auto at = [&](double q) { return us[static_cast<std::size_t>(q * (us.size() - 1))]; };
      std::printf("%8d %9d %4d %-3s %8d %8d %7s %6d %5d  %8.1f %8.1f %8.1f\n", s.kernels,
                  s.branches, s.copies, s.copies ? nameOf(s.kind) : "", s.memsets, s.distinct,
                  s.ownModules ? "own" : "one", s.sharedBytes / 1024, s.ctas, at(0.5), at(0.1),
                  at(0.9));
      std::fflush(stdout);
    };
    std::printf("cuGraphLaunch host time, us (median, p10, p90 of %d launches, device idle%s; "
                "distinct kernels take %d 8-byte parameters)\n",
                launches, cold ? ", host caches swept and 5 ms asleep between launches" : "",
                kernelParams);
    std::printf(" kernels  branches  copies   memsets distinct modules smemKB  ctas    median      "
                "p10      p90\n");
    for (const Shape &s :
         std::vector<Shape>{{1, 1, 0, 0},
                            {180, 1, 0, 0},
                            {270, 1, 0, 0},
                            {180, 2, 0, 0},
                            {180, 4, 0, 0},
                            {180, 8, 0, 0},
                            {180, 16, 0, 0},
                            {180, 28, 0, 0},
                            {180, 28, 20, 2},
                            {0, 1, 1, 0, CopyKind::HostToDevice},
                            {0, 1, 5, 0, CopyKind::HostToDevice},
                            {0, 1, 20, 0, CopyKind::HostToDevice},
                            {0, 1, 20, 0, CopyKind::DeviceToHost},
                            {0, 1, 20, 0, CopyKind::DeviceToDevice},
                            {0, 1, 20, 0, CopyKind::Rows2D},
                            {0, 1, 0, 2},
                            {0, 1, 0, 20},
                            {180, 1, 20, 0, CopyKind::DeviceToDevice},
                            {180, 1, 0, 20},
                            {180, 1, 0, 0, CopyKind::HostToDevice, 16},
                            {180, 28, 0, 0, CopyKind::HostToDevice, 16},
                            {180, 28, 9, 2, CopyKind::Rows2D, 16},
                            // The grouped decided step's shape (B=128 x
                            // 20 groups, with appends): one stream.
                            {144, 1, 40, 2, CopyKind::DeviceToDevice, 16},
                            {144, 1, 10, 2, CopyKind::Rows2D, 16},
                            // The same, launched as a step's kernels are.
                            {144, 1, 10, 2, CopyKind::Rows2D, 16, true},
                            {144, 1, 10, 2, CopyKind::Rows2D, 16, false, 200 * 1024},
                            {144, 1, 10, 2, CopyKind::Rows2D, 16, false, 0, 384},
                            {144, 1, 10, 2, CopyKind::Rows2D, 16, true, 200 * 1024, 384},
                            // Strided copies between device buffers (the
                            // exchange's mirror), and the exchanged step's
                            // shape: 4 copies that touch host memory, 12
                            // that do not.
                            {0, 1, 20, 0, CopyKind::Rows2DDevice},
                            {144, 1, 12, 2, CopyKind::Rows2DDevice, 16},
                            {144, 1, 4, 2, CopyKind::Rows2D, 16}})
      measure(s);
    cuda.moduleUnload(distinctModule);
    for (CUmodule separateModule : separateModules)
      cuda.moduleUnload(separateModule);
    cuda.moduleUnload(module);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "dhs-graph-launch-bench: %s\n", e.what());
    return 1;
  }
}
