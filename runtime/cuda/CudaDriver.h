//===- CudaDriver.h - The CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// libcuda.so.1 is opened with dlopen, never linked, so that every binary runs
// on machines without a GPU or driver. cuda.h is used for types and enums
// only; each function is resolved with dlsym by its real (versioned) symbol
// name, e.g. cuMemAlloc_v2.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDADRIVER_H
#define DHS_RUNTIME_CUDA_CUDADRIVER_H

#include <cuda.h>

#include <string>

namespace dhs::runtime {

/// The CUDA driver: a table of driver entry points plus error helpers. One
/// process-wide instance; loading and cuInit happen once, on first use.
class CudaDriver {
public:
  /// Returns the process-wide driver, loading it on first call (thread-safe).
  /// Never throws: failures are reported by available()/unavailableReason().
  static const CudaDriver &instance();

  /// True when libcuda was loaded, every entry point resolved, cuInit
  /// succeeded and at least one device exists.
  bool available() const { return available_; }

  /// Why the driver is unusable, e.g. "no CUDA driver (libcuda.so.1 not
  /// found)" or "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device
  /// is detected)". Empty when available().
  const std::string &unavailableReason() const { return reason_; }

  /// The driver version as reported by cuDriverGetVersion (e.g. 13000), or 0.
  int driverVersion() const { return driverVersion_; }

  /// Number of CUDA devices (0 when unavailable).
  int deviceCount() const { return deviceCount_; }

  /// Formats a result as "CUDA_ERROR_NAME (description)".
  std::string errorText(CUresult result) const;

  /// Throws Error("<what>: CUDA_ERROR_NAME (description)") unless `result`
  /// is CUDA_SUCCESS.
  void check(CUresult result, const std::string &what) const;

  /// Throws Error(unavailableReason()) unless available().
  void requireAvailable() const;

  // Entry points (valid only when available()). Names drop the "cu" prefix
  // so that cuda.h's versioning macros (cuMemAlloc -> cuMemAlloc_v2) do not
  // rename them; types come from the declarations in cuda.h.
  /// cuGetErrorName
  decltype(&::cuGetErrorName) getErrorName = nullptr;
  /// cuGetErrorString
  decltype(&::cuGetErrorString) getErrorString = nullptr;
  /// cuInit
  decltype(&::cuInit) init = nullptr;
  /// cuDriverGetVersion
  decltype(&::cuDriverGetVersion) driverGetVersion = nullptr;
  /// cuDeviceGetCount
  decltype(&::cuDeviceGetCount) deviceGetCount = nullptr;
  /// cuDeviceGet
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  /// cuDeviceGetName
  decltype(&::cuDeviceGetName) deviceGetName = nullptr;
  /// cuDeviceGetAttribute
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  /// cuDeviceTotalMem_v2
  decltype(&::cuDeviceTotalMem) deviceTotalMem = nullptr;
  /// cuDevicePrimaryCtxRetain
  decltype(&::cuDevicePrimaryCtxRetain) devicePrimaryCtxRetain = nullptr;
  /// cuDevicePrimaryCtxRelease_v2
  decltype(&::cuDevicePrimaryCtxRelease) devicePrimaryCtxRelease = nullptr;
  /// cuCtxSetCurrent
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  /// cuCtxSynchronize
  decltype(&::cuCtxSynchronize) ctxSynchronize = nullptr;
  /// cuModuleLoadData
  decltype(&::cuModuleLoadData) moduleLoadData = nullptr;
  /// cuModuleUnload
  decltype(&::cuModuleUnload) moduleUnload = nullptr;
  /// cuModuleGetFunction
  decltype(&::cuModuleGetFunction) moduleGetFunction = nullptr;
  /// cuFuncGetAttribute
  decltype(&::cuFuncGetAttribute) funcGetAttribute = nullptr;
  /// cuFuncSetAttribute
  decltype(&::cuFuncSetAttribute) funcSetAttribute = nullptr;
  /// cuMemGetInfo_v2
  decltype(&::cuMemGetInfo) memGetInfo = nullptr;
  /// cuMemAlloc_v2
  decltype(&::cuMemAlloc) memAlloc = nullptr;
  /// cuMemFree_v2
  decltype(&::cuMemFree) memFree = nullptr;
  /// cuMemHostAlloc
  decltype(&::cuMemHostAlloc) memHostAlloc = nullptr;
  /// cuMemFreeHost
  decltype(&::cuMemFreeHost) memFreeHost = nullptr;
  /// cuMemHostGetDevicePointer_v2
  decltype(&::cuMemHostGetDevicePointer) memHostGetDevicePointer = nullptr;
  /// cuMemcpyHtoD_v2
  decltype(&::cuMemcpyHtoD) memcpyHtoD = nullptr;
  /// cuMemcpyDtoH_v2
  decltype(&::cuMemcpyDtoH) memcpyDtoH = nullptr;
  /// cuMemsetD16_v2
  decltype(&::cuMemsetD16) memsetD16 = nullptr;
  /// cuMemsetD32_v2
  decltype(&::cuMemsetD32) memsetD32 = nullptr;
  /// cuMemsetD16Async
  decltype(&::cuMemsetD16Async) memsetD16Async = nullptr;
  /// cuMemsetD32Async
  decltype(&::cuMemsetD32Async) memsetD32Async = nullptr;
  /// cuMemcpyDtoHAsync_v2
  decltype(&::cuMemcpyDtoHAsync) memcpyDtoHAsync = nullptr;
  /// cuMemcpyHtoDAsync_v2
  decltype(&::cuMemcpyHtoDAsync) memcpyHtoDAsync = nullptr;
  /// cuMemcpyDtoDAsync_v2
  decltype(&::cuMemcpyDtoDAsync) memcpyDtoDAsync = nullptr;
  /// cuStreamCreate
  decltype(&::cuStreamCreate) streamCreate = nullptr;
  /// cuStreamDestroy_v2
  decltype(&::cuStreamDestroy) streamDestroy = nullptr;
  /// cuStreamSynchronize
  decltype(&::cuStreamSynchronize) streamSynchronize = nullptr;
  /// cuEventCreate
  decltype(&::cuEventCreate) eventCreate = nullptr;
  /// cuEventDestroy_v2
  decltype(&::cuEventDestroy) eventDestroy = nullptr;
  /// cuEventRecord
  decltype(&::cuEventRecord) eventRecord = nullptr;
  /// cuEventSynchronize
  decltype(&::cuEventSynchronize) eventSynchronize = nullptr;
  /// cuEventElapsedTime_v2 (falls back to cuEventElapsedTime)
  decltype(&::cuEventElapsedTime) eventElapsedTime = nullptr;
  /// cuLaunchKernel
  decltype(&::cuLaunchKernel) launchKernel = nullptr;

