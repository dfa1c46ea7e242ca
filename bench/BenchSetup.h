//===- BenchSetup.h - What a GPU benchmark needs first ----------*- C++ -*-===//
//
// The GPU, and for the kernel benchmarks (dhs-topk-bench,
// dhs-promotion-bench, dhs-retrieval-bench), which each time one compiled
// kernel, their step of one launch. Errors are thrown as runtime::Error: each
// benchmark prints them after its name and exits with status 1.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_BENCH_BENCHSETUP_H
#define DHS_BENCH_BENCHSETUP_H

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaDriver.h"

#include <string>

namespace dhs::bench {

/// Whether the command line asks for help (-h or --help anywhere): the
/// benchmark then prints its usage and runs nothing.
inline bool wantsHelp(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h")
      return true;
  return false;
}

/// The CUDA driver; throws Error("no GPU: <why>") when there is no GPU.
inline const runtime::CudaDriver &requireGpu() {
  const runtime::CudaDriver &cuda = runtime::CudaDriver::instance();
  if (!cuda.available())
    throw runtime::Error("no GPU: " + cuda.unavailableReason());
  return cuda;
}

/// The manifest of the step in `directory`; throws Error unless the step is
/// a single launch of `kind`.
inline runtime::Manifest loadSingleLaunchStep(const std::string &directory,
                                              runtime::abi::LaunchKind kind) {
  runtime::Manifest manifest = runtime::Manifest::load(directory);
  if (manifest.launches.size() != 1 || manifest.launches[0].kind != kind)
    throw runtime::Error(directory + " is not a single " + runtime::abi::name(kind) + " step");
  return manifest;
}

} // namespace dhs::bench

#endif // DHS_BENCH_BENCHSETUP_H
