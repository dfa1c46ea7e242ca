//===- CudaDecisions.h - A step's residency decisions on a device -*- C++ -*-===//
//
// Internal to the CUDA tiers. Once a decision step is loaded
// (Runtime::loadDecisionStep: dhs.union_missing, dhs.sort_rows,
// dhs.plan_promotions and dhs.place_rows, examples/decision_step.mlir),
// each layer group keeps its hot-row table, CLOCK stamps, free stack and
// control words on the device, and a step's promotions and releases are
// decided and carried out there: after its layers, each group's selections
// and slots are saved; after the step's last layer, every group's decision
// launches run, all on the queue's stream (the one-CTA kernels of up to
// kDecisionLanes groups in one grouped launch, a CTA a group), and the
// control words and log headers come back to pinned memory through the
// queue's exchange (CudaExchange.h). The host reads counts only.
// docs/runtime.md describes it.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_CUDADECISIONS_H
#define DHS_RUNTIME_CUDA_CUDADECISIONS_H

#include "runtime/abi/Contract.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/Tiers.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/CudaPlacement.h"
#include "runtime/cuda/CudaQueue.h"
#include "runtime/cuda/CudaResources.h"
#include "runtime/cuda/CudaStep.h"
#include "runtime/residency/Residency.h"

#include <array>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace dhs::runtime::cuda_detail {

/// What a group's decisions left after a step: its control words and the
/// header of its step log (StepLogLayout).
struct DecisionCounts {
  const std::int32_t *control = nullptr; ///< [PromotionPlanLayout::kWords]
  const std::int32_t *log = nullptr;     ///< [StepLogLayout::kHeader]
};

/// The decision step of a runtime's CUDA tiers and every group's tables.
class CudaDecisions {
public:
  /// Loads the decision step (its selections, slots and history bounds
  /// must have the shape of the attention steps' `selections`), allocates
  /// each group's tables and inputs and the tables of its grouped plans over
  /// `placement`'s buffers (the runtime's, for its life).
  CudaDecisions(const Manifest &manifest, const TierLayout &layout,
                std::shared_ptr<CudaQueue> queue, const CudaPlacement &placement);
  ~CudaDecisions();

  /// Uploads group g's tables (hot rows, CLOCK stamps, free stack and the
  /// control words; not the replacement state, which CudaPlacement holds)
  /// and `budget`, the optional budget left (between steps).
  void upload(std::int32_t group, const DeviceGroupState &state, std::int32_t budget);
  /// Downloads group g's tables into `state` (waits for the stream).
  void download(std::int32_t group, DeviceGroupState &state);
  /// Sets the free budget word (PromotionPlanLayout::kFreeBudget) group g's
  /// plan reads in the next step (a word of the queue's exchange).
  void setBudget(std::int32_t group, std::int32_t budget);

