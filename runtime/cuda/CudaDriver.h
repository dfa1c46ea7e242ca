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
#include <cudaProfiler.h>

#include <string>
#include <string_view>

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
  /// is CUDA_SUCCESS. (A view: a literal costs no allocation on success.)
  void check(CUresult result, std::string_view what) const;

  /// Throws Error(unavailableReason()) unless available().
  void requireAvailable() const;

  // Entry points (valid only when available()), one field per entry of
  // CudaDriverSymbols.def, typed by cuda.h's declaration. The graph entries
  // are null unless graphsAvailable(); the optional ones may be null.
#define DHS_CUDA_REQUIRED(member, function, ...) decltype(&::function) member = nullptr;
#define DHS_CUDA_GRAPH DHS_CUDA_REQUIRED
#define DHS_CUDA_OPTIONAL DHS_CUDA_REQUIRED
#include "runtime/cuda/CudaDriverSymbols.def"

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
