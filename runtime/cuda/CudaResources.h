//===- CudaResources.h - RAII over CUDA driver objects ----------*- C++ -*-===//
//
// Internal to the runtime's CUDA code (CudaStep.cpp, CudaTiers.cpp): the
// primary context, modules, device and mapped pinned host buffers, streams,
// events, and the flattened memref descriptors of a kernel launch. Every
// failure throws Error with the driver's message; destructors release
// quietly.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDARESOURCES_H
#define DHS_RUNTIME_CUDA_CUDARESOURCES_H

#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/cuda/CudaDriver.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dhs::runtime::cuda_detail {

inline const CudaDriver &driver() { return CudaDriver::instance(); }

/// "[4,1,1]"
inline std::string formatDims(const std::array<unsigned, 3> &dims) {
  return "[" + std::to_string(dims[0]) + "," + std::to_string(dims[1]) + "," +
         std::to_string(dims[2]) + "]";
}

/// "1.5 MiB" style sizes for messages.
inline std::string formatBytes(std::size_t bytes) {
  if (bytes < (1u << 20))
    return std::to_string(bytes) + " bytes";
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

/// The primary context of a device, retained for the object's lifetime.
class PrimaryContext {
public:
  explicit PrimaryContext(CUdevice device) : device_(device) {
    driver().check(driver().devicePrimaryCtxRetain(&context_, device), "cuDevicePrimaryCtxRetain");
    makeCurrent();
  }
  ~PrimaryContext() {
    if (context_)
      driver().devicePrimaryCtxRelease(device_);
  }
  PrimaryContext(const PrimaryContext &) = delete;
  PrimaryContext &operator=(const PrimaryContext &) = delete;

  /// Makes the context current on the calling thread.
  void makeCurrent() const { driver().check(driver().ctxSetCurrent(context_), "cuCtxSetCurrent"); }

private:
  CUdevice device_;
  CUcontext context_ = nullptr;
};

/// A loaded module.
class Module {
public:
  Module(const std::vector<std::uint8_t> &cubin, const std::string &name) {
    driver().check(driver().moduleLoadData(&module_, cubin.data()),
                   "cuModuleLoadData(" + name + ")");
  }
  /// Compiles PTX text `ptx` with the driver's JIT as a whole program (at
  /// the highest optimization level) and loads it. Throws Error with the
  /// JIT's log.
  Module(const std::string &ptx, const std::string &name) {
    std::string log(8192, '\0');
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_OPTIMIZATION_LEVEL};
    void *values[] = {log.data(), reinterpret_cast<void *>(log.size()),
                      reinterpret_cast<void *>(std::uintptr_t{4})};
    CUresult result = driver().moduleLoadDataEx(&module_, ptx.c_str(), 3, options, values);
    if (result != CUDA_SUCCESS) {
      log.resize(log.find('\0') == std::string::npos ? log.size() : log.find('\0'));
      driver().check(result, "cuModuleLoadDataEx(" + name + ")" + (log.empty() ? "" : ": " + log));
    }
  }
  ~Module() {
    if (module_)
      driver().moduleUnload(module_);
  }
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  CUmodule get() const { return module_; }

private:
  CUmodule module_ = nullptr;
};

