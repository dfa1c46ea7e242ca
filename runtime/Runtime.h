//===- Runtime.h - Requests, steps and the KV hierarchy ---------*- C++ -*-===//
//
// The runtime a serving engine links: it owns the KV tiers of a model of L
// layers in layer groups of G (one selection per group, IndexShare), admits
// requests with their prefill KV, appends decode tokens, and runs decode
// steps of a compiled step over a batch (beginStep, selectGroup per group,
// attendLayer per layer, endStep; or step()). docs/runtime.md describes the
// objects and a step's life; step loading is in StepLoading.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_RUNTIME_H
#define DHS_RUNTIME_RUNTIME_H

#include "runtime/InvariantChecker.h"
#include "runtime/RequestRings.h"
#include "runtime/core/Accept.h"
#include "runtime/core/Bf16.h"
#include "runtime/core/DraftRingStep.h"
#include "runtime/core/Manifest.h"
#include "runtime/core/RowWrites.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/core/StepPlan.h"
#include "runtime/core/Tiers.h"
#include "runtime/core/TopK.h"
#include "runtime/residency/Residency.h"

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace dhs::runtime {

/// Which backend runs the attention.
enum class BackendKind {
  Cpu,  ///< the CPU reference backend (float accumulation)
  Cuda, ///< a CUDA device: HBM tier in device memory, host store pinned and
        ///< mapped, the step's kernels on one stream (CudaTiers.cpp)
  Auto, ///< CUDA if a device is usable, else the CPU
};

/// Configuration of a runtime. The residency fields (newestWindow, hotFloor,
/// policy, replacement, maxPromotionsPerStep) apply to steps without a
/// residency spec; a step compiled with `dhs.residency` brings its own.
struct RuntimeConfig {
  std::int32_t layers = 1;                            ///< L: layers of the model
  std::int32_t layersPerGroup = 1;                    ///< G: layers sharing one selection
  std::int32_t hbmSlots = -1;                         ///< HBM slots per layer (-1: the step's)
  std::int64_t hostRows = 1 << 16;                    ///< host-store rows per layer
  std::int32_t maxRequests = 64;                      ///< admitted at once, at most
  std::int32_t newestWindow = 64;                     ///< W
  std::int32_t draftWindow = 0;                       ///< W_draft
  std::int32_t hotFloor = 0;                          ///< F (Fixed: the buffer size)
  ResidencyPolicy policy = ResidencyPolicy::Adaptive; ///< spare-memory policy
  Replacement replacement = Replacement::Clock;       ///< victim choice
  std::int32_t maxPromotionsPerStep = -1;             ///< per request and group (-1: all)
  /// CUDA: tokens of each pool's write-back ring (dhs.pool_write_back): the
  /// missing rows a decided step's attentions read from the host store and
  /// its promotions then copy from HBM instead of reading them again; 0:
  /// none. Used where every attention of the steps writes back.
  std::int64_t writeBackRows = 0;
  BackendKind backend = BackendKind::Cpu;             ///< attention backend
  int device = 0;                                     ///< CUDA device ordinal
  unsigned cpuThreads = 1;                            ///< CPU backend threads (0: all)
  bool cudaGraphs = false;                            ///< CUDA: run each step as a CUDA graph
                                                      ///< (see Runtime::setCudaGraphs)
  bool checkInvariants = false;                       ///< run the invariant checker
  std::int32_t fullCheckInterval = 64;                ///< steps between full checks (0: never)
};

/// Statistics of a runtime.
struct RuntimeStats {
  std::uint64_t steps = 0;              ///< completed steps
  ResidencyStepStats lastStep;          ///< the last completed step
  ResidencyStepStats totals;            ///< all completed steps
  std::int32_t admittedRequests = 0;    ///< requests admitted now
  std::int64_t hbmBytesUsed = 0;        ///< bytes of occupied slots, all layers
  std::int64_t hbmBytesCapacity = 0;    ///< bytes of all slots, all layers
  std::int64_t hostBytesUsed = 0;       ///< bytes of reserved host ranges, all layers
  std::int64_t hostBytesCapacity = 0;   ///< bytes of the host store, all layers
  std::int64_t optionalBudgetSlots = 0; ///< optional budget, slots per group
  std::int64_t optionalUsedSlots = 0;   ///< optional rows in use, all groups
  std::uint64_t graphCaptures = 0;      ///< CUDA: steps captured into a new graph
  std::uint64_t graphReplays = 0;       ///< CUDA: steps run by replaying a graph
  /// CUDA: nodes of the step graph captured last (all, kernels, copies,
  /// memsets; 0 when none or the driver cannot list them).
  std::uint64_t graphNodes = 0, graphKernelNodes = 0, graphCopyNodes = 0, graphMemsetNodes = 0;
};

/// Speculation statistics of verify steps (whole runtime, or one request).
struct SpecStats {
  static constexpr std::size_t kPositions = 16; ///< draft positions counted apart
  std::uint64_t verifySteps = 0; ///< verify steps ended by verifyAccept (a request's: its blocks)
  std::uint64_t blocks = 0;      ///< request blocks verified (a block per request and step)
  std::uint64_t drafted = 0;     ///< draft tokens verified
  std::uint64_t accepted = 0;    ///< of those, accepted
  std::uint64_t emitted = 0;     ///< tokens emitted (accepted + a bonus or corrected one each)
  std::array<std::uint64_t, kPositions> draftedAt{};  ///< drafts at draft position i
  std::array<std::uint64_t, kPositions> acceptedAt{}; ///< of those, accepted
  /// Host-store rows the verify steps' attention read (layer rows): per
  /// layer, each distinct missing row of a request's positions once (the
  /// union the shared retrieval reads).
  std::uint64_t hostRowsRead = 0;
  /// What reading each position's missing rows apart would read: the sum
  /// over positions (and layers) of their distinct missing rows.
  std::uint64_t hostRowsSelectedMissing = 0;

  /// emitted / blocks (0 before any block).
  double meanAcceptedLength() const {
    return blocks ? static_cast<double>(emitted) / static_cast<double>(blocks) : 0.0;
  }
  /// Adds another's counts.
  SpecStats &operator+=(const SpecStats &other);
};

/// The runtime. A call that fails for want of host memory (std::bad_alloc,
/// or CapacityError from a tier) changes nothing: each update makes room
/// for all it adds before its first change (runtime/core/Reserve.h), and a
/// step or verify step that cannot end is abandoned. One update cannot
/// promise that: the commit of a verify step whose copies into HBM failed
/// (kept for a retry, they take the room made for the next tokens), if an
/// allocation then fails too; the commit stops half-way, and every later
/// call that needs a step throws StateError saying that the runtime cannot
/// vouch for its tables. With checkInvariants, a check that follows an
/// update (and fails, or cannot allocate) throws after the update, whole.
class Runtime {
public:
  /// A runtime with no step loaded. Throws Error for a bad config.
  explicit Runtime(const RuntimeConfig &config);
  ~Runtime();
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  /// Loads a compiled step directory (manifest.json + PTX; PTX is needed only
  /// for CUDA) and allocates the tiers, after checking their sizes against
  /// the host's physical memory and the device's free memory. Throws Error
  /// (bad manifest, CUDA unavailable for BackendKind::Cuda, a pool size that
  /// disagrees with the step), CapacityError (memory), StateError if a step
  /// is loaded.
  void loadStep(const std::string &stepDirectory);
  /// As loadStep, from a parsed manifest.
  void loadStep(const Manifest &manifest);
  /// Loads a layer group's steps: the same step compiled once per layer
  /// index of its pool (`layer = 0 .. G-1`), in any order, all with the same
  /// arguments. The CUDA backend needs one step per layer index when a pool
  /// holds a group's G layers (its kernels read one fixed layer); the CPU
  /// backend runs every layer from any of them. Throws Error naming the
  /// step that disagrees, a layer index given twice, or (CUDA) the layer
  /// indices missing; otherwise as loadStep. With BackendKind::Auto, a set
  /// that lacks layers falls back to the CPU (see fallbackReason()).
  void loadSteps(const std::vector<std::string> &stepDirectories);
  /// As loadSteps, from parsed manifests.
  void loadStepManifests(const std::vector<Manifest> &manifests);
  /// True once a step is loaded.
  bool stepLoaded() const { return tiers_.storage != nullptr; }
  /// The loaded step's shape (B, Q, H, K, row layout). Throws StateError.
  const ProblemShape &shape() const;
  /// Bytes per KV row. Throws StateError.
  std::int64_t rowBytes() const;
  /// Layer groups.
  std::int32_t groups() const;
  /// Layers of the model.
  std::int32_t layers() const { return config_.layers; }
  /// Why CUDA was not used with BackendKind::Auto ("" if it was or not asked).
  const std::string &fallbackReason() const { return fallbackReason_; }
  /// The backend in words ("cpu", "cuda on ...").
  std::string backendDescription() const;
  /// The CUDA device the steps run on (nullptr on the CPU). Throws
  /// StateError when no step is loaded.
  const DeviceInfo *device() const;
  /// The loaded attention kernels (none on the CPU). Throws StateError.
  std::vector<KernelInfo> kernels() const;

  /// Admits request `id` (any value not admitted now) with `historyLen`
  /// prefill rows `prefill` [L][historyLen][row_bytes] (null when
  /// historyLen == 0) and room for `maxContext` rows. Throws CapacityError
  /// (admission refused: nothing changed), InputError (an id admitted
  /// already, a null prefill), StateError (no step, or during a step).
  void admit(std::uint64_t id, std::int64_t historyLen, std::int64_t maxContext,
             const void *prefill);
  /// Appends one decode token's rows `rows` [L][row_bytes] (host memory).
  /// Throws CapacityError at the maximum context, UnknownRequestError,
  /// InputError for null rows, StateError.
  void append(std::uint64_t id, const void *rows);
  /// Appends one decode token to each of `count` requests `ids` (distinct),
  /// in order, rows `rows` [count][L][row_bytes]: the same decisions as
  /// append(ids[i], rows + i * L * row_bytes) for i = 0 .. count - 1, with
  /// the rows' copies into HBM carried out together (on CUDA one placement
  /// per group instead of one per request). Validates everything first
  /// (nothing changes on an error): throws InputError for a null rows or
  /// ids, a negative count or an id given twice, UnknownRequestError,
  /// CapacityError when a request is at its maximum context, StateError.
  void appendBatch(const std::uint64_t *ids, std::int64_t count, const void *rows);
  /// Finishes a request: frees its slots and host rows. Throws
  /// UnknownRequestError, StateError.
  void finish(std::uint64_t id);
  /// True if `id` is admitted.
  bool admitted(std::uint64_t id) const;
  /// History length of a request. Throws UnknownRequestError.
  std::int64_t historyLen(std::uint64_t id) const;
  /// The controller's index of a request, to read its state from
  /// controller(). Throws UnknownRequestError.
  std::int32_t requestIndex(std::uint64_t id) const;

  /// Starts a step over `batch` requests (at most the step's B; lanes past
  /// `batch` are padding). Throws InputError (batch too large, a request
  /// twice), UnknownRequestError, StateError.
  void beginStep(const std::uint64_t *ids, std::int64_t batch);
  /// Group g's selections [batch, Q, K] (row ids, -1 = none). In host
  /// memory they are checked and resolved now: throws InputError (a row id
  /// outside its request's history; the step stays open and the call may be
  /// repeated), StateError. In device memory (CUDA, with steps that contain
  /// dhs.resolve and a placement step: the residency maps) they never wait
  /// for the host: the step's kernels resolve them through the maps, and
  /// endStep checks and books a copy; a bad row id then fails endStep with
  /// the same message (the step is abandoned, nothing promoted). The step's
  /// work reads them from `rowIds` (as it reads device queries): keep the
  /// buffer unchanged until endStep returns.
  void selectGroup(std::int32_t group, const std::int32_t *rowIds,
                   MemorySpace memory = MemorySpace::Host);
  /// Layer l's attention: queries [batch, Q, H, qk_dim] in, output [batch,
  /// Q, H, v_dim] out, both in `memory`. Its group must be selected. Host
  /// output is complete when it returns (an engine computes the next
  /// layer's queries from it; on CUDA that costs a wait for the layer),
  /// except within step() or with CUDA graphs on, where it is complete when
  /// endStep returns. Device output is ordered on the runtime's stream (no
  /// host wait): an engine's work on its own stream reads it after
  /// setEngineStream, else after endStep.
  void attendLayer(std::int32_t layer, const bf16_t *queries, bf16_t *output,
                   MemorySpace memory = MemorySpace::Host);
  /// Ends the step: waits for it, promotes, checks. Every group and layer
  /// must have run. Throws StateError, Error (a failed check or kernel).
  void endStep();
  /// Abandons a step in progress (no promotions). Throws StateError.
  void abortStep();
  /// True between beginStep and endStep/abortStep.
  bool inStep() const { return inStep_; }

  /// CUDA backend: runs each step's work (all layers) as one CUDA graph,
  /// captured on the first step and replayed while the step keeps its shape
  /// (batch, layers, memory space, device pointers); a step that differs is
  /// captured again. Outputs are bit-identical to steps without graphs.
  /// With graphs on, attendLayer only stages its inputs and the work starts
  /// in endStep, so it suits engines that give every layer's queries up
  /// front (step()). Throws StateError (no step loaded, or during a step),
  /// Error (the CPU backend, a driver without graphs).
  void setCudaGraphs(bool on);
  /// True while steps run as CUDA graphs.
  bool cudaGraphs() const;
  /// Orders the runtime's device work with the engine's CUDA stream
  /// `stream` (a CUstream / cudaStream_t of the runtime's device in its
  /// primary context; nullptr, the default: none). Each layer's attention
  /// (with CUDA graphs on, the step's launch in endStep) runs after the work
  /// the engine enqueued on `stream` before the call, and work the engine
  /// enqueues on `stream` after attendLayer or endStep returns runs after
  /// that call's device work: device selections, queries and outputs pass
  /// between the two streams without host waits. The runtime keeps the
  /// handle: set nullptr before the stream is destroyed. Throws StateError
  /// (no step loaded, during a step, a stream on the CPU backend).
  void setEngineStream(void *stream);

  /// A whole step: beginStep, selectGroup for every group (rowIds
  /// [groups][batch][Q][K]), attendLayer for every layer (queries
  /// [L][batch][Q][H][qk_dim], output [L][batch][Q][H][v_dim]), endStep;
  /// queries and output in `memory`, row ids in `selectionMemory`. On any
  /// error the step is abandoned and nothing is promoted.
  void step(const std::uint64_t *ids, std::int64_t batch, const std::int32_t *rowIds,
            const bf16_t *queries, bf16_t *output, MemorySpace memory = MemorySpace::Host,
            MemorySpace selectionMemory = MemorySpace::Host);

  /// Begins a verify step over `batch` requests (speculative decoding; the
  /// loaded step's Q = gamma + 1 >= 2 positions per request). Request ids[b]
  /// verifies draftLens[b] + 1 positions (0 <= draftLens[b] <= Q - 1): the
  /// token after its history and its drafts draftTokens[b * (Q-1) + 0 ..
  /// draftLens[b] - 1]. `rows` [batch][Q][L][row_bytes] (host memory) is
  /// the target's KV of those positions, or null: then each layer's comes
  /// from verifyWriteRows before its attendLayer. Pending rows are staged in
  /// the request's ring slots (reserved at admission) and selectable as row
  /// ids historyLen .. historyLen + draftLens[b] of this step only (position
  /// j selects its history and positions 0 .. j), never in the host store
  /// or the residency state before verifyAccept commits them. Then
  /// selectGroup (host selections; positions past a block get -1) and
  /// attendLayer as in a step; any failure of them abandons the verify
  /// step. Throws InputError (a draft length, null pointers, batch),
  /// UnknownRequestError, CapacityError (the block would pass the request's
  /// maximum context), StateError (a step in progress, a step of one
  /// position).
  void verifyBegin(const std::uint64_t *ids, std::int64_t batch, const std::int32_t *draftLens,
                   const std::int32_t *draftTokens, const void *rows);
  /// Layer `layer`'s pending rows [batch][Q][row_bytes] (host memory) of the
  /// verify step in progress, begun without rows: required once per layer
  /// before its attendLayer (a layer's rows are a projection of the previous
  /// layer's output). Rows of positions past a block are ignored. Throws
  /// StateError (no verify step; the layer's rows given already or the
  /// layer attended), OutOfRangeError (no such layer), InputError (null
  /// rows); any failure abandons the verify step.
  void verifyWriteRows(std::int32_t layer, const void *rows);
  /// Ends a verify step: acceptance by `rule` over `vocab` tokens (the
  /// kernel of a loaded accept step on CUDA, else the same rule on the host:
  /// the same tokens for the same seed), then endStep, then the KV of each
  /// request's first accepted[b] + 1 positions is appended to its history
  /// (host store + HBM) and the rest discarded. `target` [batch][Q][vocab]:
  /// greedy scores (no NaN; argmax, ties to the lower token) or
  /// probabilities p; `draftProbs` [batch][Q-1][vocab] q (rejection
  /// sampling; ignored for greedy). Only the rows of each block's positions
  /// are read and checked. Writes accepted[batch] and tokens[batch][Q] (the
  /// accepted drafts, then the bonus or corrected token). Throws StateError
  /// without a verify step in progress (nothing changes); otherwise, on any
  /// error (InputError: a rule, vocab, probabilities, a draft token outside
  /// the vocabulary, null pointers) the verify step is abandoned: nothing
  /// committed, no KV lost.
  void verifyAccept(AcceptRule rule, std::int32_t vocab, const float *target,
                    const float *draftProbs, std::uint64_t seed, std::int32_t *accepted,
                    std::int32_t *tokens);
  /// True between verifyBegin and verifyAccept (or an abort).
  bool verifying() const { return verify_.active; }
  /// Speculation statistics of the whole runtime.
  const SpecStats &specStats() const { return specTotals_; }
  /// A request's speculation statistics. Throws UnknownRequestError.
  SpecStats specStats(std::uint64_t id) const;
  /// Loads a compiled accept step (examples/accept_step.mlir or
  /// accept_sampling_step.mlir compiled for this session: B = the step's
  /// batch, gamma = Q - 1, any vocabulary), one per rule. On CUDA
  /// verifyAccept then runs its kernel for that rule and vocabulary; the CPU
  /// tiers only check it. Throws StateError (no step, during a step, the
  /// rule loaded already), Error (not an accept step, shapes that do not
  /// match: named).
  void loadAcceptStep(const std::string &stepDirectory);
  /// As loadAcceptStep, from a parsed manifest.
  void loadAcceptStep(const Manifest &manifest);

  /// Loads a compiled top-k step (examples/topk_step.mlir: dhs.topk over
  /// scores f32 [B, Q, N], history_len i32 [B], rows i32 [B, Q, K]) for
  /// topK; independent of the attention step, loadable before it. Throws
  /// StateError (loaded already), Error (not a top-k step: named).
  void loadTopKStep(const std::string &stepDirectory);
  /// As loadTopKStep, from a parsed manifest.
  void loadTopKStep(const Manifest &manifest);
  /// The loaded top-k step's shapes, if one is loaded.
  const std::optional<TopKShape> &topKStep() const { return topK_; }
  /// Runs the loaded top-k step for `batch` lanes (1 .. B): for each lane
  /// and position q of Q, the K highest of scores [batch][Q][N] among rows
  /// [0, historyLen[b] - (Q - 1 - q)), ties to the lower row id, in
  /// descending score order, -1 past the visible rows, into rows
  /// [batch][Q][K] (host memory). Every backend runs the kernel's exact
  /// semantics: on CUDA (the attention step loaded, the top-k step's PTX
  /// there) its kernel, else the host (core/TopK.h). Throws StateError (no
  /// top-k step), InputError (null pointers, a batch outside 1 .. B, a
  /// history length outside 0 .. N: nothing written), Error (the kernel).
  void topK(const float *scores, const std::int32_t *historyLen, std::int64_t batch,
            std::int32_t *rows);

  /// Loads a compiled draft-ring step (e.g. examples/draft_ring_step.mlir
  /// compiled by dhs-compile: ring_index + copy_rows launches) whose kernels
  /// run the draft rings on CUDA; the CPU tiers only check it. Its rings must
  /// be W_draft tokens of G * row_bytes each (any batch of rings B >= 1: the
  /// runtime runs a request's ring in lane 0). Throws StateError (no step
  /// loaded, during a step, loaded twice), Error (draft_window 0, not a
  /// draft-ring step, shapes that do not match the session: named).
  void loadDraftStep(const std::string &stepDirectory);
  /// As loadDraftStep, from a parsed manifest.
  void loadDraftStep(const Manifest &manifest);
  /// True once a draft-ring step is loaded.
  bool draftStepLoaded() const { return draftStepLoaded_; }
  /// W_draft: tokens per draft ring (0: no rings).
  std::int32_t draftWindow() const { return config_.draftWindow; }
  /// Writes `count` draft tokens `rows` [count][L][row_bytes] (host memory)
  /// at logical positions position .. position+count-1 of request `id`'s
  /// draft rings (token p in ring slot p mod W_draft, overwriting what the
  /// slot held). Positions may go back (rewriting rejected drafts). Never
  /// touches the KV pools or the residency controller. Throws
  /// UnknownRequestError, InputError (count < 1 or > W_draft, null rows, a
  /// negative position, draft_window 0), StateError (no step, during a
  /// step, CUDA without a draft-ring step), Error (kernels).
  void appendDraft(std::uint64_t id, std::int64_t position, std::int64_t count, const void *rows);
  /// Reads the `count` newest draft tokens ending at `end` (positions
  /// end-count .. end-1) of request `id` into `out` [count][L][row_bytes]
  /// (host memory). Every position must hold what was last written there:
  /// a position never written, or overwritten by a later position (more
  /// than W_draft back), is an OutOfRangeError naming it. Otherwise throws
  /// as appendDraft.
  void readDraft(std::uint64_t id, std::int64_t end, std::int64_t count, void *out);

  /// Loads a compiled placement step (examples/place_rows_step.mlir compiled
  /// for this session's pools: one dhs.place_rows over tokens of
  /// layers-per-pool x row_bytes). From then on the CUDA tiers carry out
  /// promotions, appends and admissions with its kernel (one launch per N
  /// rows instead of a copy each) and keep each layer group's residency map
  /// (the slot of every host row) on the device, checked against the
  /// controller by checkInvariants; the CPU tiers only check it. Throws
  /// StateError (no step, during a step, loaded twice), Error (not a
  /// placement step, a pool that does not match).
  void loadPlacementStep(const std::string &stepDirectory);
  /// As loadPlacementStep, from a parsed manifest.
  void loadPlacementStep(const Manifest &manifest);
  /// True once a placement step is loaded.
  bool placementStepLoaded() const { return placementStepLoaded_; }

  /// Loads a compiled decision step (examples/decision_step.mlir compiled
  /// for this session's shapes and pools: dhs.union_missing, dhs.sort_rows,
  /// dhs.plan_promotions, dhs.place_rows). From then on a step whose
  /// selections are in device memory ends with every group's promotions and
  /// releases decided and carried out on the device (CLOCK over the device
  /// tables; the host reads counts); the controller's per-slot tables follow
  /// them only where the host needs them (admission, finish, appends,
  /// verify steps, checks) by a download of the device state. With
  /// checkInvariants the host also decides every step and the two are
  /// compared (InvariantError on any difference). Needs the CUDA backend,
  /// resolving steps, a placement step, the adaptive policy with CLOCK and
  /// hot floor 0, and the step's `promotions` equal to the configured cap.
  /// Throws StateError (no step, during a step, loaded twice, no placement
  /// step), InputError (a step that does not fit).
  void loadDecisionStep(const std::string &stepDirectory);
  /// As loadDecisionStep, from a parsed manifest.
  void loadDecisionStep(const Manifest &manifest);
  /// True once a decision step is loaded.
  bool decisionStepLoaded() const { return decisionStepLoaded_; }
  /// Loads a compiled aging step (examples/aging_step.mlir compiled for this
  /// session's requests and pools: dhs.age_rows, dhs.place_rows) after the
  /// decision step: appends to requests then stay O(1) on the host between
  /// steps the device decides (the device replays them, in call order, as
  /// the controller would, before the next step's kernels). Throws
  /// StateError (no decision step, during a step, loaded twice), InputError
  /// (a step that does not fit).
  void loadAgingStep(const std::string &stepDirectory);
  /// As loadAgingStep, from a parsed manifest.
  void loadAgingStep(const Manifest &manifest);
  /// Where the last completed step's time went: the device's span (CUDA
  /// events), the host's launch at the step's end and its wait for the
  /// device; -1 on the CPU.
  StepTimes lastStepTimes() const {
    return tiers_.runner ? tiers_.runner->lastStepTimes() : StepTimes{};
  }

  /// Sliding window (steps compiled with `window(...) size = W`, ring of R
  /// raw tokens): writes `count` (1..R) raw tokens `rows` [count][L]
  /// [row_bytes] (host memory) at positions position .. position+count-1 of
  /// request `id`'s window rings; the request then has position + count raw
  /// tokens (writing back rewrites, e.g. after rejected drafts). A step
  /// checks that each lane's ring holds every token its queries see (the W
  /// before each of its Q positions) and names one that is missing. Throws
  /// UnknownRequestError, InputError (no window, count, null rows, a
  /// negative position), StateError (no step, during a step).
  void writeWindow(std::uint64_t id, std::int64_t position, std::int64_t count, const void *rows);

  /// Statistics.
  RuntimeStats stats() const;
  /// Rows the step's fetch kernels copied from the host store for the last
  /// layer run (a shared retrieval fetches each distinct missing row once),
  /// downloaded for checks; -1 when the steps fetch nothing (fused retrieval
  /// reads missing rows in the attention kernel) and on the CPU. Throws
  /// StateError when no step is loaded or during a step.
  std::int64_t fetchedRows();
  /// Layers of the last step (or the one in progress) whose attention ran
  /// its resident form: a launch with a resident kernel
  /// (Launch::residentKernel) on CUDA, for a group reading at most 2% of
  /// its rows from the host (docs/runtime.md); 0 on the CPU.
  std::int64_t residentFormLayers() const {
    return tiers_.runner ? tiers_.runner->residentFormLayers() : 0;
  }
  /// The form share layer `layer`'s launches ran at in the last step (or the
  /// one in progress): where a layer group's step has forms (LaunchForms.h),
  /// which ran, as both backends choose it; 1 for a layer of one form.
  /// Throws StateError when no step is loaded, OutOfRangeError for a layer
  /// outside the model.
  double formShare(std::int32_t layer) const;
  /// Rows the fetch launches copied from the host store in the last step,
  /// all groups (a shared retrieval copies each distinct missing row of a
  /// request's positions once: the step's ResidencyStepStats::fetched); -1
  /// when no fetch ran or, on CUDA, counting is off (countFetches). Throws
  /// StateError when no step is loaded or during a step.
  std::int64_t stepFetchedRows();
  /// Counts the fetch launches' rows from the next step on (the CPU always
  /// does; on CUDA each layer's row lists are copied to the host: on with
  /// checkInvariants). Throws StateError (no step, during a step).
  void countFetches(bool on);
  /// Whether a loaded whole-model step runs the layers (else one layer's
  /// step is replayed per layer). Throws StateError when no step is loaded.
  bool wholeModelStep() const {
    requireStep("whole-model step");
    return plan_.wholeModel();
  }
  /// Bytes of the staging arena the tiers allocated for the loaded steps
  /// (the one their compiler planned: the largest of their manifests'
  /// arena_bytes), 0 without one. Throws StateError.
  std::int64_t arenaBytes() const;
  /// The residency controller.
  const ResidencyController &controller() const;
  /// A host-store row of a request (copied out), for tests and engines.
  std::vector<std::uint8_t> hostRow(std::uint64_t id, std::int32_t layer, std::int64_t row);
  /// Runs every check now (the full check). Throws Error on a violation.
  void checkInvariants();
  /// The tiers' storage itself, for tests that corrupt it on purpose.
  /// Throws StateError when no step is loaded.
  TierStorage &storageForTesting();

private:
  /// Records that `update` (a string literal naming it) stopped half-way
  /// with the exception in flight: the runtime can no longer vouch for its
  /// tables, refuses every later call that needs a step, and the step in
  /// progress, if any, ends with it.
  void markBroken(const char *update);
  /// Runs `undo`, a failed step's undo on the device (its replacement
  /// state, its decisions); a failure there (a device that failed for good)
  /// marks the runtime broken instead of replacing the step's own error.
  /// Throws nothing.
  template <typename Undo> void undoOnDevice(Undo &&undo);

  std::int32_t indexOf(std::uint64_t id, const char *what) const;
  void requireStep(const char *what) const;
  /// Loads the manifest of a step the tiers run beside the attention steps
  /// (draft rings, placement), with its PTX where the tiers run kernels.
  Manifest loadAuxiliaryStep(const std::string &stepDirectory, const char *what) const;
  /// Throws StateError unless an auxiliary step of `kind` (not `loaded` yet)
  /// may be loaded now; `what` names the call.
  void requireAuxiliaryLoad(const char *what, const char *kind, bool loaded) const;
  /// Throws unless the pool of an auxiliary step that moves this session's
  /// tokens (placement, decision, aging; `kind` names it) holds tokens of
  /// the session's pools (layers and row bytes) and fixes no other tier
  /// sizes than theirs.
  void requireSessionPool(const Manifest &manifest, const char *kind) const;
  /// Writes layer `layer`'s pending rows (verify_.rows) into the ring slots.
  void writePendingLayer(std::int32_t layer);
  /// selectGroup's work (which abandons a verify step when it throws).
  void select(std::int32_t group, const std::int32_t *rowIds, MemorySpace memory);
  /// attendLayer's work (which abandons a verify step when it throws).
  void attend(std::int32_t layer, const bf16_t *queries, bf16_t *output, MemorySpace memory);
  /// selectGroup of a verify step: pads past each block, checks the row ids
  /// (history and pending positions, causally), resolves the history rows
  /// and points the pending ones at the request's ring slots; counts misses.
  void selectVerifyGroup(std::int32_t group, const std::int32_t *rowIds);
  /// Counts group `group`'s resolved selections and those not in HBM
  /// (hostReads_).
  void countHostReads(std::int32_t group);
  /// After layer `layer` of a verify step ran: counts its host reads and
  /// checks them against the union of its group's missing rows.
  void countVerifyReads(std::int32_t layer);
  /// Whether layer `layer`'s group fetched missing rows into staging in the
  /// step in progress (a fetch launch of the form it ran), else its
  /// attention read them (fused).
  bool fetchedRowsInStep(std::int32_t layer) const;
  /// The verify step's pending rows read by layer `layer` against what the
  /// engine gave (checkInvariants); returns the selections with them as -1.
  const std::int32_t *checkPendingReads(std::int32_t layer);
  /// Acceptance of the verify step in progress (checks everything first).
  void runAcceptance(AcceptRule rule, std::int32_t vocab, const float *target,
                     const float *draftProbs, std::uint64_t seed, std::int32_t *accepted,
                     std::int32_t *next);
  /// Throws CapacityError when request `index` (named `name`) is at its
  /// maximum context.
  void requireRoomToAppend(std::int32_t index, const std::string &name) const;
  /// Appends one token to each of request indices `indices` (distinct, each
  /// with room), their rows `rows` [count][L][row_bytes]: the controller's
  /// appends, the host rows written, the copies handed over. All of it, or
  /// (no memory) nothing.
  void appendTokens(const std::vector<std::int32_t> &indices, const std::uint8_t *rows);
  /// Adds to `writes` (which has room for them) the host-store writes of
  /// request `index`'s newest row, one per layer, from `rows` [L][row_bytes].
  void addNewestRowWrites(std::int32_t index, const std::uint8_t *rows,
                          std::vector<RowWrite> &writes);
  /// Records the hashes of request `index`'s newest row (written) for the
  /// checks.
  void recordNewestRowHashes(std::int32_t index);
  /// Checks a group's step log against its selections (downloaded) and the
  /// controller's residency table; fills rowIds_ and slots_ for checkReads.
  void checkStepLog(std::int32_t group, const StepLog &log);
  /// Checks that each group whose layers share retrieval fetched each
  /// distinct missing row of its selections once (checkInvariants).
  void checkFetches();
  /// Checks layer `layer`'s reads (InvariantChecker::checkReads).
  void checkReads(std::int32_t layer);
  /// While a step's failure is handled: the first bad selection of group
  /// g (checkSelections on a download of the device's) when the failure is
  /// the runtime's own Error, else null. Throws nothing.
  std::exception_ptr rejectedSelections(std::int32_t group);
  /// Checks group g's selections [batch, Q, K] (host memory) against the
  /// batch's histories; throws InputError / OutOfRangeError naming one.
  void checkSelections(std::int32_t group, const std::int32_t *rowIds) const;
  /// Hands the controller's changes (changes_) to the tiers and empties the
  /// list. A copy that fails does not fail the call (the host store holds
  /// the rows): the batch is kept and retried, in order, before the next
  /// copies, step or check (repairHbm); the update that made the changes
  /// made room for it in pendingCopies_ before its first change, so that
  /// nothing here allocates (changes_ then takes a list of spareChanges_,
  /// if any, with its room). Throws only from the checks that follow
  /// (checkInvariants), once the changes are applied.
  void applyCopies();
  /// Runs `check`, a check of an update already made (checkInvariants): a
  /// check that runs out of memory does not fail the call, which was made,
  /// but is owed (checkOwed_), and the next step's end runs the full check.
  /// Violations throw as the check throws.
  template <typename Check> void checkAfterUpdate(Check &&check);
  /// Retries the copies that failed, in order; false (and the copies kept)
  /// while they still fail.
  bool repairHbm();
  /// repairHbm, or throws DeviceError naming `what`, the rows and the cause.
  void requireHbmCoherent(const char *what);
  /// True when no failed copy is waiting: every resident slot holds its row.
  bool hbmCoherent() const { return pendingCopies_.empty(); }
  std::int32_t requireDraft(std::uint64_t id, std::int64_t count, const void *rows,
                            const char *what);
  /// Whether the steps run on CUDA (config_.backend; Auto falls back to the
  /// CPU, saying why in fallbackReason_). `cudaRefusal` says why CUDA cannot
  /// run them ("" when it can). Throws Error when CUDA was asked and cannot.
  bool chooseCuda(const std::vector<Manifest> &manifests, const std::string &cudaRefusal);
  /// Sizes the tables of a step in progress for the loaded step.
  void allocateStepTables();
  /// What loading a step of `shape` on `layout` takes in host memory, by
  /// part (name, bytes), for the check against what the process may use.
  std::vector<std::pair<std::string, std::uint64_t>>
  hostMemoryParts(const TierLayout &layout, const ProblemShape &shape,
                  const ResidencyConfig &residency, bool cuda,
                  const std::vector<Manifest> &manifests) const;

  RuntimeConfig config_;
  std::string fallbackReason_;
  std::unique_ptr<Manifest> manifest_;
  StepPlan plan_; // of the first step loaded
  /// [group] its launches fetch the union of its missing rows (union_missing).
  std::vector<std::uint8_t> sharedRetrieval_;
  ProblemShape shape_{};
  TierLayout layout_{};
  std::unique_ptr<ResidencyController> controller_;
  Tiers tiers_;
  std::unordered_map<std::uint64_t, std::int32_t> index_; // id -> request index
  std::unique_ptr<InvariantChecker> checker_;
  std::unique_ptr<RequestRings> rings_;
  std::uint64_t steps_ = 0;
  bool draftStepLoaded_ = false;
  bool placementStepLoaded_ = false;
  bool decisionStepLoaded_ = false;
  bool agingStepLoaded_ = false;
  /// [group] the excess word the device holds (before its recorded appends)
  /// and the appends replayed but not yet applied to the controller.
  std::vector<std::int64_t> deviceExcess_;
  /// [group] buffers for the tables given to and taken from the device,
  /// kept from step to step (giveStateToDevice, takeStateFromDevice).
  std::vector<DeviceGroupState> deviceStates_;
  std::vector<std::size_t> agingPending_;
  /// The step in progress ends with the device's decisions (and, with
  /// checkInvariants, the host's beside them: shadowDecisions_).
  bool stepDecides_ = false;
  bool shadowDecisions_ = false;
  bool verifyStarting_ = false; // beginStep runs for a verify step
  /// The controller's changes since the last applyCopies, in the order it
  /// made them: the copies into HBM it reports and (with a placement step,
  /// its release log) the rows that left HBM.
  std::vector<RowCopy> changes_;
  /// Batches of changes whose copy into HBM failed, oldest first, and the
  /// last failure.
  std::vector<std::vector<RowCopy>> pendingCopies_;
  std::exception_ptr pendingError_;
  /// A check after an update ran out of memory: the next step's end runs
  /// the full check (checkAfterUpdate).
  bool checkOwed_ = false;
  /// Empty lists with room for one appended token's changes: a batch whose
  /// copy fails takes changes_'s list into pendingCopies_, and changes_
  /// takes one of these, so that a verify step's commit (which makes them
  /// before it starts) allocates nothing however many of its copies fail.
  std::vector<std::vector<RowCopy>> spareChanges_;
  /// Set when an update stopped half-way (brokenIn_ names it, brokenBy_
  /// is what stopped it): the runtime cannot vouch for its tables, and
  /// every later call that needs a step refuses with StateError.
  const char *brokenIn_ = nullptr;
  std::exception_ptr brokenBy_;
  std::vector<std::int32_t> windowTokensLane_; // [B] of the step in progress

  // The step in progress.
  bool inStep_ = false;
  std::int64_t batch_ = 0;
  std::vector<std::int32_t> lanes_;               // [B] request index or -1
  std::vector<std::uint64_t> batchIds_;           // [batch] engine ids
  std::vector<std::int64_t> historyStart_;        // [B]
  std::vector<std::int32_t> historyLen_;          // [B]
  std::vector<std::vector<std::int32_t>> rowIds_; // [group][B*Q*K]
  std::vector<std::vector<std::int32_t>> slots_;  // [group][B*Q*K]
  /// [group] of the host-resolved selections: (selected, not in HBM) rows,
  /// which the CUDA tiers choose their attention kernels' form by.
  std::vector<std::pair<std::int64_t, std::int64_t>> hostReads_;
  std::vector<std::uint8_t> selected_;       // [group]
  std::vector<std::uint8_t> deviceSelected_; // [group] selections on the device
  std::vector<std::uint8_t> attended_;       // [layer]

  /// The verify step in progress (verifyBegin .. verifyAccept).
  struct VerifyStep {
    bool active = false;
    std::vector<std::int32_t> draftLens;       // [batch]
    std::vector<std::int32_t> drafts;          // [batch][Q-1], -1 after a block's drafts
    std::vector<std::uint8_t> rows;            // [batch][Q][L][row_bytes] pending KV
    std::vector<std::uint8_t> written;         // [layer] its pending rows are in place
    std::vector<std::int32_t> historyLen;      // [B] history + pending positions (the kernels')
    std::vector<std::int64_t> unionMissing;    // [group][B] distinct missing rows
    std::vector<std::int64_t> positionMissing; // [group][B] summed over positions
    std::vector<std::int32_t> masked;          // [B*Q*K] checkPendingReads' selections
    std::uint64_t hostRowsRead = 0;            // all layers so far
    std::vector<std::uint64_t> laneRead, laneMissing; // [B] over layers
  } verify_;
  bool acceptingVerify_ = false; // verifyAccept runs endStep
  bool wholeStep_ = false;       // step() attends: host outputs may wait for endStep
  SpecStats specTotals_;
  std::unordered_map<std::uint64_t, SpecStats> specByRequest_;
  std::array<bool, 2> acceptLoaded_{};     // [AcceptRule] an accept step is loaded
  std::optional<TopKShape> topK_;          // the top-k step's shapes, once loaded
  std::unique_ptr<Manifest> topKManifest_; // and the step, for the tiers

  /// Decisions on the device: the optional budget left that group g's
  /// next plan may fill from free slots.
  std::int32_t decisionBudget(std::int32_t group) const;
  /// Uploads every group's state to the device (own: the device owns it
  /// from now on, else it is a copy for the shadow check).
  void giveStateToDevice(bool own);
  /// Downloads every device-owned group's state into the controller.
  void takeStateFromDevice();
  /// Enqueues the replay of every device-owned group's recorded appends.
  void enqueueAppends();
  /// Waits for the replays and hands their slots to the controller.
  void applyAppends();
  /// Books a step the device decided (counts only).
  void bookDeviceDecisions();
  /// Compares the device's decisions of the step with the host's changes
  /// (copies and releases) and the device state with the controller's (shadow check;
  /// the step is complete: a difference throws InvariantError).
  void compareDecisions(const std::vector<RowCopy> &changes);

  /// Hands the loaded top-k step, if any, to `runner` when its PTX is
  /// there.
  void giveTopKStep(StepRunner &runner) const;
};

} // namespace dhs::runtime

#endif // DHS_RUNTIME_RUNTIME_H
