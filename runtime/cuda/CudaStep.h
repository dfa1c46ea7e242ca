//===- CudaStep.h - Run a compiled step on a GPU ----------------*- C++ -*-===//
//
// Runs a step's kernels on CUDA device 0 (or another ordinal) through the
// driver API: links each PTX file with nvJitLink for the device's
// architecture, loads the cubins, allocates the KV tiers (HBM slots with
// cuMemAlloc, the host store pinned and mapped for zero-copy reads), uploads
// a problem, poisons the output, launches in manifest order on one stream,
// checks the status word and that every output element was written, times
// repetitions with CUDA events and downloads the output. Everything it
// allocates is freed when the objects holding it go out of scope.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDASTEP_H
#define DHS_RUNTIME_CUDA_CUDASTEP_H

#include "runtime/core/Bf16.h"
#include "runtime/core/DeviceInfo.h"
#include "runtime/core/LaunchForms.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace dhs::runtime {

namespace cuda_detail {
class CudaQueue;
} // namespace cuda_detail

/// The nvJitLink architecture for a compute capability: "sm_" + major +
/// minor, plus "a" when major == 9 (wgmma and other sm_90a features).
std::string archForDevice(int major, int minor);

/// Rows the fetch launches of a step copied from the host store in its last
/// run, at form share `formShare` (LaunchForms.h): the entries of each
/// fetch's row list that are not -1 and, for a fetch of selections with
/// their slots (7 parameters), not resident (a union's list marks each
/// distinct missing row once); -1 when no fetch launch ran. `rowList(param)`
/// gives the i32 values of a fetch's first parameter, `slots()` the step's
/// slots [B,Q,K].
std::int64_t
countFetchedRows(const Manifest &manifest, double formShare,
                 const std::function<std::vector<std::int32_t>(const LaunchParam &)> &rowList,
                 const std::function<std::vector<std::int32_t>()> &slots);

/// How to run a step.
struct CudaRunOptions {
  int warmup = 1;  ///< untimed runs before timing
  int repeat = 10; ///< timed runs (0: no timing)
  /// Validate inputs on the host first (turn off only to test the kernels'
  /// own status checks).
  bool validateInputs = true;
  /// The share of selected rows missing from HBM whose form runs
  /// (LaunchForms.h); negative: the problem's own. Benchmarks time a form at
  /// shares it would not be chosen for.
  double missingShare = -1.0;
};

/// What a run produced.
struct CudaRunResult {
  std::vector<bf16_t> output;   ///< [B,Q,H,v_dim] from the checked run
  std::vector<double> timesMs;  ///< per timed repetition, whole step
  double medianMs = 0.0;        ///< median of timesMs (0 if not timed)
  bool repeatsIdentical = true; ///< the output after timing equals the first bit for bit
  /// Rows the step's fetch launches copied from the host store into staging
  /// (-1: the step has no fetch; missing rows were read by attention itself).
  std::int64_t fetchedRows = -1;
  /// The form share the launches ran at (formShare, LaunchForms.h).
  double formShare = 1.0;
  /// An attention launch ran its resident form (Launch::residentKernel):
  /// at most kResidentFormMissing of the problem's selected rows were
  /// missing from HBM, or CudaRunOptions::missingShare forced that form.
  bool residentForm = false;
};

