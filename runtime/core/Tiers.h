//===- Tiers.h - Where the KV tiers live and how a layer runs ---*- C++ -*-===//
//
// The step executor (Runtime) keeps its KV rows in two tiers per pool: the
// host store [host_rows, P, row_bytes] (every row of every admitted request)
// and the HBM pool [hbm_slots, P, row_bytes] (the resident subset), where a
// pool holds P layers of a token together: P = 1 (a pool per layer) or P = G
// (a pool per layer group, a token's rows for all its layers contiguous, as
// the compiled step's kv_pool says). Slot numbers are shared by all layers
// of a layer group either way. A TierBackend owns that memory and
// runs one layer's sparse attention over it:
//  - the CPU backend keeps both tiers in host vectors and runs CpuAttention on
//    views of them (no copies per step);
//  - the CUDA backend (CudaTiers.cpp) keeps the HBM pool in device memory and
//    the host store in pinned, device-mapped memory, and runs the step's
//    kernels on one stream with persistent buffers.
// Row copies (promotions, appends) are carried out in stream order after the
// reads of the step that fetched them.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_TIERS_H
#define DHS_RUNTIME_CORE_TIERS_H

#include "runtime/core/Bf16.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/residency/Residency.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dhs::runtime {

struct Manifest;

/// Sizes of the tiers.
struct TierLayout {
  std::int32_t layers = 1;         ///< L
  std::int32_t layersPerGroup = 1; ///< G
  std::int32_t layersPerPool = 1;  ///< P: 1, or G (one pool per group)
  std::int32_t hbmSlots = 0;       ///< slots per layer (= per group)
  std::int64_t hostRows = 0;       ///< host-store rows per layer
  std::int64_t rowBytes = 0;       ///< bytes per row
  std::int32_t draftWindow = 0;    ///< W_draft: tokens per draft ring (0: none)
  std::int32_t windowRing = 0;     ///< R: raw tokens per sliding-window ring (0: none)

  /// Layer groups: ceil(L / G).
  std::int32_t groups() const { return (layers + layersPerGroup - 1) / layersPerGroup; }
  /// Layers of group g: [first, end).
  std::int32_t firstLayer(std::int32_t g) const { return g * layersPerGroup; }
  /// One past the last layer of group g.
  std::int32_t endLayer(std::int32_t g) const { return std::min(layers, (g + 1) * layersPerGroup); }
  /// Pools: ceil(L / P).
  std::int32_t pools() const { return (layers + layersPerPool - 1) / layersPerPool; }
  /// Bytes of one token in a pool: P * row_bytes.
  std::int64_t tokenBytes() const { return layersPerPool * rowBytes; }
  /// Bytes of one token of a draft ring: G * row_bytes (a group's layers;
  /// the last group's ring is padded when G does not divide L).
  std::int64_t draftTokenBytes() const { return layersPerGroup * rowBytes; }
  /// Byte offset of a layer's row within its pool's token.
  std::int64_t layerOffset(std::int32_t layer) const { return (layer % layersPerPool) * rowBytes; }
};

/// The structure of a compiled draft-ring step (examples/draft_ring_step.mlir
/// compiled by dhs-compile): arguments ring [B, W, a, b], new rows [B, N, a,
/// b], positions [B], ends [B], window [B, R, a, b] (i8, a * b bytes per
/// token) and four launches: ring_index + copy_rows (scatter: append N rows
/// at positions p .. p+N-1 mod W), ring_index + copy_rows (gather: read the
/// R rows end-R .. end-1).
struct DraftStepInfo {
  int ringArgument = -1;       ///< argument index of the rings
  int rowsArgument = -1;       ///< of the appended rows
  int positionsArgument = -1;  ///< of the append positions
  int endsArgument = -1;       ///< of the read ends
  int windowArgument = -1;     ///< of the rows read
  std::int64_t lanes = 0;      ///< B: rings per launch
  std::int64_t window = 0;     ///< W: tokens per ring
  std::int64_t block = 0;      ///< N: rows per append
  std::int64_t readRows = 0;   ///< R: rows per read
  std::int64_t tokenBytes = 0; ///< a * b: bytes per ring token
};

/// Reads and checks a draft-ring step's structure. Throws Error naming what
/// is not a draft-ring step (other launches, arguments, shapes).
DraftStepInfo draftStepInfo(const Manifest &manifest);

