/*===- dhs_runtime.h - The dhs runtime's C API (C99) -----------------------===
 *
 * What a serving engine links to run decode-time sparse attention over the
 * load-adaptive KV hierarchy: create a runtime (CPU reference backend or a
 * CUDA device), load a step compiled by dhs-compile, admit requests with
 * their prefill KV, append decode tokens, run steps with the engine's
 * selections and queries, read outputs and statistics, finish requests.
 *
 * Conventions:
 *  - Every function returns a dhs_status; DHS_OK is 0. On failure,
 *    dhs_last_error() returns a one-line message (thread-local: each thread
 *    sees its own last failure; a successful call clears it; the pointer
 *    stays valid until this thread's next call). No C++
 *    exception ever crosses this boundary.
 *  - Handles are opaque; a null handle gives DHS_ERROR_INVALID_HANDLE.
 *  - KV rows are raw bytes of the step's row format (row_bytes each, e.g.
 *    1152 for mla_bf16: 576 bf16 values). bf16 values are uint16_t bit
 *    patterns.
 *  - Requests are named by the engine's 64-bit ids.
 *  - A runtime is not thread-safe: call it from one thread at a time.
 *  - A call that fails with DHS_ERROR_OUT_OF_MEMORY for want of host memory
 *    changes nothing. (What the device did cannot always be undone: a step
 *    the device decided that cannot be booked, a failed undo of a step on
 *    the device, a replay of appends the device rejected, decisions on the
 *    device that rejected its state part-way, a verify commit that fails
 *    part-way. After one of these every later call fails with
 *    DHS_ERROR_STATE naming it: the runtime cannot vouch for its tables,
 *    destroy it.)
 *
 * Layouts (row-major; batch = the number of requests in the step, at most
 * the step's B; groups = ceil(layers / layers_per_group)):
 *    prefill   [layers][history_len][row_bytes]
 *    rows      [layers][row_bytes]                      (one appended token)
 *    row_ids   [groups][batch][Q][K] int32, -1 = none   (dhs_step_run)
 *    queries   [layers][batch][Q][H][qk_dim] bf16       (dhs_step_run)
 *    output    [layers][batch][Q][H][v_dim] bf16        (dhs_step_run)
 *    draft     [count][layers][row_bytes]                (dhs_draft_append,
 *                                                         dhs_draft_read)
 *
 *===----------------------------------------------------------------------===*/

#ifndef DHS_RUNTIME_CAPI_C_API_H
#define DHS_RUNTIME_CAPI_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every call. */
typedef enum dhs_status {
  DHS_OK = 0,
  DHS_ERROR_INVALID_HANDLE = 1,   /**< a null runtime handle */
  DHS_ERROR_INVALID_ARGUMENT = 2, /**< a null pointer, a bad size or config,
                                       an id admitted twice, a bad batch */
  DHS_ERROR_OUT_OF_RANGE = 3,     /**< a row id outside its request's
                                       history, a layer or group that does
                                       not exist */
  DHS_ERROR_UNKNOWN_REQUEST = 4,  /**< a request id that is not admitted */
  DHS_ERROR_OUT_OF_MEMORY = 5,    /**< admission refused (the protected
                                       working set cannot be guaranteed),
                                       host store full, maximum context
                                       reached, an allocation failed */
  DHS_ERROR_NOT_LOADED = 6,       /**< no step is loaded */
  DHS_ERROR_STATE = 7,            /**< wrong order: a step in progress, a
                                       step loaded twice, a group selected
                                       twice, a layer not run */
  DHS_ERROR_STEP = 8,             /**< the step directory cannot be loaded
                                       (missing, malformed manifest, no PTX
                                       for CUDA, pool sizes that disagree) */
  DHS_ERROR_DEVICE = 9,           /**< CUDA unavailable or failed, kernels
                                       rejected their input */
  DHS_ERROR_INVARIANT = 10,       /**< the invariant checker found a
                                       violation, or the device's residency
                                       decisions rejected its state */
  DHS_ERROR_INTERNAL = 11         /**< anything else */
} dhs_status;