  /// Enqueues the step's first work: each group's budget word (from the
  /// exchange's mirror: the caller copied the exchange to the device
  /// first), and a copy of each group's replacement state to roll back to
  /// (see rollBack).
  void enqueueBegin(const CudaPlacement &placement);
  /// Where one of a group's decision inputs is after its last layer: a
  /// device address, copied into the group's own buffer now (`copy`: a
  /// later group's layers reuse it), else read in place by this step's
  /// decisions (it holds the group's values until they run).
  struct DecisionInput {
    CUdeviceptr address = 0;
    bool copy = true;
  };
  /// Where a step's decisions read a group's inputs in place: its
  /// selections, slots, history starts and write-back ring entries (0:
  /// from the group's own copy).
  using DecisionInputs = std::array<CUdeviceptr, 4>;
  /// Enqueues the saving of group g's selections, slots and history starts
  /// (or notes where this step's decisions read them) after its last layer,
  /// and notes where its write-back ring entries are (read in place; none
  /// when 0 or the decision step takes none).
  void enqueueInputs(std::int32_t group, DecisionInput rowIds, DecisionInput slots,
                     DecisionInput historyStart, DecisionInput writeBack);
  /// Enqueues every group's decisions over its pools, then the copies of
  /// the counts (and, with `lists`, of the place lists) to pinned memory:
  /// the step's last work, it copies the exchange back to the host.
  /// Every launch reads `status` first (a copy per lane, see takeStatus):
  /// a failed step decides nothing. All on the queue's stream: rounds of up
  /// to kDecisionLanes groups, each group of a round on its lane's scratch,
  /// the round's plans one grouped launch.
  /// With `whole` (the stream is not being captured into a step's graph,
  /// and the driver has graphs) it is captured as a graph, replayed while
  /// its inputs' addresses repeat, so that it is enqueued whole or not at
  /// all: a launch failing among the groups' leaves none decided.
  void enqueueDecisions(const CudaPlacement &placement, const CudaPools &pools, CUdeviceptr status,
                        bool lists, bool whole);
  /// The OR of the decision lanes' status words after the last
  /// enqueueDecisions (0: fine, or no decisions since the last call; call
  /// once the stream finished them and is idle).
  std::uint32_t takeStatus();
  /// Notes that a step's graph holding decisions was launched: a replay
  /// enqueues what an earlier enqueueDecisions captured without calling it,
  /// and its lanes' status words come back all the same (takeStatus).
  void noteGraphLaunched() { statusPending_ = true; }
  /// Where a test armed Fault::BadState: enqueues a write of a CLOCK hand
  /// outside the slots into group 0's control words, which its
  /// plan_promotions launch must reject (kStatusBadSlot). Before a step's
  /// decisions, outside its graph.
  void injectCorruptState();
  /// Group g's counts after the step (valid once the stream finished it).
  DecisionCounts counts(std::int32_t group) const;
  /// Group g's place list (rows then slots, PromotionPlanLayout::entries),
  /// when the last enqueueDecisions copied the lists.
  std::pair<const std::int64_t *, const std::int32_t *> placeList(std::int32_t group) const;
  /// Entries of a place list.
  std::size_t listEntries() const { return entries_; }
  /// Copies every group's replacement state back from its copy of the
  /// step's start (a failed step; waits for the stream).
  void rollBack(const CudaPlacement &placement);

