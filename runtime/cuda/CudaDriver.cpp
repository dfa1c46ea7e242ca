//===- CudaDriver.cpp - dlopen the CUDA driver ----------------------------===//

#include "runtime/cuda/CudaDriver.h"

#include "runtime/core/DynamicLibrary.h"
#include "runtime/core/Error.h"

#include <dlfcn.h>

#include <initializer_list>

namespace dhs::runtime {

namespace {} // namespace

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
  ok &= resolveSymbol(library, getErrorName, {"cuGetErrorName"}, missing);
  ok &= resolveSymbol(library, getErrorString, {"cuGetErrorString"}, missing);
  ok &= resolveSymbol(library, init, {"cuInit"}, missing);
  ok &= resolveSymbol(library, driverGetVersion, {"cuDriverGetVersion"}, missing);
  ok &= resolveSymbol(library, deviceGetCount, {"cuDeviceGetCount"}, missing);
  ok &= resolveSymbol(library, deviceGet, {"cuDeviceGet"}, missing);
  ok &= resolveSymbol(library, deviceGetName, {"cuDeviceGetName"}, missing);
  ok &= resolveSymbol(library, deviceGetAttribute, {"cuDeviceGetAttribute"}, missing);
  ok &= resolveSymbol(library, deviceTotalMem, {"cuDeviceTotalMem_v2"}, missing);
  ok &= resolveSymbol(library, devicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}, missing);
  ok &= resolveSymbol(library, devicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2"}, missing);
  ok &= resolveSymbol(library, ctxSetCurrent, {"cuCtxSetCurrent"}, missing);
  ok &= resolveSymbol(library, ctxSynchronize, {"cuCtxSynchronize"}, missing);
  ok &= resolveSymbol(library, moduleLoadData, {"cuModuleLoadData"}, missing);
  ok &= resolveSymbol(library, moduleUnload, {"cuModuleUnload"}, missing);
  ok &= resolveSymbol(library, moduleGetFunction, {"cuModuleGetFunction"}, missing);
  ok &= resolveSymbol(library, funcGetAttribute, {"cuFuncGetAttribute"}, missing);
  ok &= resolveSymbol(library, funcSetAttribute, {"cuFuncSetAttribute"}, missing);
  ok &= resolveSymbol(library, memGetInfo, {"cuMemGetInfo_v2"}, missing);
  ok &= resolveSymbol(library, memAlloc, {"cuMemAlloc_v2"}, missing);
  ok &= resolveSymbol(library, memFree, {"cuMemFree_v2"}, missing);
  ok &= resolveSymbol(library, memHostAlloc, {"cuMemHostAlloc"}, missing);
  ok &= resolveSymbol(library, memFreeHost, {"cuMemFreeHost"}, missing);
  ok &= resolveSymbol(library, memHostGetDevicePointer, {"cuMemHostGetDevicePointer_v2"}, missing);
  ok &= resolveSymbol(library, memcpyHtoD, {"cuMemcpyHtoD_v2"}, missing);
  ok &= resolveSymbol(library, memcpyDtoH, {"cuMemcpyDtoH_v2"}, missing);
  ok &= resolveSymbol(library, memsetD16, {"cuMemsetD16_v2"}, missing);
  ok &= resolveSymbol(library, memsetD32, {"cuMemsetD32_v2"}, missing);
  ok &= resolveSymbol(library, memsetD16Async, {"cuMemsetD16Async"}, missing);
  ok &= resolveSymbol(library, memsetD32Async, {"cuMemsetD32Async"}, missing);
  ok &= resolveSymbol(library, memcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"}, missing);
  ok &= resolveSymbol(library, memcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"}, missing);
  ok &= resolveSymbol(library, memcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"}, missing);
  ok &= resolveSymbol(library, streamCreate, {"cuStreamCreate"}, missing);
  ok &= resolveSymbol(library, streamDestroy, {"cuStreamDestroy_v2"}, missing);
  ok &= resolveSymbol(library, streamSynchronize, {"cuStreamSynchronize"}, missing);
  ok &= resolveSymbol(library, eventCreate, {"cuEventCreate"}, missing);
  ok &= resolveSymbol(library, eventDestroy, {"cuEventDestroy_v2"}, missing);
  ok &= resolveSymbol(library, eventRecord, {"cuEventRecord"}, missing);
  ok &= resolveSymbol(library, eventSynchronize, {"cuEventSynchronize"}, missing);
  ok &= resolveSymbol(library, eventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"},
                      missing);
  ok &= resolveSymbol(library, launchKernel, {"cuLaunchKernel"}, missing);
  if (!ok) {
    reason_ = "CUDA driver too old (libcuda.so.1 lacks " + missing + ")";
    return;
  }
  std::string missingGraph;
  bool graphs = true;
  graphs &= resolveSymbol(library, streamBeginCapture, {"cuStreamBeginCapture_v2"}, missingGraph);
  graphs &= resolveSymbol(library, streamEndCapture, {"cuStreamEndCapture"}, missingGraph);
  graphs &= resolveSymbol(library, graphInstantiate, {"cuGraphInstantiateWithFlags"}, missingGraph);
  graphs &= resolveSymbol(library, graphLaunch, {"cuGraphLaunch"}, missingGraph);
  graphs &= resolveSymbol(library, graphExecDestroy, {"cuGraphExecDestroy"}, missingGraph);
  graphs &= resolveSymbol(library, graphDestroy, {"cuGraphDestroy"}, missingGraph);
  graphsAvailable_ = graphs;
  std::string missingBatch;
  resolveSymbol(library, memcpyBatchAsync, {"cuMemcpyBatchAsync_v2"}, missingBatch);
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

void CudaDriver::check(CUresult result, const std::string &what) const {
  if (result != CUDA_SUCCESS)
    throw Error(what + ": " + errorText(result));
}

void CudaDriver::requireAvailable() const {
  if (!available_)
    throw Error("CUDA is unavailable: " + reason_);
}

} // namespace dhs::runtime
