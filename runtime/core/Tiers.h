//===- Tiers.h - Tier storage, rings, and running a layer -------*- C++ -*-===//
//
// What the Runtime asks of a backend (CPU or CUDA), in three parts, each used
// by its own callers:
//  - TierStorage: the host store and the HBM pools of a TierLayout, row
//    copies between them, and the device residency state a placement step
//    keeps (requests, promotions, the invariant checker);
//  - StepRunner: runs a decode step's layers over the tiers (selections,
//    attention, step logs, CUDA graphs);
//  - RingStore: the draft rings and sliding-window rings of each request.
// makeCpuTiers and makeCudaTiers build all three; docs/runtime.md describes
// them. Row copies (promotions, appends) are carried out in stream order
// after the reads of the step that fetched them.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_TIERS_H
#define DHS_RUNTIME_CORE_TIERS_H

#include "runtime/core/Accept.h"
#include "runtime/core/Bf16.h"
#include "runtime/core/DeviceInfo.h"
#include "runtime/core/ProblemShape.h"
#include "runtime/core/TierLayout.h"
#include "runtime/residency/Residency.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dhs::runtime {

/// Where a step's time went, in milliseconds; -1 where not measured.
struct StepTimes {
  /// The device's span: from the start of the step's stream work to its
  /// status read (CUDA events).
  double device = -1.0;
  /// The host's calls that enqueued the step's work at its end (with CUDA
  /// graphs: the graph's launch).
  double launch = -1.0;
  /// Of `launch`, the cuGraphLaunch call alone (-1 without a graph).
  double graphLaunch = -1.0;
  /// The host waiting for the device to finish the step.
  double wait = -1.0;
};

struct Manifest;

/// Where step inputs and outputs live.
enum class MemorySpace {
  Host,   ///< host pointers
  Device, ///< device pointers (CUDA backend only)
};

/// The inputs of one layer's attention. Selections and history bounds are
/// padded to the step's batch B; queries and output hold only the first
/// `lanes` requests (the runner pads them).
struct LayerStep {
  const ProblemShape *shape = nullptr;        ///< B, Q, H, K, row layout, scale
  std::int64_t lanes = 0;                     ///< requests in queries / output
  const bf16_t *queries = nullptr;            ///< [lanes,Q,H,qk_dim] in `memory`
  MemorySpace memory = MemorySpace::Host;     ///< where queries and output are
  const std::int32_t *rowIds = nullptr;       ///< [B,Q,K] host
  const std::int32_t *slots = nullptr;        ///< [B,Q,K] host
  const std::int64_t *historyStart = nullptr; ///< [B] host
  const std::int32_t *historyLen = nullptr;   ///< [B] host
  bf16_t *output = nullptr;                   ///< [lanes,Q,H,v_dim] in `memory`
  /// Sliding window (steps with one): raw tokens of each lane's request [B]
  /// and the request index of each lane [B] (-1: padding), host memory.
  const std::int32_t *windowTokens = nullptr;
  const std::int32_t *laneRequests = nullptr;
  /// The group's selections were taken on the device (takeSelections):
  /// rowIds and slots are unused, the step's dhs.resolve computes the slots
  /// from the group's residency map.
  bool selectionsOnDevice = false;
  /// Of the group's selections (ids other than -1), how many the caller
  /// resolved and how many of those are not in HBM (host selections); -1:
  /// not counted (the tiers then go by what the group's last step logged).
  std::int64_t selectedRows = -1, missingRows = -1;
  /// Host output complete when attend returns (the step in parts: an engine
  /// computes the next layer's queries from it); otherwise, as in a whole
  /// step, when finishStep returns. Device output is stream-ordered either way.
  bool outputNow = false;
};

/// What a group's resolve kernel logged in a step (dhs.pool_log): the
/// distinct slots hit, the (lane, row id) pairs that missed, the valid
/// selections.
struct StepLog {
  std::vector<std::int32_t> hitSlots;
  std::vector<std::int32_t> misses; ///< [missCount x 2]
  std::int64_t entries = 0;
};