  /// Loads the aging step (dhs.age_rows then dhs.place_rows,
  /// examples/aging_step.mlir): the appends recorded between steps are then
  /// replayed on the device over the groups' tables.
  void setAgingStep(const Manifest &manifest);
  /// True once an aging step is loaded.
  bool aging() const { return aging_ != nullptr; }
  /// Enqueues each replay's group's appends (in call order, in chunks of
  /// the step's N; written into the queue's exchange as recorded, a
  /// DeviceAppend being the kernel's list entry) and their placement, after
  /// writing the group's budget word (optional budget - excess before
  /// them); the new rows' slots come back through the exchange (agedSlots,
  /// once the queue's stream finished them). A group is replayed once at most. All on the
  /// queue's stream: chunk c of every replay that has one in one grouped
  /// age_rows launch (a CTA a group, each group with its own place list and
  /// status word; replays of the same recorded appends, as the controller
  /// records them for all device-owned groups, read one list, written and
  /// copied once), then their placements. The budget words, lists and slots
  /// of consecutive groups go in one copy each (from and to the exchange's
  /// mirror). The host does not wait, except before the first replay that
  /// outgrows the exchange's parts or needs a new grouped table. Where the driver has CUDA graphs
  /// (whether or not the steps use them), all of it is captured as a graph, replayed while the
  /// replays' groups and chunk counts repeat (the exchange's copy reads the lists and budget words
  /// from pinned memory when it runs), so that it is enqueued whole or not at all: a launch that
  /// fails among the replays leaves every group unreplayed, to be replayed at the next call.
  /// (Without graphs the launches go one by one, and a failure among them
  /// leaves the chunks before it replayed.)
  /// With `deferred` the replays wait in the exchange: the step's graph
  /// takes them ahead of its own work (queuedAging, submitAging), one launch
  /// for both, or flushAging enqueues them alone.
  void enqueueAging(const std::vector<AgingReplay> &replays, const CudaPlacement &placement,
                    const CudaPools &pools, bool deferred);
  /// A replay's group, its chunks of appends, and the group whose list
  /// holds them (replays of the same recorded appends share one list).
  struct AgingReplayShape {
    std::int32_t group = 0;
    std::size_t chunks = 0;
    std::int32_t list = 0;
    bool operator==(const AgingReplayShape &o) const {
      return group == o.group && chunks == o.chunks && list == o.list;
    }
    bool operator!=(const AgingReplayShape &o) const { return !(*this == o); }
    bool operator<(const AgingReplayShape &o) const {
      return std::tie(group, chunks, list) < std::tie(o.group, o.chunks, o.list);
    }
  };
  /// The replays, in order.
  using AgingShape = std::vector<AgingReplayShape>;
  /// The replays a deferred enqueueAging left for the step's graph (null:
  /// none). A graph that takes them keys on the exchange's generation too
  /// (their lists and slots are parts of it) and on tablesGeneration.
  const AgingShape *queuedAging() const { return agingQueued_ ? &agingShape_ : nullptr; }
  /// Changes whenever the grouped aging tables are dropped (a graph that
  /// launches the old ones no longer fits).
  std::uint64_t tablesGeneration() const { return agingTablesGeneration_; }
  /// Enqueues the queued replays on the queue's stream (being captured into
  /// the step's graph, which copies the exchange to the device before them
  /// and back after them); agingSubmitted marks them enqueued once the
  /// graph launched.
  void submitAging(const CudaPlacement &placement, const CudaPools &pools);
  void agingSubmitted() { agingQueued_ = false; }
  /// Enqueues the queued replays alone (as a graph where the driver has
  /// them), if any; they stay queued when that fails.
  void flushAging(const CudaPlacement &placement, const CudaPools &pools);
  /// The slots of the appends enqueueAging replayed for group g last
  /// (entry i: append i's new row's slot, -1 when it left HBM in the list).
  std::vector<std::int32_t> agedSlots(std::int32_t group, std::size_t count) const;
  /// The aging kernels' status since the last call: the OR of the groups'
  /// status words (0: fine); clears them (waits for the stream).
  std::uint32_t takeAgingStatus();

private:
  /// enqueueDecisions' work, every group's inputs read in place as `inputs`.
  void submitDecisions(const CudaPlacement &placement, const CudaPools &pools, CUdeviceptr status,
                       bool lists, const std::vector<DecisionInputs> &inputs);
  /// A per-group device buffer of the decision step's argument `index`.
  CUdeviceptr groupArgument(std::int32_t group, int index) const {
    if (index == tables_.control)
      return controls_->get() + static_cast<std::size_t>(group) * kControlStride;
    return perGroup_[static_cast<std::size_t>(group)][static_cast<std::size_t>(index)]->get();
  }
  /// Bytes from one group's control words to the next's.
  static constexpr std::size_t kControlStride = 256;
  /// The most groups a round of decisions takes, each on a lane with its
  /// own scratch (~9 MB at B=128 x top-2048): their plans (one CTA a group,
  /// ~0.57 ms at B=128) run side by side in one grouped launch; one after
  /// another they took 14 ms of a 77 ms step (bench/NOTES.md, 2026-12-03).
  static constexpr std::size_t kDecisionLanes = 8;

  /// The argument indices of the tables and the place list a decision or
  /// aging step shares with the groups' state.
  struct TableArguments {
    int hot = -1, cleared = -1, free = -1, control = -1, rows = -1, slots = -1;
  };
  /// Looks them up in `manifest` and checks the tables' sizes against the
  /// pools' slots and the control words' count (`what` names the step).
  static TableArguments tableArguments(const Manifest &manifest, const TierLayout &layout,
                                       const std::string &what);

