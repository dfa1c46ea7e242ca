//===- CudaQueue.h - The CUDA tiers' context and stream ---------*- C++ -*-===//
//
// Internal to the CUDA tiers: the device's primary context and the one stream
// that orders all their work (uploads, kernels, row copies, ring work), and
// the pinned words that work exchanges with the host (CudaExchange.h),
// shared by their parts (CudaStorage, CudaRings, CudaStepRunner), which
// destroy their buffers before the last of them releases it.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDAQUEUE_H
#define DHS_RUNTIME_CUDA_CUDAQUEUE_H

#include "runtime/cuda/CudaExchange.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <string>

namespace dhs::runtime::cuda_detail {

/// A device's primary context and one stream, with a note of whether work
/// was submitted since the last wait.
class CudaQueue {
public:
  /// Retains the primary context of `device` (current afterwards) and
  /// creates the stream.
  explicit CudaQueue(const DeviceInfo &device)
      : device_(device), context_(deviceHandle(device.ordinal)) {}
  ~CudaQueue() { drain(); }
  CudaQueue(const CudaQueue &) = delete;
  CudaQueue &operator=(const CudaQueue &) = delete;

  /// The device.
  const DeviceInfo &device() const { return device_; }
  /// The stream.
  CUstream stream() const { return stream_.get(); }
  /// The words the stream's work exchanges with the host.
  HostExchange &exchange() { return exchange_; }
  const HostExchange &exchange() const { return exchange_; }
  /// Makes the context current on the calling thread.
  void makeCurrent() const { context_.makeCurrent(); }
  /// Notes that work was submitted (quiesce waits for it).
  void submitted() { busy_ = true; }
  /// Waits for everything submitted (between steps only).
  void quiesce() {
    if (!busy_)
      return;
    makeCurrent();
    synchronize("waiting for the stream");
  }
  /// Waits for the stream; throws Error("<what>: ...") when work failed.
  void synchronize(std::string_view what) {
    driver().check(driver().streamSynchronize(stream_.get()), what);
    busy_ = false;
  }
  /// Waits for the stream quietly (destructors: errors cannot be reported).
  void drain() noexcept {
    try {
      makeCurrent();
      driver().streamSynchronize(stream_.get());
      busy_ = false;
    } catch (...) {
    }
  }

private:
  static CUdevice deviceHandle(int ordinal) {
    CUdevice device;
    driver().check(driver().deviceGet(&device, ordinal), "cuDeviceGet");
    return device;
  }

  DeviceInfo device_;
  PrimaryContext context_;
  Stream stream_;
  HostExchange exchange_;
  bool busy_ = false;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDAQUEUE_H