/// Device memory.
class DeviceBuffer {
public:
  DeviceBuffer(std::size_t bytes, const std::string &what) : bytes_(bytes) {
    // cuMemAlloc rejects 0 bytes; an empty tier still gets a valid address.
    const bool injected = DHS_FAULT(DeviceAlloc);
    CUresult result = injected ? CUDA_ERROR_OUT_OF_MEMORY
                               : driver().memAlloc(&ptr_, std::max<std::size_t>(bytes, 16));
    if (result == CUDA_ERROR_OUT_OF_MEMORY)
      throw CapacityError("out of GPU memory allocating " + formatBytes(bytes) + " for " + what +
                          (injected ? " (injected fault)" : ""));
    driver().check(result, "cuMemAlloc(" + formatBytes(bytes) + " for " + what + ")");
  }
  ~DeviceBuffer() {
    if (ptr_)
      driver().memFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  CUdeviceptr get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_;
};

/// Pinned host memory mapped into the device's address space.
class MappedHostBuffer {
public:
  MappedHostBuffer(std::size_t bytes, const std::string &what) {
    const bool injected = DHS_FAULT(HostAlloc);
    CUresult result =
        injected ? CUDA_ERROR_OUT_OF_MEMORY
                 : driver().memHostAlloc(&host_, std::max<std::size_t>(bytes, 16),
                                         CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    if (result == CUDA_ERROR_OUT_OF_MEMORY)
      throw CapacityError("out of pinned host memory allocating " + formatBytes(bytes) + " for " +
                          what + (injected ? " (injected fault)" : ""));
    driver().check(result, "cuMemHostAlloc(" + formatBytes(bytes) + " for " + what + ")");
    driver().check(driver().memHostGetDevicePointer(&device_, host_, 0),
                   "cuMemHostGetDevicePointer(" + what + ")");
  }
  ~MappedHostBuffer() {
    if (host_)
      driver().memFreeHost(host_);
  }
  MappedHostBuffer(const MappedHostBuffer &) = delete;
  MappedHostBuffer &operator=(const MappedHostBuffer &) = delete;
  void *host() const { return host_; }
  CUdeviceptr device() const { return device_; }

private:
  void *host_ = nullptr;
  CUdeviceptr device_ = 0;
};

/// A stream.
class Stream {
public:
  Stream() {
    driver().check(driver().streamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  ~Stream() {
    if (stream_)
      driver().streamDestroy(stream_);
  }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  CUstream get() const { return stream_; }

private:
  CUstream stream_ = nullptr;
};

/// An event.
class Event {
public:
  /// An event with `flags` (CU_EVENT_DISABLE_TIMING for one that only
  /// orders streams).
  explicit Event(unsigned flags = CU_EVENT_DEFAULT) {
    driver().check(driver().eventCreate(&event_, flags), "cuEventCreate");
  }
  ~Event() {
    if (event_)
      driver().eventDestroy(event_);
  }
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
  CUevent get() const { return event_; }

private:
  CUevent event_ = nullptr;
};

/// Enqueues `sources.size()` copies of `bytes` each, sources[i] to
/// destinations[i] (device addresses; mapped host memory included), on
/// `stream`: one cuMemcpyBatchAsync per 4096 copies where the driver has it,
/// else one cuMemcpyAsync each. The copies of a batch may run in any order,
/// so destinations must not overlap. `sizes` is the batches' size list
/// (kept by the caller between calls). `what` names them in errors.
inline void copyBatch(const std::vector<CUdeviceptr> &destinations,
                      const std::vector<CUdeviceptr> &sources, std::size_t bytes,
                      std::vector<std::size_t> &sizes, CUstream stream, std::string_view what) {
  const CudaDriver &cuda = driver();
  const std::size_t count = sources.size();
  if (!cuda.memcpyBatchAsync) {
    for (std::size_t i = 0; i < count; ++i)
      cuda.check(cuda.memcpyDtoDAsync(destinations[i], sources[i], bytes, stream), what);
    return;
  }
  constexpr std::size_t kBatch = 4096;
  sizes.assign(std::min(count, kBatch), bytes);
  CUmemcpyAttributes attributes{};
  // Sources are read in stream order (after the work submitted before).
  attributes.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  std::size_t firstWithAttributes = 0;
  for (std::size_t begin = 0; begin < count; begin += kBatch) {
    const std::size_t n = std::min(kBatch, count - begin);
    cuda.check(cuda.memcpyBatchAsync(const_cast<CUdeviceptr *>(destinations.data() + begin),
                                     const_cast<CUdeviceptr *>(sources.data() + begin),
                                     sizes.data(), n, &attributes, &firstWithAttributes, 1, stream),
               what);
  }
}

/// Enqueues one copy of `rows` rows of `width` bytes, row i from
/// `from + i * fromPitch` to `to + i * toPitch` (device addresses; mapped
/// host memory included): one cuMemcpy2DAsync, one node of a captured
/// graph, where a copy per row would be `rows` of them.
inline void copyRowsAsync(CUdeviceptr to, std::size_t toPitch, CUdeviceptr from,
                          std::size_t fromPitch, std::size_t width, std::size_t rows,
                          CUstream stream, const char *what) {
  if (rows == 0 || width == 0)
    return;
  const CudaDriver &cuda = driver();
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  copy.srcDevice = from;
  copy.srcPitch = fromPitch;
  copy.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  copy.dstDevice = to;
  copy.dstPitch = toPitch;
  copy.WidthInBytes = width;
  copy.Height = rows;
  cuda.check(cuda.memcpy2DAsync(&copy, stream), what);
}

/// `bytes` rounded up to a multiple of 256 (a stride between the groups'
/// parts of one buffer that keeps each part aligned as an allocation is).
inline std::size_t alignedStride(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
}

/// Row-major strides of a shape, in elements.
inline std::vector<std::int64_t> rowMajorStrides(const std::vector<std::int64_t> &sizes) {
  std::vector<std::int64_t> strides(sizes.size(), 1);
  for (std::size_t i = sizes.size(); i-- > 1;)
    strides[i - 1] = strides[i] * sizes[i];
  return strides;
}

/// The flattened memref descriptors of one launch: int64 values and the
/// void* array cuLaunchKernel takes (pointing into the values).
struct KernelParams {
  std::vector<std::int64_t> values;
  std::vector<void *> pointers;

  void addMemref(CUdeviceptr ptr, const std::vector<std::int64_t> &sizes) {
    values.push_back(static_cast<std::int64_t>(ptr)); // allocated
    values.push_back(static_cast<std::int64_t>(ptr)); // aligned
    values.push_back(0);                              // offset
    values.insert(values.end(), sizes.begin(), sizes.end());
    std::vector<std::int64_t> strides = rowMajorStrides(sizes);
    values.insert(values.end(), strides.begin(), strides.end());
  }

  /// Builds `pointers`; call once all values are in place.
  void finish() {
    pointers.clear();
    for (std::int64_t &value : values)
      pointers.push_back(&value);
  }
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDARESOURCES_H