/** Where attention runs. */
typedef enum dhs_backend {
  DHS_BACKEND_CPU = 0,  /**< the CPU reference backend */
  DHS_BACKEND_CUDA = 1, /**< a CUDA device (error if unusable) */
  DHS_BACKEND_AUTO = 2  /**< CUDA if usable, else the CPU */
} dhs_backend;

/** How spare HBM is used. */
typedef enum dhs_policy {
  DHS_POLICY_ADAPTIVE = 0, /**< optional residency shares spare slots */
  DHS_POLICY_FIXED = 1     /**< a fixed hot buffer per request (HiSparse) */
} dhs_policy;

/** Which hot row gives up its slot. */
typedef enum dhs_replacement {
  DHS_REPLACEMENT_DEFAULT = 0, /**< CLOCK for adaptive, LRU for fixed */
  DHS_REPLACEMENT_CLOCK = 1,
  DHS_REPLACEMENT_LRU = 2,
  DHS_REPLACEMENT_LRU2 = 3 /**< LRU with frequency (LRU-2) */
} dhs_replacement;

/** Where step inputs and outputs live. */
typedef enum dhs_memory {
  DHS_MEMORY_HOST = 0,  /**< host pointers */
  DHS_MEMORY_DEVICE = 1 /**< device pointers (CUDA backend only) */
} dhs_memory;

/** Runtime configuration; fill with dhs_runtime_config_init first. */
typedef struct dhs_runtime_config {
  uint32_t struct_size;            /**< sizeof(dhs_runtime_config) */
  int32_t layers;                  /**< model layers (default 1) */
  int32_t layers_per_group;        /**< layers sharing a selection (1) */
  int32_t hbm_slots;               /**< HBM slots per layer; -1: the step's */
  int64_t host_rows;               /**< host-store rows per layer (65536) */
  int32_t max_requests;            /**< admitted at once (64) */
  int32_t newest_window;           /**< newest tokens protected (64) */
  int32_t draft_window;            /**< tokens per draft ring (0: none); the
                                        rings have memory of their own, no
                                        pool slots */
  int32_t hot_floor;               /**< guaranteed hot slots per request (0);
                                        fixed policy: the buffer size */
  int32_t policy;                  /**< dhs_policy (adaptive) */
  int32_t replacement;             /**< dhs_replacement (default) */
  int32_t max_promotions_per_step; /**< per request and group; -1: all */
  int32_t backend;                 /**< dhs_backend (CPU) */
  int32_t device;                  /**< CUDA device ordinal (0) */
  int32_t cpu_threads;             /**< CPU backend threads; 0: all (1) */
  int32_t check_invariants;        /**< nonzero: run the invariant checker */
  int32_t full_check_interval;     /**< steps between full checks (64) */
  int64_t write_back_rows;         /**< CUDA: tokens of each pool's write-back
                                        ring, where the steps' attentions
                                        write back (0: none) */
} dhs_runtime_config;

/** The loaded step's shape. */
typedef struct dhs_step_shape {
  int64_t batch;     /**< B: requests per step, at most */
  int64_t queries;   /**< Q: query positions per request */
  int64_t heads;     /**< H */
  int64_t topk;      /**< K: selections per query */
  int64_t qk_dim;    /**< query / key dims */
  int64_t v_dim;     /**< value (output) dims */
  int64_t row_bytes; /**< bytes per KV row */
  int32_t layers;    /**< model layers */
  int32_t groups;    /**< layer groups */
  int32_t hbm_slots; /**< HBM slots per layer */
} dhs_step_shape;