/// What CUDA-graph replay did so far (all zero without graphs).
struct TierGraphStats {
  std::uint64_t captures = 0; ///< steps captured into a (new) graph
  std::uint64_t replays = 0;  ///< steps run by replaying a captured graph
  /// Nodes of the graph captured last, by kind (0 when unknown).
  std::uint64_t nodes = 0, kernelNodes = 0, copyNodes = 0, memsetNodes = 0;
};

/// The host store [host_rows, P, row_bytes] (every row of every admitted
/// request) and the HBM pools [hbm_slots, P, row_bytes] (the resident
/// subset) of each pool of a TierLayout. Slot numbers are shared by all
/// layers of a layer group.
class TierStorage {
public:
  virtual ~TierStorage();

  /// "cpu" or "cuda on NVIDIA H200 (sm_90a)".
  virtual std::string describe() const = 0;
  /// The layout.
  virtual const TierLayout &layout() const = 0;
  /// A host-store row (pinned memory on CUDA). Reading it is always safe
  /// (the device never writes the store); the caller writes it only after
  /// waitForSubmittedWork, with nothing submitted since that reads the row.
  virtual std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) = 0;
  /// Waits for all work submitted to the device: nothing in flight reads
  /// the host store afterwards. Throws DeviceError when that work failed (a
  /// kernel's or a copy's asynchronous error surfaces here), so an update
  /// that writes host rows calls it before its first change.
  virtual void waitForSubmittedWork() = 0;
  /// Copies host rows into HBM slots in every layer of each copy's group,
  /// after all work already submitted. Entries with slot -1 are releases
  /// (the row left HBM): nothing to copy, but a device residency map (see
  /// setPlacementStep) records them.
  virtual void copyToHbm(const std::vector<RowCopy> &copies) = 0;
  /// Writes layer `layer`'s row `row` (row_bytes, host memory) into slot
  /// `slot` of the layer's pool, after all work already submitted: a verify
  /// step's pending rows, in ring slots no history row uses.
  virtual void writeSlot(std::int32_t layer, std::int32_t slot, const std::uint8_t *row) = 0;
  /// Takes a compiled placement step (examples/place_rows_step.mlir: one
  /// dhs.place_rows over a pool of this layout) and from then on carries
  /// out copyToHbm with its kernel, keeping per group on the device the
  /// residency map and the replacement state, both initialized from
  /// `controller` (its residency tables and slot recency), and, when the
  /// steps resolve on the device, a step log. The Runtime has checked the
  /// step. The CPU tiers keep nothing.
  virtual void setPlacementStep(const Manifest &manifest,
                                const ResidencyController &controller) = 0;
  /// Uploads the controller's replacement state over the device one (after
  /// a failed step whose kernels stamped hits the controller never booked).
  virtual void restoreRecency(const ResidencyController &controller) = 0;
  /// Group g's device replacement state as [hbm slots x 2] {last use,
  /// previous use} (a download that waits for submitted work), or nullptr
  /// where the steps keep none. For checks, not for steps.
  virtual const std::int32_t *recencySnapshot(std::int32_t group) = 0;
  /// Group g's device residency map as host-readable values [host rows]
  /// (a download that waits for submitted work), or nullptr without a
  /// placement step. For checks, not for steps.
  virtual const std::int32_t *residencyMapSnapshot(std::int32_t group) = 0;
  /// The HBM pool holding a layer as host-readable bytes [slots, P,
  /// row_bytes] (the CPU tier itself, or a download that waits for
  /// submitted work), valid until the next call. For checks, not for steps.
  virtual const std::uint8_t *hbmSnapshot(std::int32_t layer) = 0;
};

/// What one group's residency decisions on the device counted in a step
/// and the control words they left (StepRunner::decisionCounts).
struct DeviceDecisionCounts {
  DeviceStepCounts step;          ///< entries, hits, listed, promoted, released
  std::int32_t hand = 0;          ///< the CLOCK hand after the step
  std::int32_t freeCount = 0;     ///< free-stack entries left
  std::int64_t excess = 0;        ///< hot rows beyond their floors
  std::uint32_t noVictimStep = 0; ///< the victim-search memo
};

/// One layer group's appends for StepRunner::enqueueAging: the ones the
/// controller recorded for it (in call order; the list may be another
/// group's too) and the optional budget left before them (optional budget -
/// excess).
struct AgingReplay {
  std::int32_t group = 0;
  DeviceAppendList appends; ///< not empty
  std::int32_t budget = 0;
};