/// Where step inputs and outputs live.
enum class MemorySpace {
  Host,   ///< host pointers
  Device, ///< device pointers (CUDA backend only)
};

/// The inputs of one layer's attention. Selections and history bounds are
/// padded to the step's batch B; queries and output hold only the first
/// `lanes` requests (the backend pads them).
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
};

/// What CUDA-graph replay did so far (all zero without graphs).
struct TierGraphStats {
  std::uint64_t captures = 0; ///< steps captured into a (new) graph
  std::uint64_t replays = 0;  ///< steps run by replaying a captured graph
};

/// Owner of the tiers and runner of one layer's attention.
class TierBackend {
public:
  virtual ~TierBackend();

  /// "cpu" or "cuda on NVIDIA H200 (sm_90a)".
  virtual std::string describe() const = 0;
  /// The layout.
  virtual const TierLayout &layout() const = 0;
  /// A host-store row, writable by the caller (pinned memory on CUDA).
  virtual std::uint8_t *hostRow(std::int32_t layer, std::int64_t row) = 0;
  /// Copies host rows into HBM slots in every layer of each copy's group,
  /// after all work already submitted. Entries with slot -1 are releases
  /// (the row left HBM): nothing to copy, but a device residency map (see
  /// setPlacementStep) records them.
  virtual void copyToHbm(const std::vector<RowCopy> &copies) = 0;
  /// Takes a compiled placement step (examples/place_rows_step.mlir: one
  /// dhs.place_rows over a pool of this layout) and from then on carries
  /// out copyToHbm with its kernel, keeping per group on the device the
  /// residency map and the replacement state, both initialized from
  /// `controller` (its residency tables and slot recency), and, when the
  /// steps resolve on the device, a step log. The Runtime has checked the
  /// step. The CPU tiers keep nothing.
  virtual void setPlacementStep(const Manifest &manifest, const ResidencyController &controller);
  /// True when the steps resolve selections on the device (they contain
  /// dhs.resolve) and a placement step keeps the residency maps there: then
  /// selections may stay in device memory (takeSelections).
  virtual bool resolvesOnDevice() const { return false; }
  /// Takes group g's selections [count] (row ids, device memory) for the
  /// step in progress: enqueues a copy into the step's row_ids (padded with
  /// -1 to [B, Q, K]). No host wait. Throws Error where unsupported.
  virtual void takeSelections(std::int32_t group, const std::int32_t *rowIds, std::int64_t count);
  /// Group g's selections taken this step [B, Q, K], downloaded (after
  /// finishStep) for error messages and checks; steps never need them.
  virtual const std::int32_t *selectionsOnHost(std::int32_t group);
  /// Starts step `step` (the controller's step number) before any of its
  /// work: a device step log (see stepLog) is cleared and stamped with it.
  virtual void beginStep(std::uint32_t step);
  /// What group g's resolve kernel logged this step (dhs.pool_log): the
  /// distinct slots hit, the (lane, row id) pairs that missed, the valid
  /// selections. Waits for the group's log only (the step's later layers
  /// may still run) where stepLogsEarly, else call it after finishStep.
  /// Throws Error without a device log or when it overflowed.
  struct StepLog {
    std::vector<std::int32_t> hitSlots;
    std::vector<std::int32_t> misses; ///< [missCount x 2]
    std::int64_t entries = 0;
  };
  virtual const StepLog &stepLog(std::int32_t group);
  /// True when stepLog may be called before finishStep.
  virtual bool stepLogsEarly() const { return false; }
  /// Uploads the controller's replacement state over the device one (after
  /// a failed step whose kernels stamped hits the controller never booked).
  virtual void restoreRecency(const ResidencyController &controller);
  /// Group g's device replacement state as [hbm slots x 2] {last use,
  /// previous use} (a download that waits for submitted work), or nullptr
  /// where the steps keep none. For checks, not for steps.
  virtual const std::int32_t *recencySnapshot(std::int32_t group);
  /// Group g's device residency map as host-readable values [host rows]
  /// (a download that waits for submitted work), or nullptr without a
  /// placement step. For checks, not for steps.
  virtual const std::int32_t *residencyMapSnapshot(std::int32_t group);
  /// The HBM pool holding a layer as host-readable bytes [slots, P,
  /// row_bytes] (the CPU tier itself, or a download that waits for
  /// submitted work), valid until the next call. For checks, not for steps.
  virtual const std::uint8_t *hbmSnapshot(std::int32_t layer) = 0;
  /// Submits one layer's attention.
  virtual void attend(std::int32_t layer, const LayerStep &step) = 0;
  /// Waits for the step's work and checks its status; throws Error when the
  /// kernels rejected their input.
  virtual void finishStep() = 0;
  /// True if step inputs may be device pointers.
  virtual bool acceptsDevicePointers() const = 0;
  /// Turns CUDA-graph replay of whole steps on or off (between steps).
  /// Throws Error on a backend without graphs (the CPU's, an old driver).
  virtual void setGraphs(bool on);
  /// True while steps run as CUDA graphs.
  virtual bool graphsOn() const { return false; }
  /// Graph captures and replays so far.
  virtual TierGraphStats graphStats() const { return {}; }