  std::shared_ptr<CudaQueue> queue_;
  TierLayout layout_;
  std::unique_ptr<CudaStep> step_;
  std::size_t planLaunch_ = 0;  // the plan_promotions launch (grouped)
  std::size_t placeLaunch_ = 0; // the place_rows launch (once per pool)
  int rowIds_ = -1, slots_ = -1, historyStart_ = -1;
  /// The write-back ring entries' argument (-1: the step takes none).
  int writeBack_ = -1;
  TableArguments tables_;   // the decision step's
  std::size_t entries_ = 0; // place list entries
  // [group][argument]: the selections, slots, history starts and tables
  // (not the control words: controls_).
  std::vector<std::vector<std::unique_ptr<DeviceBuffer>>> perGroup_;
  /// Group g's buffers of the decision step on its lane (g mod lanes),
  /// reading its inputs in place where `inputs` has them (0: its own).
  CudaStepBuffers laneBuffers(std::int32_t group, const DecisionInputs &inputs,
                              const CudaPlacement &placement) const;
  // A decision lane: the group of each round at its position decides over
  // the lane's own copy of the other arguments and arena, and status word.
  struct Lane {
    std::vector<std::unique_ptr<DeviceBuffer>> shared;
    std::unique_ptr<DeviceBuffer> arena;
    CudaStepBuffers buffers; // those bound
  };
  std::vector<Lane> lanes_;
  std::unique_ptr<DeviceBuffer> laneStatus_; // [lane] u32
  bool statusPending_ = false;               // decisions enqueued since the last takeStatus
  // Parts of the queue's exchange: [lane] u32, the lanes' status words
  // copied after the decisions; [group] i32, the budget words;
  // [group][kWords + kHeader], the counts.
  HostExchange::Part laneStatusCopy_ = 0, budgets_ = 0, counts_ = 0;
  /// The queue's exchange.
  HostExchange &exchange() const { return queue_->exchange(); }
  template <typename T> T *hostPart(HostExchange::Part part) const {
    return static_cast<T *>(exchange().host(part));
  }
  // [round][lane][plan parameter]: the grouped plans' tables
  // (CudaStep::groupBindings), and the placement they were made over.
  std::unique_ptr<DeviceBuffer> planBindings_;
  std::size_t planColumns_ = 0;
  CUdeviceptr boundRecency_ = 0;
  // [group][kControlStride]: the control words.
  std::unique_ptr<DeviceBuffer> controls_;
  // [group]: the selections, slots and history starts this step's
  // decisions read in place (0: the group's own buffer), see enqueueInputs.
  std::vector<DecisionInputs> inputs_;
  // [group][CudaPlacement::recencyStride]: the replacement states at the
  // step's start.
  std::unique_ptr<DeviceBuffer> rollback_;
  std::unique_ptr<MappedHostBuffer> lists_; // [group][entries x 12 bytes]
  // The aging step: its appends list [N x 4], place list [2 N] and status
  // word are its own, one of each per group (the groups' replays run in one
  // grouped launch); the tables are the groups'.
  std::unique_ptr<CudaStep> aging_;
  std::size_t agingN_ = 0;
  int agingList_ = -1;
  TableArguments agingTables_;
  std::vector<CudaStepBuffers> agingBuffers_; // [group]: its lists, tables, status
  // The list, the place rows, the place slots: one buffer each, the
  // groups' side by side (bound in agingBuffers_).
  std::vector<std::unique_ptr<DeviceBuffer>> agingArguments_;
  std::unique_ptr<DeviceBuffer> agingStatus_; // [group] u32
  // The grouped age_rows launches' tables (CudaStep::groupBindings), by
  // their replays' groups and lists; made between steps (enqueueAging),
  // kept while graphs may launch them.
  std::map<AgingShape, std::unique_ptr<DeviceBuffer>> agingBindings_;
  /// The table of a grouped age_rows launch over `replays` (made and
  /// uploaded if new: between steps only).
  CUdeviceptr agingBindings(const AgingShape &replays, const CudaPlacement &placement);
  /// The queued replays with a chunk c.
  AgingShape agingChunk(std::size_t c) const;
  std::size_t agingListStride_ = 0, agingSlotsStride_ = 0; // bytes between groups' parts
  // Parts of the queue's exchange (once an aging step is loaded):
  // [group][agingRoom_] the appends written for the copies and the slots
  // read back (grown to the largest replay), [group] the budget words,
  // [group] u32 the status words copied after the replays.
  HostExchange::Part agingIn_ = 0, agingOut_ = 0, agingBudgets_ = 0, agingStatusCopy_ = 0;
  bool agingParts_ = false;   // those exist
  std::size_t agingRoom_ = 0; // appends a group's part of agingIn_ / agingOut_ holds
  // The replays captured as a graph (where the driver has graphs), keyed
  // by their groups and chunk counts and the exchange's generation.
  StepGraphCache<std::pair<AgingShape, std::uint64_t>> agingGraph_;
  // The replays enqueueAging wrote into the exchange, not yet enqueued.
  AgingShape agingShape_;
  bool agingQueued_ = false;
  std::uint64_t agingTablesGeneration_ = 0; // bumped when agingBindings_ is cleared
  // The decisions captured as a graph (launched one by one otherwise),
  // keyed by the status word, whether the lists are copied and the
  // addresses of the groups' inputs read in place.
  StepGraphCache<std::vector<CUdeviceptr>> decisionGraph_;
};

} // namespace dhs::runtime::cuda_detail

#endif // DHS_RUNTIME_CUDA_CUDADECISIONS_H