/** Statistics. */
typedef struct dhs_stats {
  uint64_t steps;         /**< completed steps */
  int64_t last_selected;  /**< distinct rows selected, last step */
  int64_t last_resident;  /**< of those, resident */
  int64_t last_fetched;   /**< of those, read from the host */
  int64_t last_promoted;  /**< fetched rows given a slot after it */
  int64_t last_evicted;   /**< hot rows evicted since the step before */
  int64_t total_selected; /**< sums over all steps */
  int64_t total_resident;
  int64_t total_fetched;
  int64_t total_promoted;
  int64_t total_evicted;
  int32_t admitted_requests;     /**< admitted now */
  int64_t hbm_bytes_used;        /**< occupied slots, all layers */
  int64_t hbm_bytes_capacity;    /**< all slots, all layers */
  int64_t host_bytes_used;       /**< reserved host ranges, all layers */
  int64_t host_bytes_capacity;   /**< the host store, all layers */
  int64_t optional_budget_slots; /**< optional budget, slots per group */
  int64_t optional_used_slots;   /**< optional rows in use, all groups */
  uint64_t graph_captures;       /**< CUDA: steps captured into a new graph */
  uint64_t graph_replays;        /**< CUDA: steps run by replaying a graph */
} dhs_stats;

/** The runtime (opaque). */
typedef struct dhs_runtime dhs_runtime;

/** Fills a config with the defaults (never fails for a non-null pointer). */
void dhs_runtime_config_init(dhs_runtime_config *config);

/** Creates a runtime with no step loaded. */
dhs_status dhs_runtime_create(const dhs_runtime_config *config, dhs_runtime **runtime);

/** Destroys a runtime and frees everything it holds (null is fine). */
void dhs_runtime_destroy(dhs_runtime *runtime);

/** Loads a step directory written by dhs-compile (manifest.json + PTX) and
 *  allocates the KV tiers. */
dhs_status dhs_runtime_load_step(dhs_runtime *runtime, const char *step_directory);

/** Loads a layer group's steps: `count` directories of the same step
 *  compiled once per layer index of its pool (layer = 0 .. G-1), in any
 *  order. The CUDA backend needs one per layer index when a pool holds a
 *  group's layers; the CPU backend runs every layer from any of them. */
dhs_status dhs_runtime_load_steps(dhs_runtime *runtime, const char *const *step_directories,
                                  size_t count);

/** CUDA backend: nonzero runs each step (all layers) as one CUDA graph,
 *  captured once and replayed while the step keeps its shape; zero turns
 *  graphs off. Between steps only. On the CPU backend turning them on is
 *  DHS_ERROR_DEVICE and off changes nothing. */
dhs_status dhs_runtime_set_cuda_graphs(dhs_runtime *runtime, int on);

/** CUDA backend: orders the runtime's device work with the engine's CUDA
 *  stream `stream` (a CUstream / cudaStream_t of the runtime's device in
 *  its primary context, as PyTorch's; NULL, the default: none). Each
 *  dhs_step_attend's kernels (with CUDA graphs, the step's launch in
 *  dhs_step_end) run after the work the engine enqueued on `stream` before
 *  the call, and work it enqueues on `stream` after the call returns runs
 *  after them: device selections, queries and outputs pass between the
 *  engine's kernels and the runtime's without host waits. Without it, an
 *  engine must finish writing device inputs before each call and may read
 *  device outputs only after dhs_step_end. Between steps only, after a step
 *  is loaded (DHS_ERROR_STATE otherwise, and for a stream on the CPU
 *  backend). The runtime keeps the handle: set NULL before destroying the
 *  stream. */
dhs_status dhs_runtime_set_stream(dhs_runtime *runtime, void *stream);

/** The loaded step's shape. */
dhs_status dhs_runtime_get_shape(const dhs_runtime *runtime, dhs_step_shape *shape);

/** The backend in words into `buffer` (truncated, always terminated). */
dhs_status dhs_runtime_describe(const dhs_runtime *runtime, char *buffer, size_t size);

