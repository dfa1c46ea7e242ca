//===- dhs_runtime.hpp - A thin C++ wrapper over the C API ------*- C++ -*-===//
//
// Header-only RAII over dhs_runtime.h: dhs::api::Runtime owns a handle and
// turns every failing status into a dhs::api::Error carrying the status and
// dhs_last_error()'s message. Nothing here depends on the runtime's C++
// internals: an engine needs only this header, dhs_runtime.h and the
// library.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CAPI_C_API_HPP
#define DHS_RUNTIME_CAPI_C_API_HPP

#include "runtime/capi/dhs_runtime.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dhs::api {

/// A failed C API call.
class Error : public std::runtime_error {
public:
  /// An error for `status` with `message`.
  Error(dhs_status status, const std::string &message)
      : std::runtime_error(message), status_(status) {}
  /// The status the call returned.
  dhs_status status() const { return status_; }

private:
  dhs_status status_;
};

/// Throws Error unless `status` is DHS_OK.
inline void check(dhs_status status) {
  if (status != DHS_OK)
    throw Error(status, std::string(dhs_status_name(status)) + ": " + dhs_last_error());
}

/// Default configuration (dhs_runtime_config_init).
inline dhs_runtime_config defaultConfig() {
  dhs_runtime_config config;
  dhs_runtime_config_init(&config);
  return config;
}

