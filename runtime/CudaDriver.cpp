//===- CudaDriver.cpp - dlopen the CUDA driver ----------------------------===//

#include "runtime/CudaDriver.h"

#include "runtime/Error.h"

#include <dlfcn.h>

#include <initializer_list>

namespace dhs::runtime {

namespace {

/// Resolves the first of `names` that the library exports, into `slot`.
/// Returns false (and names the first candidate in `missing`) if none does.
template <typename Fn>
bool resolve(void *library, Fn &slot, std::initializer_list<const char *> names,
             std::string &missing) {
  for (const char *name : names) {
    if (void *symbol = dlsym(library, name)) {
      slot = reinterpret_cast<Fn>(symbol);
      return true;
    }
  }
  if (missing.empty())
    missing = *names.begin();
  return false;
}

} // namespace

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
  ok &= resolve(library, getErrorName, {"cuGetErrorName"}, missing);
  ok &= resolve(library, getErrorString, {"cuGetErrorString"}, missing);
  ok &= resolve(library, init, {"cuInit"}, missing);
  ok &= resolve(library, driverGetVersion, {"cuDriverGetVersion"}, missing);
  ok &= resolve(library, deviceGetCount, {"cuDeviceGetCount"}, missing);
  ok &= resolve(library, deviceGet, {"cuDeviceGet"}, missing);
  ok &= resolve(library, deviceGetName, {"cuDeviceGetName"}, missing);
  ok &= resolve(library, deviceGetAttribute, {"cuDeviceGetAttribute"}, missing);
  ok &= resolve(library, deviceTotalMem, {"cuDeviceTotalMem_v2"}, missing);
  ok &= resolve(library, devicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"},
                missing);
  ok &= resolve(library, devicePrimaryCtxRelease,
                {"cuDevicePrimaryCtxRelease_v2"}, missing);
  ok &= resolve(library, ctxSetCurrent, {"cuCtxSetCurrent"}, missing);
  ok &= resolve(library, ctxSynchronize, {"cuCtxSynchronize"}, missing);
  ok &= resolve(library, moduleLoadData, {"cuModuleLoadData"}, missing);
  ok &= resolve(library, moduleUnload, {"cuModuleUnload"}, missing);
  ok &= resolve(library, moduleGetFunction, {"cuModuleGetFunction"}, missing);
  ok &= resolve(library, funcGetAttribute, {"cuFuncGetAttribute"}, missing);
  ok &= resolve(library, funcSetAttribute, {"cuFuncSetAttribute"}, missing);
  ok &= resolve(library, memGetInfo, {"cuMemGetInfo_v2"}, missing);
  ok &= resolve(library, memAlloc, {"cuMemAlloc_v2"}, missing);
  ok &= resolve(library, memFree, {"cuMemFree_v2"}, missing);
  ok &= resolve(library, memHostAlloc, {"cuMemHostAlloc"}, missing);
  ok &= resolve(library, memFreeHost, {"cuMemFreeHost"}, missing);
  ok &= resolve(library, memHostGetDevicePointer,
                {"cuMemHostGetDevicePointer_v2"}, missing);
  ok &= resolve(library, memcpyHtoD, {"cuMemcpyHtoD_v2"}, missing);
  ok &= resolve(library, memcpyDtoH, {"cuMemcpyDtoH_v2"}, missing);
  ok &= resolve(library, memsetD16, {"cuMemsetD16_v2"}, missing);
  ok &= resolve(library, memsetD32, {"cuMemsetD32_v2"}, missing);
  ok &= resolve(library, memsetD16Async, {"cuMemsetD16Async"}, missing);
  ok &= resolve(library, memsetD32Async, {"cuMemsetD32Async"}, missing);
  ok &= resolve(library, memcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"}, missing);
  ok &= resolve(library, memcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"}, missing);
  ok &= resolve(library, memcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"}, missing);
  ok &= resolve(library, streamCreate, {"cuStreamCreate"}, missing);
  ok &= resolve(library, streamDestroy, {"cuStreamDestroy_v2"}, missing);
  ok &= resolve(library, streamSynchronize, {"cuStreamSynchronize"}, missing);
  ok &= resolve(library, eventCreate, {"cuEventCreate"}, missing);
  ok &= resolve(library, eventDestroy, {"cuEventDestroy_v2"}, missing);
  ok &= resolve(library, eventRecord, {"cuEventRecord"}, missing);
  ok &= resolve(library, eventSynchronize, {"cuEventSynchronize"}, missing);
  ok &= resolve(library, eventElapsedTime,
                {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, missing);
  ok &= resolve(library, launchKernel, {"cuLaunchKernel"}, missing);
  if (!ok) {
    reason_ = "CUDA driver too old (libcuda.so.1 lacks " + missing + ")";
    return;
  }

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