/** Statistics. */
dhs_status dhs_runtime_get_stats(const dhs_runtime *runtime, dhs_stats *stats);

/** The form layer `layer`'s launches ran in the last step (or the one in
 *  progress), as its form share: where the loaded step holds several forms
 *  of a layer group (dhs-compile --overlap-retrieval: its fused attentions
 *  up to 8% of the group's selected rows missing from HBM, one fetch of
 *  whole tokens and staged attentions above), the line at or above the
 *  share the step ran at (0.02: the resident kernels, 0.08: fused); 1 for
 *  the form above every line, or a layer of one form (docs/runtime.md, "A
 *  layer group's forms"). */
dhs_status dhs_runtime_get_form_share(const dhs_runtime *runtime, int32_t layer, double *share);

/** Admits request `id` with `history_len` prefill rows (`prefill` may be
 *  null when history_len is 0) and room for `max_context` rows. Refused
 *  with DHS_ERROR_OUT_OF_MEMORY, changing nothing, when its protected
 *  working set cannot be guaranteed. */
dhs_status dhs_request_admit(dhs_runtime *runtime, uint64_t id, int64_t history_len,
                             int64_t max_context, const void *prefill);

/** Appends one decode token's rows [layers][row_bytes] (host memory). */
dhs_status dhs_request_append(dhs_runtime *runtime, uint64_t id, const void *rows);

/** Appends one decode token to each of `count` distinct requests `ids`, rows
 *  [count][layers][row_bytes]: as dhs_request_append for each in order, the
 *  copies into HBM made together. Checks every request first (nothing
 *  changes on an error). */
dhs_status dhs_request_append_batch(dhs_runtime *runtime, const uint64_t *ids, int64_t count,
                                    const void *rows);

/** Finishes a request: frees its slots and host rows. */
dhs_status dhs_request_finish(dhs_runtime *runtime, uint64_t id);

/** History length of a request into `length`. */
dhs_status dhs_request_length(const dhs_runtime *runtime, uint64_t id, int64_t *length);

/** A whole step over `batch` requests (layouts above). On failure nothing
 *  is promoted and the runtime is ready for the next step. */
dhs_status dhs_step_run(dhs_runtime *runtime, const uint64_t *ids, int64_t batch,
                        const int32_t *row_ids, const uint16_t *queries, uint16_t *output,
                        dhs_memory memory);

/** A step in parts, for engines that compute each layer's queries from the
 *  previous layer: begin, then per group select (row_ids [batch][Q][K]),
 *  per layer attend (queries [batch][Q][H][qk_dim], output [batch][Q][H]
 *  [v_dim]), then end (or abort). */
dhs_status dhs_step_begin(dhs_runtime *runtime, const uint64_t *ids, int64_t batch);
/** Group `group`'s selections for the step in progress, in `memory`.
 *  Device selections (CUDA, with steps that resolve them on
 *  the device and a placement step) never wait for the host; a bad row id
 *  among them makes dhs_step_end fail with DHS_ERROR_OUT_OF_RANGE. The
 *  step's work reads device selections from `row_ids`: keep the buffer
 *  unchanged until dhs_step_end returns. */
dhs_status dhs_step_select(dhs_runtime *runtime, int32_t group, const int32_t *row_ids,
                           dhs_memory memory);
/** Layer `layer`'s attention for the step in progress. A refused input
 *  leaves the step open; a failure of the layer's work (a launch, the
 *  device, memory) abandons it (nothing is promoted). Host output is
 *  complete when it returns (on CUDA this waits for the layer's kernels;
 *  with CUDA graphs on, outputs are complete when dhs_step_end returns);
 *  device output is ordered on the runtime's stream: the engine's work on
 *  its own stream may read it after dhs_runtime_set_stream, else after
 *  dhs_step_end. */
dhs_status dhs_step_attend(dhs_runtime *runtime, int32_t layer, const uint16_t *queries,
                           uint16_t *output, dhs_memory memory);