/// Persistent device memory of a step that its owner (the runtime's CUDA
/// tiers) keeps between runs: a buffer per memref argument, the two pool
/// tiers and the status word.
struct CudaStepBuffers {
  std::vector<CUdeviceptr> arguments; ///< by manifest argument index (the pool's unused)
  CUdeviceptr hbm = 0;                ///< the HBM tier [hbm_slots, layers, row_bytes]
  std::int64_t hbmSlots = 0;          ///< its slots
  CUdeviceptr host = 0;               ///< the mapped host store, device address
  std::int64_t hostRows = 0;          ///< its rows
  CUdeviceptr map = 0;                ///< the pool's residency map [host_rows] i32
  CUdeviceptr recency = 0;            ///< its replacement state [hbm_slots, 2] i32
  CUdeviceptr log = 0;                ///< its step log (StepLogLayout)
  std::int64_t logWords = 0;          ///< the log's words (0: record nothing)
  /// Its write-back ring [entries, layers, row_bytes] (0 entries: the misses
  /// are read from the host store again when placed).
  CUdeviceptr writeBack = 0;
  std::int64_t writeBackRows = 0;
  CUdeviceptr status = 0;             ///< the status word (u32)
  CUdeviceptr arena = 0;              ///< the staging arena (manifest arena_bytes)
  /// A grouped launch's table (Launch::isGrouped, CudaStep::groupBindings):
  /// [groups, params] i64 in device-readable memory, `groups` CTAs along the
  /// grid's z; 0: the launch's own group only.
  CUdeviceptr groupBindings = 0;
  std::int64_t groups = 1;
  /// The form the launches take (formShare, LaunchForms.h): those whose
  /// band holds it run, resident kernels at or below kResidentFormMissing
  /// (1: the forms for the most rows missing, all a step without forms has).
  double formShare = 1.0;
};

/// A step loaded on a device. Throws Error (with the driver's or
/// nvJitLink's message) from every operation that fails.
class CudaStep {
public:
  /// Initializes device `ordinal` (its primary context), links every PTX of
  /// the manifest for the device's architecture and loads the kernels. The
  /// manifest must have been loaded with requirePtx.
  explicit CudaStep(const Manifest &manifest, int ordinal = 0);
  ~CudaStep();

  CudaStep(const CudaStep &) = delete;
  CudaStep &operator=(const CudaStep &) = delete;

  /// The device.
  const DeviceInfo &device() const;

  /// The step's manifest.
  const Manifest &manifest() const;

  /// The loaded kernels, one per launch.
  const std::vector<KernelInfo> &kernels() const;

  /// Runs the step on a problem (its shape must match the manifest: B, Q, H,
  /// K, row format and any pool size the manifest fixes). Throws InputError
  /// for inputs rejected on the host, Error for anything else: a nonzero
  /// status word, output elements left unwritten or NaN, driver errors.
  CudaRunResult run(const SparseAttentionProblem &problem, const CudaRunOptions &options = {});

  /// Enqueues the step's launches, in manifest order, on `stream` over
  /// `buffers`; no synchronization, no checks of the data. Throws Error if a
  /// launch cannot be enqueued.
  void launchAsync(const CudaStepBuffers &buffers, CUstream stream) const;
  /// Enqueues launches [first, first + count) of the manifest only (a part
  /// of a step, e.g. a draft-ring step's append or read pair). Throws Error
  /// for a range outside the manifest's launches or a failed launch.
  void launchAsync(const CudaStepBuffers &buffers, CUstream stream, std::size_t first,
                   std::size_t count) const;

  /// The table that runs grouped launch `launch` over `groups` (CTA z over
  /// groups[z]'s buffers), [groups x params] row-major: the byte distance of
  /// each parameter's buffer for group z from groups[0]'s, which the launch
  /// is then given (with the table, in device-readable memory, as
  /// CudaStepBuffers::groupBindings). Throws Error when the launch is not
  /// grouped, or the groups' buffers differ in anything but their
  /// addresses (shapes, a misaligned distance).
  std::vector<std::int64_t> groupBindings(std::size_t launch,
                                          const std::vector<CudaStepBuffers> &groups) const;

  /// Makes the device's primary context current on the calling thread.
  void makeCurrent() const;

  /// A device-to-host copy that a run of a one-kernel step ends with.
  struct Download {
    void *host;
    CUdeviceptr device;
    std::size_t bytes;
    const char *what; ///< for the error message, e.g. "top-k rows"
  };
  /// Runs a step of one kernel (accept, top-k) on `queue`'s stream over
  /// `buffers` and waits: clears the status word, launches, downloads
  /// `downloads` and the status word. Throws Error when a copy or the launch
  /// fails, DeviceError naming `kernel` when the kernel reported a status.
  void runAndWait(const CudaStepBuffers &buffers, cuda_detail::CudaQueue &queue,
                  std::initializer_list<Download> downloads, const std::string &kernel) const;

private:
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CUDA_CUDASTEP_H
