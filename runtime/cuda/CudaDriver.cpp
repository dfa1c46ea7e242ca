//===- CudaDriver.cpp - dlopen the CUDA driver ----------------------------===//

#include "runtime/cuda/CudaDriver.h"

#include "runtime/core/DynamicLibrary.h"
#include "runtime/core/Error.h"

#include <dlfcn.h>

#include <initializer_list>

namespace dhs::runtime {

const CudaDriver &CudaDriver::instance() {
  static const CudaDriver driver;
  return driver;
}

CudaDriver::CudaDriver() {
  // Never dlclose: CUDA registers process-wide state.
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    reason_ = "no CUDA driver (libcuda.so.1 not found)";
    return;
  }

  std::string missing;
  bool ok = true;
#define DHS_CUDA_REQUIRED(member, function, ...)                                                   \
  ok &= resolveSymbol(library, member, {__VA_ARGS__}, missing);
#include "runtime/cuda/CudaDriverSymbols.def"
  if (!ok) {
    reason_ = "CUDA driver too old (libcuda.so.1 lacks " + missing + ")";
    return;
  }
  std::string missingGraph;
  bool graphs = true;
#define DHS_CUDA_GRAPH(member, function, ...)                                                      \
  graphs &= resolveSymbol(library, member, {__VA_ARGS__}, missingGraph);
#include "runtime/cuda/CudaDriverSymbols.def"
  graphsAvailable_ = graphs;
  std::string missingOptional;
#define DHS_CUDA_OPTIONAL(member, function, ...)                                                   \
  resolveSymbol(library, member, {__VA_ARGS__}, missingOptional);
#include "runtime/cuda/CudaDriverSymbols.def"
  if (!graphs)
    graphsReason_ = "CUDA driver too old for graphs (libcuda.so.1 lacks " + missingGraph + ")";

  CUresult result = init(0);
  if (result != CUDA_SUCCESS) {
    reason_ = "cuInit failed: " + errorText(result);
    return;
  }
  if (driverGetVersion(&driverVersion_) != CUDA_SUCCESS)
    driverVersion_ = 0;
  result = deviceGetCount(&deviceCount_);
  if (result != CUDA_SUCCESS) {
    deviceCount_ = 0;
    reason_ = "cuDeviceGetCount failed: " + errorText(result);
    return;
  }
  if (deviceCount_ <= 0) {
    deviceCount_ = 0;
    reason_ = "no CUDA device";
    return;
  }
  available_ = true;
}

std::string CudaDriver::errorText(CUresult result) const {
  const char *name = nullptr;
  const char *description = nullptr;
  if (getErrorName && getErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (getErrorString && getErrorString(result, &description) != CUDA_SUCCESS)
    description = nullptr;
  std::string text = name ? name : "CUDA error " + std::to_string(result);
  if (description)
    text += std::string(" (") + description + ")";
  return text;
}

void CudaDriver::check(CUresult result, std::string_view what) const {
  if (result != CUDA_SUCCESS)
    throw Error(std::string(what) + ": " + errorText(result));
}

void CudaDriver::requireAvailable() const {
  if (!available_)
    throw Error("CUDA is unavailable: " + reason_);
}

} // namespace dhs::runtime