/** Ends the step: promotions, bookkeeping, checks. */
dhs_status dhs_step_end(dhs_runtime *runtime);
/** Abandons the step in progress (nothing is promoted). */
dhs_status dhs_step_abort(dhs_runtime *runtime);

/** Draft rings (config.draft_window > 0): each admitted request has, per
 *  layer group, a ring of draft_window tokens x (layers_per_group x
 *  row_bytes) in memory of its own (host memory on the CPU backend, device
 *  memory on CUDA), allocated at admission and freed at finish, outside
 *  the KV pools: admission reserves no pool slots for them, and residency
 *  never counts them. Token position p lives in ring slot p mod
 *  draft_window. */

/** Loads a compiled draft-ring step (e.g. examples/draft_ring_step.mlir
 *  through dhs-compile) after dhs_runtime_load_step. On CUDA its generated
 *  kernels (ring_index + copy_rows) do all ring work and it is required
 *  before any draft call (DHS_ERROR_STATE otherwise); the CPU backend only
 *  checks it. DHS_ERROR_STEP when it is not a draft-ring step or its rings
 *  are not draft_window tokens of layers_per_group x row_bytes. */
dhs_status dhs_runtime_load_draft_step(dhs_runtime *runtime, const char *step_directory);

/** Writes `count` raw tokens `rows` [count][layers][row_bytes] (host
 *  memory) at positions position .. position+count-1 of request `id`'s
 *  sliding-window rings (steps with a window); the request then has
 *  position + count raw tokens. DHS_ERROR_INVALID_ARGUMENT without a window,
 *  for count outside 1..ring, null rows or a negative position. */
dhs_status dhs_window_write(dhs_runtime *runtime, uint64_t id, int64_t position, int64_t count,
                            const void *rows);

/** Loads a compiled placement step (examples/place_rows_step.mlir compiled
 *  for the session's pools). On CUDA, promotions, appends and admissions are
 *  then carried out by its kernel and each layer group's residency map is
 *  kept on the device; the CPU backend only checks it. DHS_ERROR_STEP when
 *  it is not a placement step or its pool does not match; DHS_ERROR_STATE
 *  when one is loaded already or a step is in progress. */
dhs_status dhs_runtime_load_placement_step(dhs_runtime *runtime, const char *step_directory);

/** Loads a compiled decision step (examples/decision_step.mlir compiled for
 *  the session's shapes and pools: union_missing, sort_rows,
 *  plan_promotions, place_rows). On CUDA with resolving steps and a loaded
 *  placement step, every step whose selections are in device memory then
 *  ends with each layer group's promotions and releases decided and carried
 *  out on the device; the host reads counts. Needs the adaptive policy,
 *  CLOCK, hot floor 0 and the step's `promotions` equal to
 *  max_promotions_per_step. DHS_ERROR_STEP when it does not fit (or on the
 *  CPU backend); DHS_ERROR_STATE when one is loaded, no placement step is,
 *  or a step is in progress. */
dhs_status dhs_runtime_load_decision_step(dhs_runtime *runtime, const char *step_directory);

/** Loads a compiled aging step (examples/aging_step.mlir compiled for the
 *  session's requests and pools: age_rows, place_rows) after the decision
 *  step: appends between the steps the device decides are then recorded on
 *  the host and replayed on the device before the next step's kernels.
 *  DHS_ERROR_STEP when it does not fit; DHS_ERROR_STATE when one is loaded,
 *  no decision step is, or a step is in progress. */
dhs_status dhs_runtime_load_aging_step(dhs_runtime *runtime, const char *step_directory);

/** Writes `count` draft tokens `rows` [count][layers][row_bytes] (host
 *  memory) at positions position .. position+count-1 (mod draft_window) of
 *  request `id`'s draft rings. DHS_ERROR_UNKNOWN_REQUEST for an id not
 *  admitted; DHS_ERROR_INVALID_ARGUMENT for count < 1 or > draft_window,
 *  null rows, a negative position, or draft_window 0. */