/// Runs a decode step's layers over the tiers: beginStep, per group its
/// selections (taken on the device, or resolved by the Runtime), per layer
/// attend, finishStep.
class StepRunner {
public:
  virtual ~StepRunner();

  /// True if step inputs may be device pointers.
  virtual bool acceptsDevicePointers() const = 0;
  /// True when the steps resolve selections on the device (they contain
  /// dhs.resolve) and a placement step keeps the residency maps there: then
  /// selections may stay in device memory (takeSelections).
  virtual bool resolvesOnDevice() const = 0;
  /// Takes group g's selections [count] (row ids, device memory) for the
  /// step in progress: the group's first layer copies them into the step's
  /// row_ids (padded with -1 to [B, Q, K]), so the buffer must hold them
  /// until the step ends. No host wait. Throws Error where unsupported.
  virtual void takeSelections(std::int32_t group, const std::int32_t *rowIds,
                              std::int64_t count) = 0;
  /// Group g's selections taken this step [B, Q, K], downloaded (after
  /// finishStep) for error messages and checks; steps never need them.
  virtual const std::int32_t *selectionsOnHost(std::int32_t group) = 0;
  /// Starts step `step` (the controller's step number) before any of its
  /// work: a device step log (see stepLog) is cleared and stamped with it.
  virtual void beginStep(std::uint32_t step) = 0;
  /// What group g's resolve kernel logged this step. Waits for the group's
  /// log only (the step's later layers may still run) where stepLogsEarly,
  /// else call it after finishStep. Throws Error without a device log or
  /// when it overflowed.
  virtual const StepLog &stepLog(std::int32_t group) = 0;
  /// True when stepLog may be called before finishStep.
  virtual bool stepLogsEarly() const = 0;
  /// Submits one layer's attention.
  virtual void attend(std::int32_t layer, const LayerStep &step) = 0;
  /// Waits for the step's work and checks its status; throws Error when the
  /// kernels rejected their input (the step decided nothing), and
  /// InvariantError when only the device's decisions failed, part-way.
  virtual void finishStep() = 0;
  /// Ends a step that failed before finishStep: waits for the work already
  /// enqueued and launches nothing more of it (no step graph, no
  /// decisions), so the step decides nothing. Never throws.
  virtual void abandonStep() = 0;
  /// Turns CUDA-graph replay of whole steps on or off (between steps).
  /// Throws Error on a backend without graphs (the CPU's, an old driver).
  virtual void setGraphs(bool on) = 0;
  /// Orders the steps' device work with an engine's CUDA stream (a CUstream
  /// of the device's primary context; nullptr: none): each layer's work,
  /// and a CUDA-graph step's launch, runs after the work enqueued on it
  /// before, and the work enqueued on it after a layer runs after that
  /// layer's, all on the device (no host waits). Throws StateError for a
  /// stream on a backend without streams (the CPU's).
  virtual void setEngineStream(void *stream);
  /// True while steps run as CUDA graphs.
  virtual bool graphsOn() const = 0;
  /// Graph captures and replays so far.
  virtual TierGraphStats graphStats() const = 0;
  /// The device the steps run on (nullptr on the CPU).
  virtual const DeviceInfo *device() const = 0;
  /// The attention steps' kernels, launch by launch, step by step (none on
  /// the CPU).
  virtual std::vector<KernelInfo> kernels() const = 0;
  /// Bytes of the staging arena allocated for the steps (the largest the
  /// compiler planned among them), 0 without one.
  virtual std::int64_t arenaBytes() const = 0;
  /// Rows the fetch launches of the last layer run copied from the host
  /// store (see countFetchedRows in CudaStep.h), downloaded after the
  /// submitted work; -1 when the steps have no fetch launch (fused
  /// retrieval) or on the CPU. For checks, not for steps.
  virtual std::int64_t fetchedRows() = 0;
  /// Host-store rows (tokens of the layer's pool) layer `layer`'s attention
  /// read in the step in progress or the last one: the CPU stages each
  /// distinct missing row of a lane once (shared retrieval) and counts them;
  /// -1 where not counted (CUDA).
  virtual std::int64_t hostRowsRead(std::int32_t layer) = 0;
  /// Layers of the step in progress or the last one whose attention ran
  /// its resident form (Launch::residentKernel; 0 on the CPU, which has one).
  virtual std::int64_t residentFormLayers() const { return 0; }
  /// The form share layer `layer`'s launches ran at in the step in progress
  /// or the last one (LaunchForms.h; 1 for a layer of one form).
  virtual double formShare(std::int32_t layer) const = 0;
  /// Takes a compiled accept step (one dhs.accept launch; the Runtime has
  /// checked its shapes). The CPU keeps nothing.
  virtual void setAcceptStep(const Manifest &manifest, AcceptRule rule) = 0;
  /// Runs acceptance with the accept step taken for problem.rule (its batch
  /// of B requests at least problem.batch, its gamma and vocabulary
  /// problem's): true and the results, waiting for them; false where there
  /// is none (the Runtime runs the rule on the host). Throws Error when the
  /// kernel fails.
  virtual bool accept(const AcceptProblem &problem, std::int32_t *accepted, std::int32_t *next) = 0;
  /// Takes a compiled top-k step (one dhs.topk launch whose PTX is there;
  /// the Runtime has checked its shapes). The CPU keeps nothing.
  virtual void setTopKStep(const Manifest &manifest) = 0;
  /// Runs the top-k step taken for `batch` lanes (the Runtime has checked
  /// the arguments): true and rows [batch][Q][K], waiting for them; false
  /// where there is none (the Runtime selects on the host: the same rows).
  /// Throws Error when the kernel fails.
  virtual bool topK(std::int64_t batch, const float *scores, const std::int32_t *historyLen,
                    std::int32_t *rows) = 0;
  /// Rows the fetch launches copied from the host store for layer group
  /// `group` in the last step (a whole-model step fetches a group's miss
  /// plan once for its layers; a shared retrieval each distinct missing row
  /// once), -1 when they did not run or were not counted (CUDA counts them
  /// while setCountFetches is on). For checks, after finishStep.
  virtual std::int64_t groupFetchedRows(std::int32_t group) = 0;
  /// Turns counting the fetch launches' rows on or off (between steps; the
  /// CPU always counts: its fetches are host code).
  virtual void setCountFetches(bool on) = 0;
  /// Where the last finished step's time went (-1 on the CPU or before a
  /// step).
  virtual StepTimes lastStepTimes() const { return {}; }

