//===- DeviceInfo.h - What a backend reports about its device ---*- C++ -*-===//
//
// The device a CUDA backend runs on and the kernels it loaded, as the
// Runtime reports them (dhs-run prints them).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_DEVICEINFO_H
#define DHS_RUNTIME_CORE_DEVICEINFO_H

#include <cstddef>
#include <string>

namespace dhs::runtime {

/// A CUDA device as the runtime sees it.
struct DeviceInfo {
  int ordinal = 0;                ///< device ordinal
  std::string name;               ///< e.g. "NVIDIA H200"
  int major = 0;                  ///< compute capability major
  int minor = 0;                  ///< compute capability minor
  int multiprocessors = 0;        ///< SM count
  std::size_t totalMemory = 0;    ///< bytes of device memory
  int maxSharedPerBlockOptin = 0; ///< most dynamic+static shared bytes per block
  std::string arch;               ///< link architecture, see archForDevice
};

/// One loaded kernel.
struct KernelInfo {
  std::string kernel;         ///< entry point
  std::string ptxPath;        ///< its PTX file
  std::size_t cubinBytes = 0; ///< size of the linked cubin
  int registers = 0;          ///< registers per thread
  int maxThreadsPerBlock = 0; ///< the most threads a block may have
  int staticSharedBytes = 0;  ///< static shared memory per block
  int localBytes = 0;         ///< local (spill) memory per thread
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_DEVICEINFO_H