dhs_status dhs_draft_append(dhs_runtime *runtime, uint64_t id, int64_t position, int64_t count,
                            const void *rows);

/** Reads the `count` newest draft tokens ending at `end` (positions
 *  end-count .. end-1) of request `id` into `out` [count][layers][row_bytes]
 *  (host memory). DHS_ERROR_OUT_OF_RANGE when a position was never written
 *  or has been overwritten (its slot holds another position); otherwise as
 *  dhs_draft_append. */
dhs_status dhs_draft_read(dhs_runtime *runtime, uint64_t id, int64_t end, int64_t count, void *out);

/** Speculative decoding: verify steps over the step in parts.
 *
 *  A verify step checks, per request, a block of drafted tokens: the loaded
 *  attention step's Q = gamma + 1 positions are the request's last accepted
 *  token (whose KV is not in its history yet) and up to gamma drafts. The
 *  engine begins it with the target's KV of those positions, selects and
 *  attends as in a step in parts, computes the target's logits or
 *  probabilities per position from the outputs, and ends it with
 *  dhs_verify_accept, which accepts a prefix of the drafts and appends the
 *  KV of the accepted positions to the history. Steps with Q > 1 reserve Q
 *  HBM slots per request and layer group at admission for these pending
 *  rows (counted like the newest window). Any call of a verify step that
 *  fails on its input or its work abandons it: nothing is committed, no KV
 *  is lost; a call refused for its order (DHS_ERROR_STATE) changes
 *  nothing, and the verify step goes on. */

/** Acceptance rules of dhs_verify_accept. */
typedef enum dhs_accept_rule {
  DHS_ACCEPT_GREEDY = 0,            /**< longest prefix matching the target's argmax */
  DHS_ACCEPT_REJECTION_SAMPLING = 1 /**< lossless: min(1, p/q), residual sample */
} dhs_accept_rule;

/** Begins a verify step over `batch` requests (batch <= the step's B; the
 *  step's Q = gamma + 1 >= 2). Request ids[b] verifies draft_lens[b] + 1
 *  positions (0 <= draft_lens[b] <= Q - 1): the token that follows its
 *  history (its last accepted token) and its draft tokens
 *  draft_tokens[b*(Q-1) + 0 .. draft_lens[b]-1] ([batch][Q-1] int32, the
 *  rest ignored; may be null when every draft_lens[b] is 0).
 *  rows [batch][Q][layers][row_bytes] (host memory): the target's KV of
 *  those positions, or NULL: then each layer's rows come from
 *  dhs_verify_write_rows before that layer's dhs_step_attend (in a
 *  transformer layer l's rows exist only after layer l-1 ran). They are
 *  PENDING: position j of request b is row id
 *  history_len(b) + j in this step's selections (position j may select its
 *  history and positions 0 .. j, causally), but nothing of them reaches the
 *  host store or the residency/replacement state until accepted. Then
 *  dhs_step_select per group (host memory) and dhs_step_attend per layer
 *  exactly as in a step in parts (positions beyond draft_lens[b] + 1 get
 *  selections of -1 and their output is unspecified), then
 *  dhs_verify_accept (or dhs_step_abort, which discards everything
 *  pending). Errors: DHS_ERROR_INVALID_ARGUMENT (a draft length outside
 *  0 .. Q-1, null pointers, batch), DHS_ERROR_UNKNOWN_REQUEST,
 *  DHS_ERROR_OUT_OF_MEMORY (the block would pass the request's maximum
 *  context), DHS_ERROR_STATE (a step in progress, a step with Q = 1); a
 *  row id outside a request's history and its positions up to the
 *  selecting one makes dhs_step_select fail with DHS_ERROR_OUT_OF_RANGE
 *  and abandons the verify step. */