  // Residency decisions on the device (CUDA with resolving steps and a
  // placement step; the CPU decides on the host and throws StateError).

  /// Takes a compiled decision step (examples/decision_step.mlir; the
  /// Runtime checked it against the residency config): a step with
  /// setStepDecisions on ends with every group's promotions and releases
  /// decided and placed on the device. `copyLists`: each group's place list
  /// comes back too (for the invariant checker). Throws InputError where the
  /// steps do not resolve on a device or the shapes differ.
  virtual void setDecisionStep(const Manifest &manifest, bool copyLists);
  /// True once a decision step is taken.
  virtual bool decidesOnDevice() const { return false; }
  /// Whether the next steps end with the decisions (between steps).
  virtual void setStepDecisions(bool on);
  /// Uploads group g's device state (tables and replacement state) and the
  /// optional budget left for its next plan (between steps).
  virtual void uploadDecisionState(std::int32_t group, const DeviceGroupState &state,
                                   std::int32_t budget);
  /// Downloads group g's device state (tables and replacement state).
  virtual void downloadDecisionState(std::int32_t group, DeviceGroupState &state);
  /// The optional budget left that group g's next plan reads.
  virtual void setDecisionBudget(std::int32_t group, std::int32_t budget);
  /// What group g's decisions counted in the last step (after finishStep).
  virtual DeviceDecisionCounts decisionCounts(std::int32_t group) const;
  /// Group g's place list of the last step (PromotionPlanLayout), where the
  /// decision step copies them.
  virtual void decisionList(std::int32_t group, std::vector<std::int64_t> &rows,
                            std::vector<std::int32_t> &slots) const;
  /// Puts every group's replacement state back to the step's start (after a
  /// failed step, whose decisions did nothing).
  virtual void rollBackDecisions();
  /// Takes a compiled aging step (examples/aging_step.mlir): the appends
  /// recorded for device-owned groups are then replayed on the device.
  virtual void setAgingStep(const Manifest &manifest);
  /// Enqueues the replay of each group's recorded appends (at most one
  /// replay a group; the groups' replays may run side by side, see
  /// CudaDecisions::enqueueAging).
  virtual void enqueueAging(const std::vector<AgingReplay> &replays);
  /// The new rows' slots of the last replay of group g's `count` appends,
  /// after waitForAging.
  virtual std::vector<std::int32_t> agedSlots(std::int32_t group, std::size_t count) const;
  /// Waits for the replays; throws Error when a kernel reported bad state.
  virtual void waitForAging();
};

