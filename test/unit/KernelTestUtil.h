//===- KernelTestUtil.h - One generated kernel step run on a GPU -*- C++ -*-===//
//
// What the kernel tests (AcceptTest, DraftRingTest, PlaceRowsTest,
// ResolveTest, TopKTest) share: a compiled kernel step loaded on device 0,
// the device buffers of one run made from host data, its launch, and the
// buffers read back.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TEST_UNIT_KERNELTESTUTIL_H
#define DHS_TEST_UNIT_KERNELTESTUTIL_H

#include "TestUtil.h"

#include "runtime/core/Manifest.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace dhs::test {

/// The compiled step `name` of a kernel test (its launches `kinds`, checked
/// as kernelStepOrSkip does) when a GPU is usable too; nothing after saying
/// that the test is skipped.
inline std::optional<runtime::Manifest>
gpuKernelStepOrSkip(const std::string &name,
                    std::initializer_list<runtime::abi::LaunchKind> kinds) {
  std::optional<runtime::Manifest> manifest = kernelStepOrSkip(name, kinds);
  if (!manifest || !gpuOrSkip())
    return std::nullopt;
  return manifest;
}

/// Declares `manifest`, the compiled step `name` of a kernel test whose
/// launches are the kinds that follow, or ends the test case where the
/// compiler or a GPU is missing, saying that it is skipped.
#define DHS_GPU_KERNEL_STEP(manifest, name, ...)                                                   \
  const std::optional<::dhs::runtime::Manifest> manifest##OrSkipped =                              \
      ::dhs::test::gpuKernelStepOrSkip(name, {__VA_ARGS__});                                       \
  if (!manifest##OrSkipped)                                                                        \
    return;                                                                                        \
  const ::dhs::runtime::Manifest &manifest = *manifest##OrSkipped

/// One run of a compiled kernel step on device 0: the step, loaded and
/// current; the device buffers made for the run (owned here); a status word
/// set to 0; and `buffers`, the step's buffers, which the test completes.
class KernelRun {
public:
  explicit KernelRun(const runtime::Manifest &manifest) : step(manifest, 0) {
    step.makeCurrent();
    stream.emplace();
    buffers.status = filled(1, 0, "status");
  }

  /// A new device buffer of `bytes` bytes, left as the allocator gives it.
  CUdeviceptr allocate(std::size_t bytes, const char *name) {
    owned.push_back(std::make_unique<runtime::cuda_detail::DeviceBuffer>(bytes, name));
    return owned.back()->get();
  }
  /// A new device buffer of `words` 32-bit words, each `value`.
  CUdeviceptr filled(std::size_t words, std::uint32_t value, const char *name) {
    CUdeviceptr buffer = allocate(words * 4, name);
    cuda().check(cuda().memsetD32(buffer, value, words), name);
    return buffer;
  }
  /// A new device buffer holding `data`.
  template <typename T> CUdeviceptr upload(const std::vector<T> &data, const char *name) {
    const std::size_t bytes = data.size() * sizeof(T);
    CUdeviceptr buffer = allocate(bytes, name);
    cuda().check(cuda().memcpyHtoD(buffer, data.data(), bytes), name);
    return buffer;
  }
  /// Copies `data` into `buffer`, a buffer of this run at least as large.
  template <typename T>
  void write(CUdeviceptr buffer, const std::vector<T> &data, const char *name) {
    cuda().check(cuda().memcpyHtoD(buffer, data.data(), data.size() * sizeof(T)), name);
  }
  /// upload(), appended to the step's arguments (in manifest order).
  template <typename T> CUdeviceptr argument(const std::vector<T> &data, const char *name) {
    buffers.arguments.push_back(upload(data, name));
    return buffers.arguments.back();
  }

  /// Enqueues the step's launches over `buffers` on the run's stream.
  void enqueue() { step.launchAsync(buffers, stream->get()); }
  /// Waits for what was enqueued; `what` names it in an error.
  void wait(const char *what) { cuda().check(cuda().streamSynchronize(stream->get()), what); }
  /// enqueue(), then wait().
  void launch(const char *what) {
    enqueue();
    wait(what);
  }

  /// The `count` values of T that `buffer` holds.
  template <typename T>
  std::vector<T> download(CUdeviceptr buffer, std::size_t count, const char *name) const {
    std::vector<T> values(count);
    cuda().check(cuda().memcpyDtoH(values.data(), buffer, count * sizeof(T)), name);
    return values;
  }
  /// The status word.
  std::uint32_t status() const {
    return download<std::uint32_t>(buffers.status, 1, "status").front();
  }

  runtime::CudaStep step;
  runtime::CudaStepBuffers buffers;

private:
  static const runtime::CudaDriver &cuda() { return runtime::CudaDriver::instance(); }

  std::vector<std::unique_ptr<runtime::cuda_detail::DeviceBuffer>> owned;
  std::optional<runtime::cuda_detail::Stream> stream; // made once the step is current
};

} // namespace dhs::test

#endif // DHS_TEST_UNIT_KERNELTESTUTIL_H