/// An owned runtime.
class Runtime {
public:
  /// Creates a runtime; throws Error.
  explicit Runtime(const dhs_runtime_config &config = defaultConfig()) {
    check(dhs_runtime_create(&config, &handle_));
  }
  ~Runtime() { dhs_runtime_destroy(handle_); }
  Runtime(Runtime &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Runtime &operator=(Runtime &&other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  /// The C handle.
  dhs_runtime *get() const { return handle_; }

  /// Loads a compiled step directory.
  void loadStep(const std::string &directory) {
    check(dhs_runtime_load_step(handle_, directory.c_str()));
  }
  /// Loads a layer group's steps (one per layer index of its pool).
  void loadSteps(const std::vector<std::string> &directories) {
    std::vector<const char *> names;
    for (const std::string &d : directories)
      names.push_back(d.c_str());
    check(dhs_runtime_load_steps(handle_, names.data(), names.size()));
  }
  /// CUDA backend: runs each step as one CUDA graph (captured, replayed).
  void setCudaGraphs(bool on) { check(dhs_runtime_set_cuda_graphs(handle_, on ? 1 : 0)); }
  /// CUDA backend: orders the runtime's device work with the engine's
  /// stream (see dhs_runtime_set_stream).
  void setStream(void *stream) { check(dhs_runtime_set_stream(handle_, stream)); }
  /// The loaded step's shape.
  dhs_step_shape shape() const {
    dhs_step_shape s;
    check(dhs_runtime_get_shape(handle_, &s));
    return s;
  }
  /// The backend in words.
  std::string describe() const {
    char text[256];
    check(dhs_runtime_describe(handle_, text, sizeof(text)));
    return text;
  }
  /// The form share layer `layer`'s launches ran at in the last step.
  double formShare(std::int32_t layer) const {
    double share = 0.0;
    check(dhs_runtime_get_form_share(handle_, layer, &share));
    return share;
  }
  /// Statistics.
  dhs_stats stats() const {
    dhs_stats s;
    check(dhs_runtime_get_stats(handle_, &s));
    return s;
  }

  /// Admits a request with its prefill [layers][history_len][row_bytes].
  void admit(std::uint64_t id, std::int64_t historyLen, std::int64_t maxContext,
             const void *prefill) {
    check(dhs_request_admit(handle_, id, historyLen, maxContext, prefill));
  }
  /// Appends one token's rows [layers][row_bytes].
  void append(std::uint64_t id, const void *rows) { check(dhs_request_append(handle_, id, rows)); }
  void appendBatch(const std::uint64_t *ids, std::int64_t count, const void *rows) {
    check(dhs_request_append_batch(handle_, ids, count, rows));
  }
  /// Finishes a request.
  void finish(std::uint64_t id) { check(dhs_request_finish(handle_, id)); }
  /// History length of a request.
  std::int64_t length(std::uint64_t id) const {
    std::int64_t n = 0;
    check(dhs_request_length(handle_, id, &n));
    return n;
  }

  /// A whole step (layouts in dhs_runtime.h).
  void step(const std::uint64_t *ids, std::int64_t batch, const std::int32_t *rowIds,
            const std::uint16_t *queries, std::uint16_t *output,
            dhs_memory memory = DHS_MEMORY_HOST) {
    check(dhs_step_run(handle_, ids, batch, rowIds, queries, output, memory));
  }
  /// A step in parts.
  void beginStep(const std::uint64_t *ids, std::int64_t batch) {
    check(dhs_step_begin(handle_, ids, batch));
  }
  /// Group selections of the step in progress (host or device memory).
  void select(std::int32_t group, const std::int32_t *rowIds, dhs_memory memory = DHS_MEMORY_HOST) {
    check(dhs_step_select(handle_, group, rowIds, memory));
  }
  /// One layer's attention of the step in progress.
  void attend(std::int32_t layer, const std::uint16_t *queries, std::uint16_t *output,
              dhs_memory memory = DHS_MEMORY_HOST) {
    check(dhs_step_attend(handle_, layer, queries, output, memory));
  }
  /// Ends the step in progress.
  void endStep() { check(dhs_step_end(handle_)); }
  /// Abandons the step in progress.
  void abortStep() { check(dhs_step_abort(handle_)); }
  /// Loads a compiled draft-ring step (required on CUDA before draft calls).
  void loadDraftStep(const std::string &directory) {
    check(dhs_runtime_load_draft_step(handle_, directory.c_str()));
  }
  /// Writes raw tokens [count][layers][row_bytes] into a request's
  /// sliding-window rings at positions position.. .
  void writeWindow(std::uint64_t id, std::int64_t position, std::int64_t count, const void *rows) {
    check(dhs_window_write(handle_, id, position, count, rows));
  }
  /// Loads a compiled placement step (promotions by kernel, device residency
  /// maps on CUDA).
  void loadPlacementStep(const std::string &directory) {
    check(dhs_runtime_load_placement_step(handle_, directory.c_str()));
  }
  /// Loads a compiled decision step (dhs_runtime_load_decision_step).
  void loadDecisionStep(const std::string &directory) {
    check(dhs_runtime_load_decision_step(handle_, directory.c_str()));
  }
  /// Loads a compiled aging step (dhs_runtime_load_aging_step).
  void loadAgingStep(const std::string &directory) {
    check(dhs_runtime_load_aging_step(handle_, directory.c_str()));
  }
  /// Writes `count` draft tokens [count][layers][row_bytes] at positions
  /// position .. position+count-1 of a request's draft rings.
  void appendDraft(std::uint64_t id, std::int64_t position, std::int64_t count, const void *rows) {
    check(dhs_draft_append(handle_, id, position, count, rows));
  }
  /// Reads the `count` draft tokens ending at `end` into `out`
  /// [count][layers][row_bytes].
  void readDraft(std::uint64_t id, std::int64_t end, std::int64_t count, void *out) {
    check(dhs_draft_read(handle_, id, end, count, out));
  }
  /// Runs the full invariant check.
  /// Begins a verify step (dhs_verify_begin).
  void verifyBegin(const std::uint64_t *ids, std::int64_t batch, const std::int32_t *draftLens,
                   const std::int32_t *draftTokens, const void *rows) {
    check(dhs_verify_begin(handle_, ids, batch, draftLens, draftTokens, rows));
  }
  /// Layer `layer`'s pending rows of a verify step begun without rows.
  void verifyWriteRows(std::int32_t layer, const void *rows) {
    check(dhs_verify_write_rows(handle_, layer, rows));
  }
  /// Ends a verify step: acceptance, then the commit (dhs_verify_accept).
  void verifyAccept(dhs_accept_rule rule, std::int32_t vocab, const float *target,
                    const float *draftProbs, std::uint64_t seed, std::int32_t *accepted,
                    std::int32_t *tokens) {
    check(dhs_verify_accept(handle_, rule, vocab, target, draftProbs, seed, accepted, tokens));
  }
  /// Loads a compiled accept step (dhs_runtime_load_accept_step).
  void loadAcceptStep(const std::string &directory) {
    check(dhs_runtime_load_accept_step(handle_, directory.c_str()));
  }
  /// Loads a compiled top-k step (dhs_runtime_load_topk_step); its shapes.
  dhs_topk_shape loadTopKStep(const std::string &directory) {
    dhs_topk_shape shape;
    check(dhs_runtime_load_topk_step(handle_, directory.c_str(), &shape));
    return shape;
  }
  /// Runs the loaded top-k step (dhs_topk).
  void topK(const float *scores, const std::int32_t *historyLen, std::int64_t batch,
            std::int32_t *rows) {
    check(dhs_topk(handle_, scores, historyLen, batch, rows));
  }
  /// Speculation statistics of the runtime.
  dhs_spec_stats specStats() const {
    dhs_spec_stats s;
    check(dhs_runtime_get_spec_stats(handle_, &s));
    return s;
  }
  /// Speculation statistics of one request.
  dhs_spec_stats specStats(std::uint64_t id) const {
    dhs_spec_stats s;
    check(dhs_request_spec_stats(handle_, id, &s));
    return s;
  }
  void checkInvariants() { check(dhs_runtime_check(handle_)); }

private:
  dhs_runtime *handle_ = nullptr;
};

} // namespace dhs::api

#endif // DHS_RUNTIME_CAPI_C_API_HPP