  // CUDA graphs (stream capture and replay). Optional: when the driver lacks
  // one, graphsAvailable() is false and everything else still works.
  /// cuStreamBeginCapture_v2
  decltype(&::cuStreamBeginCapture) streamBeginCapture = nullptr;
  /// cuStreamEndCapture
  decltype(&::cuStreamEndCapture) streamEndCapture = nullptr;
  /// cuGraphInstantiateWithFlags
  decltype(&::cuGraphInstantiateWithFlags) graphInstantiate = nullptr;
  /// cuGraphLaunch
  decltype(&::cuGraphLaunch) graphLaunch = nullptr;
  /// cuGraphExecDestroy
  decltype(&::cuGraphExecDestroy) graphExecDestroy = nullptr;
  /// cuGraphDestroy
  decltype(&::cuGraphDestroy) graphDestroy = nullptr;

  // Batched copies (CUDA 12.8+). Optional: null when the driver lacks it;
  // copyBatch (CudaResources.h) then copies one by one.
  /// cuMemcpyBatchAsync_v2
  decltype(&::cuMemcpyBatchAsync) memcpyBatchAsync = nullptr;

  /// True when the graph entry points above were all resolved.
  bool graphsAvailable() const { return graphsAvailable_; }
  /// Why graphs are unusable ("" when graphsAvailable()).
  const std::string &graphsUnavailableReason() const { return graphsReason_; }

  CudaDriver(const CudaDriver &) = delete;
  CudaDriver &operator=(const CudaDriver &) = delete;

private:
  CudaDriver();
  ~CudaDriver() = default; // the library stays loaded for the process

  bool available_ = false;
  std::string reason_;
  bool graphsAvailable_ = false;
  std::string graphsReason_;
  int driverVersion_ = 0;
  int deviceCount_ = 0;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CUDA_CUDADRIVER_H