dhs_status dhs_verify_begin(dhs_runtime *runtime, const uint64_t *ids, int64_t batch,
                            const int32_t *draft_lens, const int32_t *draft_tokens,
                            const void *rows);

/** Layer `layer`'s pending KV rows [batch][Q][row_bytes] (host memory) of
 *  the verify step in progress, begun with rows == NULL: required once per
 *  layer before that layer's dhs_step_attend (which otherwise fails with
 *  DHS_ERROR_STATE). Rows of positions past draft_lens[b] + 1 are ignored.
 *  DHS_ERROR_STATE: no verify step, or the layer's rows were given already
 *  (to dhs_verify_begin or here) or it attended; DHS_ERROR_OUT_OF_RANGE: no
 *  such layer; DHS_ERROR_INVALID_ARGUMENT: null rows. On error the verify
 *  step is abandoned, as for any call of a verify step. */
dhs_status dhs_verify_write_rows(dhs_runtime *runtime, int32_t layer, const void *rows);

/** Ends a verify step: runs acceptance (CUDA with a loaded accept step of
 *  the rule and vocabulary: the compiled accept kernel; otherwise the same
 *  rule on the host, with the same results for the same seed), then does
 *  what dhs_step_end does (promotions, bookkeeping, checks), then commits
 *  the KV of each request's first accepted[b] + 1 positions (its last
 *  accepted token and its accepted drafts) to its history (host store +
 *  HBM, as appends) and discards the rest without touching the host store
 *  or the residency state.
 *  target [batch][Q][vocab] f32: greedy: logits or probabilities (no NaN;
 *  argmax, lowest index on ties); rejection sampling: probabilities p
 *  (finite, >= 0, each row sums to 1 within 1e-3). Only the rows of each
 *  block's positions (j <= draft_lens[b]) are read and checked.
 *  draft_probs [batch][Q-1][vocab] f32: q, rejection sampling only (null
 *  for greedy), same checks, rows j < draft_lens[b].
 *  seed: with the request id and position (its history length),
 *  makes sampling reproducible and independent of the batch.
 *  Outputs: accepted[batch] (drafts accepted, 0 .. draft_lens[b]) and
 *  tokens[batch][Q] int32 (the accepted drafts, then the bonus or
 *  corrected token: accepted[b] + 1 valid entries, then -1).
 *  DHS_ERROR_STATE without a verify step in progress (nothing changes).
 *  On any other error (DHS_ERROR_INVALID_ARGUMENT: rule, vocab,
 *  probabilities, a draft token outside [0, vocab), null pointers) the
 *  verify step is abandoned: nothing is committed, no KV is lost and the
 *  runtime is ready for the next step. */
dhs_status dhs_verify_accept(dhs_runtime *runtime, int32_t rule, int32_t vocab, const float *target,
                             const float *draft_probs, uint64_t seed, int32_t *accepted,
                             int32_t *tokens);

/** Loads a compiled accept step (examples/accept_step.mlir or
 *  accept_sampling_step.mlir compiled with memref<B x (Q-1)> drafts for the
 *  loaded step's B and Q, any vocabulary), one per rule. On CUDA
 *  dhs_verify_accept then runs its kernel for that rule and vocabulary; the
 *  CPU backend only checks it. DHS_ERROR_STEP when it is not an accept step
 *  or its shapes do not match; DHS_ERROR_STATE during a step or when one of
 *  its rule is loaded. */
dhs_status dhs_runtime_load_accept_step(dhs_runtime *runtime, const char *step_directory);

/** The shapes of a top-k step. */
typedef struct dhs_topk_shape {
  int64_t batch;     /**< B: lanes per call, at most */
  int64_t positions; /**< Q: query positions per lane */
  int64_t scored;    /**< N: scored rows per position */
  int64_t k;         /**< K: selections per position */
} dhs_topk_shape;