  // Draft rings: per admitted request (by its controller index) and layer
  // group, a ring of W_draft tokens of draftTokenBytes(), in memory of its
  // own (host memory on the CPU, device memory on CUDA), never in the pools.
  // Positions are logical token positions; token p lives in ring slot
  // p mod W_draft. The Runtime checks ids, sizes and positions first.

  /// Takes the compiled draft-ring step whose kernels do the ring work
  /// (CUDA); the Runtime has checked its shapes. The CPU tiers keep nothing.
  virtual void setDraftStep(const Manifest &manifest);
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

  // Sliding-window rings (layout().windowRing > 0): per admitted request,
  // per pool, R raw tokens of P layers x row_bytes (raw token p in slot p mod
  // R), in the steps' resident memory (device memory on CUDA). Each
  // attention step reads its lanes' rings of its pool.

  /// Allocates (zeroed) the window rings of request index `index`. Throws
  /// CapacityError when memory is short (nothing kept).
  virtual void allocateWindowRings(std::int32_t index) = 0;
  /// Frees them (none: no effect).
  virtual void freeWindowRings(std::int32_t index) = 0;
  /// Writes `count` (<= R) raw tokens [count][L][row_bytes] (host memory) at
  /// positions position .. position+count-1 of request index `index`'s
  /// rings, after the work already submitted.
  virtual void writeWindow(std::int32_t index, std::int64_t position, std::int64_t count,
                           const std::uint8_t *tokens) = 0;
};

/// Calls `copy(ring offset, token offset, bytes)` for every piece of writing
/// `count` raw tokens [count][L][row_bytes] at positions position.. into
/// window rings laid out [pools][R][P x row_bytes]: a token's layers of one
/// pool go to slot (position + t) mod R of that pool's ring.
template <typename Copy>
void forEachWindowCopy(const TierLayout &layout, std::int64_t position, std::int64_t count,
                       Copy copy) {
  const std::size_t rowBytes = static_cast<std::size_t>(layout.rowBytes);
  const std::size_t tokenBytes = static_cast<std::size_t>(layout.tokenBytes());
  for (std::int64_t t = 0; t < count; ++t) {
    const std::size_t slot = static_cast<std::size_t>((position + t) % layout.windowRing);
    for (std::int32_t pool = 0; pool < layout.pools(); ++pool) {
      const std::int32_t first = pool * layout.layersPerPool;
      const std::int32_t layers = std::min(layout.layersPerPool, layout.layers - first);
      copy((static_cast<std::size_t>(pool) * static_cast<std::size_t>(layout.windowRing) + slot) *
               tokenBytes,
           (static_cast<std::size_t>(t) * static_cast<std::size_t>(layout.layers) +
            static_cast<std::size_t>(first)) *
               rowBytes,
           static_cast<std::size_t>(layers) * rowBytes);
    }
  }
}

/// The CPU tiers: host vectors, CpuAttention (float, `threads` threads).
std::unique_ptr<TierBackend> makeCpuTiers(const TierLayout &layout, unsigned threads);

/// The CUDA tiers on device `ordinal` for a step (linked and loaded from the
/// manifests' PTX). `stepsByLayer[i]` is the step compiled for layer i of a
/// pool (its kernels read that layer of the pool's token): one step when
/// the pools hold one layer, else exactly layersPerPool steps, all with the
/// same arguments. Throws Error when CUDA is unavailable, the steps do not
/// fit the layout, or memory is short.
std::unique_ptr<TierBackend> makeCudaTiers(const TierLayout &layout,
                                           const std::vector<const Manifest *> &stepsByLayer,
                                           int ordinal);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_TIERS_H
