//===- Mixes.h - dhs-run's residency mixes ----------------------*- C++ -*-===//
//
// Runs the generated problem at each residency mix: through the Runtime (the
// main job), or, for --no-host-check, on the step's kernels directly.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_TOOLS_DHSRUN_MIXES_H
#define DHS_TOOLS_DHSRUN_MIXES_H

#include "runtime/Runtime.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaStep.h"
#include "tools/dhs-run/Options.h"

#include <memory>
#include <vector>

namespace dhs::tools {

/// Results of one residency mix.
struct MixResult {
  double residency = 0.0;
  runtime::ProblemStats stats; ///< selections as the step read them
  double medianMs = 0.0;
  std::vector<double> timesMs;
  bool timed = false;
  runtime::Comparison check;
  bool pass = false;
  bool repeatsIdentical = true;
  std::vector<runtime::bf16_t> output; ///< the checked layers' outputs, one after another
  /// Rows the step's fetches copied from the host (-1: no fetch, or the CPU).
  std::int64_t fetchedRows = -1;
  /// The attention ran its resident form (CUDA; through the runtime: in
  /// some layer of the kept step).
  bool residentForm = false;
  /// The form share the first layer's launches ran at (LaunchForms.h).
  double formShare = 1.0;
  /// The runtime's counts of the step (distinct rows; absent on the kernels).
  bool throughRuntime = false;
  runtime::ResidencyStepStats runtimeStats;
  std::int64_t warmPromoted = 0; ///< rows the warm-up step promoted
};

/// Corrupts one input as asked (after residency was applied).
void injectError(runtime::SparseAttentionProblem &p, Injection kind);

/// The generated problem run through a Runtime over the steps of one layer
/// group (layers = the pool's layers, one group): per mix, the problem's
/// requests are admitted with their histories (and window tokens), a
/// warm-up step selects the rows to make resident so that the residency
/// controller promotes them, the step runs (timed steps first on a GPU,
/// their promotions withheld), and the requests finish.
class RuntimeMixes {
public:
  /// Loads the steps; `checkedLayers` are the layers whose steps were given
  /// (the CPU runs every layer from any of them). Throws Error.
  RuntimeMixes(const Options &options, const std::vector<runtime::Manifest> &manifests,
               const runtime::SparseAttentionProblem &problem, runtime::BackendKind backend);

  /// The runtime.
  runtime::Runtime &runtime() { return runtime_; }
  /// The layers whose outputs are checked.
  const std::vector<std::int32_t> &checkedLayers() const { return checkedLayers_; }
  /// Runs one mix on `problem` (the generated one; its slots end up
  /// mirroring the runtime's residency). Throws InputError for an input
  /// the injection made invalid.
  MixResult run(double fraction, runtime::SparseAttentionProblem &problem);

private:
  void admitRequests();
  /// One step over all requests: kept (endStep), or abandoned (no
  /// promotions) when `keep` is false.
  void step(const std::vector<std::int32_t> &rowIds, bool keep);
  /// The checked layers' outputs of the last step.
  std::vector<runtime::bf16_t> checkedOutput() const;

  const Options &options_;
  const runtime::SparseAttentionProblem &generated_;
  runtime::Runtime runtime_;
  std::int32_t layers_ = 1;
  std::vector<std::int32_t> checkedLayers_;
  std::vector<std::uint64_t> ids_;
  std::vector<runtime::bf16_t> queries_; // [L][B,Q,H,qk_dim]
  std::vector<runtime::bf16_t> output_;  // [L][B,Q,H,v_dim]
};

/// The problem run on the step's kernels directly (--no-host-check on a GPU):
/// residency applied to the problem's own slot map, no host validation.
MixResult runOnKernels(runtime::CudaStep &step, const Options &options, double fraction,
                       runtime::SparseAttentionProblem &problem);

} // namespace dhs::tools

#endif // DHS_TOOLS_DHSRUN_MIXES_H