/// Per admitted request (by its controller index): draft rings, per layer
/// group a ring of W_draft tokens of draftTokenBytes(), and sliding-window
/// rings, per pool R raw tokens of P layers x row_bytes (raw token p in slot
/// p mod R), both in memory of their own (host memory on the CPU, device
/// memory on CUDA), never in the pools. Draft positions are logical token
/// positions; token p lives in ring slot p mod W_draft. The Runtime checks
/// ids, sizes and positions first.
class RingStore {
public:
  virtual ~RingStore();

  /// Takes the compiled draft-ring step whose kernels do the ring work
  /// (CUDA); the Runtime has checked its shapes. The CPU rings keep nothing.
  virtual void setDraftStep(const Manifest &manifest) = 0;
  /// Allocates (zeroed) the draft rings of request index `index`, one per
  /// group. Throws CapacityError when memory is short (nothing kept).
  virtual void allocateDraftRings(std::int32_t index) = 0;
  /// Frees the draft rings of request index `index` (none: no effect).
  virtual void freeDraftRings(std::int32_t index) = 0;
  /// Writes `count` (<= W_draft) tokens [count][draftTokenBytes()] (host
  /// memory) at positions position .. position+count-1 of group `group`'s
  /// ring of request index `index`.
  virtual void writeDraft(std::int32_t index, std::int32_t group, std::int64_t position,
                          std::int64_t count, const std::uint8_t *tokens) = 0;
  /// Reads the `count` (<= W_draft) tokens at positions end-count .. end-1
  /// of a ring into `tokens` [count][draftTokenBytes()] (host memory).
  virtual void readDraft(std::int32_t index, std::int32_t group, std::int64_t end,
                         std::int64_t count, std::uint8_t *tokens) = 0;

  /// Allocates (zeroed) the window rings of request index `index`
  /// (layout().windowRing > 0). Throws CapacityError when memory is short
  /// (nothing kept).
  virtual void allocateWindowRings(std::int32_t index) = 0;
  /// Frees them (none: no effect).
  virtual void freeWindowRings(std::int32_t index) = 0;
  /// Writes `count` (<= R) raw tokens [count][L][row_bytes] (host memory) at
  /// positions position .. position+count-1 of request index `index`'s
  /// rings, after the work already submitted.
  virtual void writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                           const std::uint8_t *tokens) = 0;
};

/// A session's tiers: the storage, its rings and the runner over both
/// (destroyed in that reverse order: the runner first).
struct Tiers {
  std::unique_ptr<TierStorage> storage;
  std::unique_ptr<RingStore> rings;
  std::unique_ptr<StepRunner> runner;
};

/// The CPU tiers: host vectors; the steps' launches run on the host with
/// their kernels' semantics (CpuLaunches.h; attention in float on `threads`
/// threads). `steps` as for makeCudaTiers, or one whole-model step.
Tiers makeCpuTiers(const TierLayout &layout, const std::vector<const Manifest *> &steps,
                   unsigned threads);

/// The CUDA tiers on device `ordinal` for a step (linked and loaded from the
/// manifests' PTX). `stepsByLayer[i]` is the step compiled for layer i of a
/// pool (its kernels read that layer of the pool's token): one step when
/// the pools hold one layer, else exactly layersPerPool steps, all with the
/// same arguments. Throws Error when CUDA is unavailable, the steps do not
/// fit the layout, or memory is short.
Tiers makeCudaTiers(const TierLayout &layout, const std::vector<const Manifest *> &stepsByLayer,
                    int ordinal);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_TIERS_H