/** Loads a compiled top-k step (examples/topk_step.mlir: dhs.topk over
 *  scores f32 [B][Q][N], history_len int32 [B], rows int32 [B][Q][K]) for
 *  dhs_topk; any time, once. Its shapes go to `shape` unless it is NULL.
 *  DHS_ERROR_INVALID_HANDLE (null runtime), DHS_ERROR_INVALID_ARGUMENT
 *  (null directory), DHS_ERROR_STEP (not a top-k step, or a manifest that
 *  does not load), DHS_ERROR_STATE (one is loaded already). */
dhs_status dhs_runtime_load_topk_step(dhs_runtime *runtime, const char *step_directory,
                                      dhs_topk_shape *shape);

/** Runs the loaded top-k step for `batch` lanes (1 .. B): for each lane b
 *  and position q of Q, the ids of the K highest of scores[b][q][0 .. N)
 *  among the rows position q sees, [0, history_len[b] - (Q - 1 - q)),
 *  into rows [batch][Q][K]: in descending score order, ties to the lower
 *  row id, -1 past the visible rows (the kernel's order of every float
 *  pattern: -0 below +0, NaNs by sign above +inf or below -inf). Host
 *  memory. On CUDA (an attention step loaded, the top-k step's PTX there)
 *  the compiled kernel runs; otherwise the host computes exactly what it
 *  does. DHS_ERROR_DEVICE when the kernel fails.
 *  DHS_ERROR_INVALID_HANDLE (null runtime), DHS_ERROR_NOT_LOADED (no
 *  top-k step), DHS_ERROR_INVALID_ARGUMENT (null pointers, a batch outside
 *  1 .. B, a history length outside 0 .. N; nothing written). */
dhs_status dhs_topk(dhs_runtime *runtime, const float *scores, const int32_t *history_len,
                    int64_t batch, int32_t *rows);

/** Speculation statistics (whole runtime, or one request with
 *  dhs_request_spec_stats). */
typedef struct dhs_spec_stats {
  uint64_t verify_steps;               /**< verify steps ended by dhs_verify_accept
                                            (a request's: the steps it was in) */
  uint64_t drafted;                    /**< draft tokens verified */
  uint64_t accepted;                   /**< of those, accepted */
  uint64_t emitted;                    /**< tokens emitted (accepted + bonus/corrected) */
  double mean_accepted_length;         /**< emitted / (request verify blocks) */
  uint64_t drafted_at[16];             /**< drafts verified at draft position i (i < 16) */
  uint64_t accepted_at[16];            /**< of those, accepted */
  uint64_t host_rows_read;             /**< host rows (one layer's row each) read by
                                            verify steps' attention: per layer the union
                                            of the positions' misses where retrieval is
                                            shared (the CPU counts and checks it every
                                            layer) */
  uint64_t host_rows_selected_missing; /**< sum over positions (and layers) of
                                      their missing rows (what a per-position
                                      fetch would read) */
} dhs_spec_stats;

/** Speculation statistics of the whole runtime. */
dhs_status dhs_runtime_get_spec_stats(const dhs_runtime *runtime, dhs_spec_stats *stats);
/** Speculation statistics of one admitted request (DHS_ERROR_UNKNOWN_REQUEST
 *  otherwise; a finished request's are gone). */
dhs_status dhs_request_spec_stats(const dhs_runtime *runtime, uint64_t id, dhs_spec_stats *stats);

/** Runs the full invariant check now (DHS_ERROR_INVARIANT on a violation). */
dhs_status dhs_runtime_check(dhs_runtime *runtime);

/** The message of this thread's last failed call ("" after a success),
 *  valid until this thread's next call into the runtime. */
const char *dhs_last_error(void);

/** The name of a status, e.g. "DHS_ERROR_OUT_OF_MEMORY". */
const char *dhs_status_name(dhs_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DHS_RUNTIME_CAPI_C_API_H */
