//===- dhs_runtime.cpp - The C API over dhs::runtime::Runtime -------------===//
//
// Every entry point catches everything: exceptions become a dhs_status and a
// thread-local message.
//
//===----------------------------------------------------------------------===//

#include "runtime/capi/dhs_runtime.h"

#include "runtime/capi/ErrorStatus.h"

#include "runtime/Runtime.h"
#include "runtime/abi/Contract.h"
#include "runtime/core/Error.h"
#include "runtime/cuda/CudaDriver.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

using namespace dhs::runtime;

// The C API's residency enums are the contract's (runtime/abi/Residency.def):
// dhs_policy counts as ResidencyPolicy does, dhs_replacement as Replacement
// does from 1 (0 is the policy's default).
static_assert(DHS_POLICY_ADAPTIVE == static_cast<int>(abi::ResidencyPolicy::Adaptive) &&
                  DHS_POLICY_FIXED == static_cast<int>(abi::ResidencyPolicy::Fixed) &&
                  abi::count<abi::ResidencyPolicy>() == 2,
              "dhs_policy and the contract's residency policies disagree");
static_assert(DHS_REPLACEMENT_CLOCK == 1 + static_cast<int>(abi::Replacement::Clock) &&
                  DHS_REPLACEMENT_LRU == 1 + static_cast<int>(abi::Replacement::Lru) &&
                  DHS_REPLACEMENT_LRU2 == 1 + static_cast<int>(abi::Replacement::Lru2) &&
                  abi::count<abi::Replacement>() == 3,
              "dhs_replacement and the contract's replacements disagree");

/// The opaque handle.
struct dhs_runtime {
  std::unique_ptr<Runtime> runtime;
  BackendKind backend = BackendKind::Cpu;
};

namespace {

thread_local std::string lastError;

dhs_status failWith(dhs_status status, const char *where, const std::string &message) {
  try {
    lastError = std::string(where) + ": " + message;
  } catch (...) {
    // No memory for the message: keep the status.
  }
  return status;
}

/// Runs `body`, turning every exception into a status. `generic` is the
/// status of a plain dhs::runtime::Error for this entry point.
template <typename Body>
dhs_status guarded(const char *where, dhs_status generic, Body &&body) noexcept {
  try {
    dhs_status status = body();
    if (status == DHS_OK)
      lastError.clear();
    return status;
  } catch (...) {
    std::string message;
    dhs_status status = DHS_ERROR_INTERNAL;
    try {
      status = statusOfException(std::current_exception(), generic, message);
    } catch (...) {
      // No memory for the message: keep the status.
    }
    return failWith(status, where, message);
  }
}

} // namespace

/// The status of a runtime error: its class's (the most derived first), or
/// `generic` for a plain Error.
static dhs_status statusOfError(const Error &e, dhs_status generic) {
  if (dynamic_cast<const OutOfRangeError *>(&e))
    return DHS_ERROR_OUT_OF_RANGE;
  if (dynamic_cast<const InputError *>(&e))
    return DHS_ERROR_INVALID_ARGUMENT;
  if (dynamic_cast<const UnknownRequestError *>(&e))
    return DHS_ERROR_UNKNOWN_REQUEST;
  if (dynamic_cast<const CapacityError *>(&e))
    return DHS_ERROR_OUT_OF_MEMORY;
  if (dynamic_cast<const StateError *>(&e))
    return DHS_ERROR_STATE;
  if (dynamic_cast<const InvariantError *>(&e))
    return DHS_ERROR_INVARIANT;
  if (dynamic_cast<const DeviceError *>(&e))
    return DHS_ERROR_DEVICE;
  return generic;
}

dhs_status dhs::runtime::statusOfException(const std::exception_ptr &error, dhs_status generic,
                                           std::string &message) {
  try {
    std::rethrow_exception(error);
  } catch (const Error &e) {
    message = e.what();
    return statusOfError(e, generic);
  } catch (const std::bad_alloc &) {
    message = "out of host memory";
    return DHS_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception &e) {
    message = std::string("internal error: ") + e.what();
    return DHS_ERROR_INTERNAL;
  } catch (...) {
    message = "internal error: an unknown exception";
    return DHS_ERROR_INTERNAL;
  }
}

namespace {

/// Entry point `where` on the runtime of `handle`: once the handle is
/// checked (and with `needsStep`, that a step is loaded), runs
/// `body(runtime)` guarded (`generic`: the status of a plain Error); DHS_OK
/// when `body` returns.
template <typename Handle, typename Body>
dhs_status onHandle(const char *where, dhs_status generic, Handle *handle, Body &&body,
                    bool needsStep = false) noexcept {
  return guarded(where, generic, [&] {
    if (!handle)
      return failWith(DHS_ERROR_INVALID_HANDLE, where, "null runtime handle");
    if (needsStep && !handle->runtime->stepLoaded())
      return failWith(DHS_ERROR_NOT_LOADED, where,
                      "no step is loaded (call dhs_runtime_load_step first)");
    body(*handle->runtime);
    return DHS_OK;
  });
}

/// onHandle for an entry point that needs a loaded step.
template <typename Handle, typename Body>
dhs_status onLoaded(const char *where, dhs_status generic, Handle *handle, Body &&body) noexcept {
  return onHandle(where, generic, handle, std::forward<Body>(body), /*needsStep=*/true);
}

/// Throws DeviceError when `handle` asked for the CUDA backend and no GPU
/// is usable (the runtime would fall back to the CPU).
void requireDevice(const dhs_runtime &handle) {
  if (handle.backend == BackendKind::Cuda && !CudaDriver::instance().available())
    throw DeviceError("the CUDA backend was asked for: " +
                      CudaDriver::instance().unavailableReason());
}

/// The step directory a caller passed; InputError when it is null.
std::string stepDirectory(const char *directory) {
  if (!directory)
    throw InputError("null step directory");
  return directory;
}

/// The integer a C caller passed as an enum. A C caller may pass any int
/// where the API takes an enum, and in C++ loading an enum object whose
/// value lies outside the enumerators' range is undefined: its bytes are
/// read instead.
template <typename Enum> int rawEnum(const Enum &value) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

MemorySpace memorySpace(const dhs_memory &memory) {
  const int raw = rawEnum(memory);
  if (raw == DHS_MEMORY_HOST)
    return MemorySpace::Host;
  if (raw == DHS_MEMORY_DEVICE)
    return MemorySpace::Device;
  throw InputError("memory must be DHS_MEMORY_HOST or DHS_MEMORY_DEVICE, not " +
                   std::to_string(raw));
}

RuntimeConfig toConfig(const dhs_runtime_config &c) {
  if (c.struct_size != sizeof(dhs_runtime_config))
    throw InputError("config.struct_size is " + std::to_string(c.struct_size) + ", expected " +
                     std::to_string(sizeof(dhs_runtime_config)) +
                     " (call dhs_runtime_config_init)");
  RuntimeConfig config;
  config.layers = c.layers;
  config.layersPerGroup = c.layers_per_group;
  config.hbmSlots = c.hbm_slots;
  config.hostRows = c.host_rows;
  config.maxRequests = c.max_requests;
  config.newestWindow = c.newest_window;
  config.draftWindow = c.draft_window;
  config.hotFloor = c.hot_floor;
  // The C enums are the contract's (checked above).
  if (c.policy < 0 || c.policy >= static_cast<std::int32_t>(abi::count<ResidencyPolicy>()))
    throw InputError("config.policy " + std::to_string(c.policy) + " is not a dhs_policy");
  config.policy = static_cast<ResidencyPolicy>(c.policy);
  if (c.replacement < 0 || c.replacement > static_cast<std::int32_t>(abi::count<Replacement>()))
    throw InputError("config.replacement " + std::to_string(c.replacement) +
                     " is not a dhs_replacement");
  if (c.replacement == DHS_REPLACEMENT_DEFAULT)
    config.replacement =
        config.policy == ResidencyPolicy::Adaptive ? Replacement::Clock : Replacement::Lru;
  else
    config.replacement = static_cast<Replacement>(c.replacement - 1);
  config.maxPromotionsPerStep = c.max_promotions_per_step;
  switch (c.backend) {
  case DHS_BACKEND_CPU:
    config.backend = BackendKind::Cpu;
    break;
  case DHS_BACKEND_CUDA:
    config.backend = BackendKind::Cuda;
    break;
  case DHS_BACKEND_AUTO:
    config.backend = BackendKind::Auto;
    break;
  default:
    throw InputError("config.backend " + std::to_string(c.backend) + " is not a dhs_backend");
  }
  config.device = c.device;
  if (c.cpu_threads < 0)
    throw InputError("config.cpu_threads must not be negative");
  config.cpuThreads = static_cast<unsigned>(c.cpu_threads);
  config.checkInvariants = c.check_invariants != 0;
  config.fullCheckInterval = c.full_check_interval;
  if (c.write_back_rows < 0)
    throw InputError("config.write_back_rows must not be negative, got " +
                     std::to_string(c.write_back_rows));
  config.writeBackRows = c.write_back_rows;
  return config;
}

} // namespace

extern "C" {

void dhs_runtime_config_init(dhs_runtime_config *config) {
  if (!config)
    return;
  std::memset(config, 0, sizeof(*config));
  RuntimeConfig defaults;
  config->struct_size = sizeof(dhs_runtime_config);
  config->layers = defaults.layers;
  config->layers_per_group = defaults.layersPerGroup;
  config->hbm_slots = defaults.hbmSlots;
  config->host_rows = defaults.hostRows;
  config->max_requests = defaults.maxRequests;
  config->newest_window = defaults.newestWindow;
  config->draft_window = defaults.draftWindow;
  config->hot_floor = defaults.hotFloor;
  config->policy = DHS_POLICY_ADAPTIVE;
  config->replacement = DHS_REPLACEMENT_DEFAULT;
  config->max_promotions_per_step = defaults.maxPromotionsPerStep;
  config->backend = DHS_BACKEND_CPU;
  config->device = defaults.device;
  config->cpu_threads = static_cast<int32_t>(defaults.cpuThreads);
  config->check_invariants = defaults.checkInvariants ? 1 : 0;
  config->full_check_interval = defaults.fullCheckInterval;
  config->write_back_rows = defaults.writeBackRows;
}

dhs_status dhs_runtime_create(const dhs_runtime_config *config, dhs_runtime **runtime) {
  return guarded("dhs_runtime_create", DHS_ERROR_INVALID_ARGUMENT, [&] {
    if (!runtime)
      throw InputError("null output handle pointer");
    *runtime = nullptr;
    if (!config)
      throw InputError("null config (fill one with dhs_runtime_config_init)");
    RuntimeConfig converted = toConfig(*config);
    auto handle = std::make_unique<dhs_runtime>();
    handle->runtime = std::make_unique<Runtime>(converted);
    handle->backend = converted.backend;
    *runtime = handle.release();
    return DHS_OK;
  });
}

void dhs_runtime_destroy(dhs_runtime *runtime) {
  try {
    delete runtime;
  } catch (...) {
    // Destructors do not throw; nothing to report here anyway.
  }
}

dhs_status dhs_runtime_load_step(dhs_runtime *runtime, const char *step_directory) {
  return onHandle("dhs_runtime_load_step", DHS_ERROR_STEP, runtime, [&](Runtime &rt) {
    const std::string directory = stepDirectory(step_directory);
    requireDevice(*runtime);
    rt.loadStep(directory);
  });
}

dhs_status dhs_runtime_load_steps(dhs_runtime *runtime, const char *const *step_directories,
                                  size_t count) {
  return onHandle("dhs_runtime_load_steps", DHS_ERROR_STEP, runtime, [&](Runtime &rt) {
    if (count == 0 || !step_directories)
      throw InputError("no step directories (null list or count 0)");
    std::vector<std::string> directories;
    for (size_t i = 0; i < count; ++i) {
      if (!step_directories[i])
        throw InputError("step directory " + std::to_string(i) + " is null");
      directories.emplace_back(step_directories[i]);
    }
    requireDevice(*runtime);
    rt.loadSteps(directories);
  });
}

dhs_status dhs_runtime_load_draft_step(dhs_runtime *runtime, const char *step_directory) {
  return onLoaded("dhs_runtime_load_draft_step", DHS_ERROR_STEP, runtime,
                  [&](Runtime &rt) { rt.loadDraftStep(stepDirectory(step_directory)); });
}

dhs_status dhs_window_write(dhs_runtime *runtime, uint64_t id, int64_t position, int64_t count,
                            const void *rows) {
  return onLoaded("dhs_window_write", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.writeWindow(id, position, count, rows); });
}

dhs_status dhs_runtime_load_placement_step(dhs_runtime *runtime, const char *step_directory) {
  return onLoaded("dhs_runtime_load_placement_step", DHS_ERROR_STEP, runtime,
                  [&](Runtime &rt) { rt.loadPlacementStep(stepDirectory(step_directory)); });
}

dhs_status dhs_runtime_load_decision_step(dhs_runtime *runtime, const char *step_directory) {
  return onLoaded("dhs_runtime_load_decision_step", DHS_ERROR_STEP, runtime,
                  [&](Runtime &rt) { rt.loadDecisionStep(stepDirectory(step_directory)); });
}

dhs_status dhs_runtime_load_aging_step(dhs_runtime *runtime, const char *step_directory) {
  return onLoaded("dhs_runtime_load_aging_step", DHS_ERROR_STEP, runtime,
                  [&](Runtime &rt) { rt.loadAgingStep(stepDirectory(step_directory)); });
}

dhs_status dhs_draft_append(dhs_runtime *runtime, uint64_t id, int64_t position, int64_t count,
                            const void *rows) {
  return onLoaded("dhs_draft_append", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.appendDraft(id, position, count, rows); });
}

dhs_status dhs_draft_read(dhs_runtime *runtime, uint64_t id, int64_t end, int64_t count,
                          void *out) {
  return onLoaded("dhs_draft_read", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.readDraft(id, end, count, out); });
}

dhs_status dhs_runtime_set_cuda_graphs(dhs_runtime *runtime, int on) {
  return onLoaded("dhs_runtime_set_cuda_graphs", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.setCudaGraphs(on != 0); });
}

dhs_status dhs_runtime_set_stream(dhs_runtime *runtime, void *stream) {
  return onLoaded("dhs_runtime_set_stream", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.setEngineStream(stream); });
}

dhs_status dhs_runtime_get_shape(const dhs_runtime *runtime, dhs_step_shape *shape) {
  return onLoaded("dhs_runtime_get_shape", DHS_ERROR_INTERNAL, runtime, [&](const Runtime &rt) {
    if (!shape)
      throw InputError("null shape pointer");
    const ProblemShape &s = rt.shape();
    shape->batch = s.batch;
    shape->queries = s.queries;
    shape->heads = s.heads;
    shape->topk = s.topk;
    shape->qk_dim = s.qkDim;
    shape->v_dim = s.vDim;
    shape->row_bytes = rt.rowBytes();
    shape->groups = rt.groups();
    shape->hbm_slots = rt.controller().config().hbmSlots;
    shape->layers = rt.layers();
  });
}

dhs_status dhs_runtime_describe(const dhs_runtime *runtime, char *buffer, size_t size) {
  return onHandle("dhs_runtime_describe", DHS_ERROR_INTERNAL, runtime, [&](const Runtime &rt) {
    if (!buffer || size == 0)
      throw InputError("null or empty buffer");
    std::string text = rt.backendDescription();
    if (!rt.fallbackReason().empty())
      text += " (CUDA not used: " + rt.fallbackReason() + ")";
    std::size_t n = std::min(size - 1, text.size());
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  });
}

dhs_status dhs_runtime_get_stats(const dhs_runtime *runtime, dhs_stats *stats) {
  return onHandle("dhs_runtime_get_stats", DHS_ERROR_INTERNAL, runtime, [&](const Runtime &rt) {
    if (!stats)
      throw InputError("null stats pointer");
    const RuntimeStats s = rt.stats();
    std::memset(stats, 0, sizeof(*stats));
    stats->steps = s.steps;
    stats->last_selected = s.lastStep.selected;
    stats->last_resident = s.lastStep.resident;
    stats->last_fetched = s.lastStep.fetched;
    stats->last_promoted = s.lastStep.promoted;
    stats->last_evicted = s.lastStep.evicted;
    stats->total_selected = s.totals.selected;
    stats->total_resident = s.totals.resident;
    stats->total_fetched = s.totals.fetched;
    stats->total_promoted = s.totals.promoted;
    stats->total_evicted = s.totals.evicted;
    stats->admitted_requests = s.admittedRequests;
    stats->hbm_bytes_used = s.hbmBytesUsed;
    stats->hbm_bytes_capacity = s.hbmBytesCapacity;
    stats->host_bytes_used = s.hostBytesUsed;
    stats->host_bytes_capacity = s.hostBytesCapacity;
    stats->optional_budget_slots = s.optionalBudgetSlots;
    stats->optional_used_slots = s.optionalUsedSlots;
    stats->graph_captures = s.graphCaptures;
    stats->graph_replays = s.graphReplays;
  });
}

dhs_status dhs_runtime_get_form_share(const dhs_runtime *runtime, int32_t layer, double *share) {
  return onLoaded("dhs_runtime_get_form_share", DHS_ERROR_INTERNAL, runtime,
                  [&](const Runtime &rt) {
                    if (!share)
                      throw InputError("null share pointer");
                    *share = rt.formShare(layer);
                  });
}

dhs_status dhs_request_admit(dhs_runtime *runtime, uint64_t id, int64_t history_len,
                             int64_t max_context, const void *prefill) {
  return onLoaded("dhs_request_admit", DHS_ERROR_INTERNAL, runtime,
                  [&](Runtime &rt) { rt.admit(id, history_len, max_context, prefill); });
}

dhs_status dhs_request_append(dhs_runtime *runtime, uint64_t id, const void *rows) {
  return onLoaded("dhs_request_append", DHS_ERROR_INTERNAL, runtime,
                  [&](Runtime &rt) { rt.append(id, rows); });
}

dhs_status dhs_request_append_batch(dhs_runtime *runtime, const uint64_t *ids, int64_t count,
                                    const void *rows) {
  return onLoaded("dhs_request_append_batch", DHS_ERROR_INTERNAL, runtime,
                  [&](Runtime &rt) { rt.appendBatch(ids, count, rows); });
}

dhs_status dhs_request_finish(dhs_runtime *runtime, uint64_t id) {
  return onLoaded("dhs_request_finish", DHS_ERROR_INTERNAL, runtime,
                  [&](Runtime &rt) { rt.finish(id); });
}

dhs_status dhs_request_length(const dhs_runtime *runtime, uint64_t id, int64_t *length) {
  return onLoaded("dhs_request_length", DHS_ERROR_INTERNAL, runtime, [&](const Runtime &rt) {
    if (!length)
      throw InputError("null length pointer");
    *length = rt.historyLen(id);
  });
}

dhs_status dhs_step_run(dhs_runtime *runtime, const uint64_t *ids, int64_t batch,
                        const int32_t *row_ids, const uint16_t *queries, uint16_t *output,
                        dhs_memory memory) {
  return onLoaded("dhs_step_run", DHS_ERROR_DEVICE, runtime, [&](Runtime &rt) {
    rt.step(ids, batch, row_ids, queries, output, memorySpace(memory));
  });
}

dhs_status dhs_step_begin(dhs_runtime *runtime, const uint64_t *ids, int64_t batch) {
  return onLoaded("dhs_step_begin", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.beginStep(ids, batch); });
}

dhs_status dhs_step_select(dhs_runtime *runtime, int32_t group, const int32_t *row_ids,
                           dhs_memory memory) {
  return onLoaded("dhs_step_select", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.selectGroup(group, row_ids, memorySpace(memory)); });
}

dhs_status dhs_step_attend(dhs_runtime *runtime, int32_t layer, const uint16_t *queries,
                           uint16_t *output, dhs_memory memory) {
  return onLoaded("dhs_step_attend", DHS_ERROR_DEVICE, runtime, [&](Runtime &rt) {
    rt.attendLayer(layer, queries, output, memorySpace(memory));
  });
}

dhs_status dhs_step_end(dhs_runtime *runtime) {
  return onLoaded("dhs_step_end", DHS_ERROR_DEVICE, runtime, [&](Runtime &rt) { rt.endStep(); });
}

dhs_status dhs_verify_begin(dhs_runtime *runtime, const uint64_t *ids, int64_t batch,
                            const int32_t *draft_lens, const int32_t *draft_tokens,
                            const void *rows) {
  return onLoaded("dhs_verify_begin", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.verifyBegin(ids, batch, draft_lens, draft_tokens, rows); });
}
dhs_status dhs_verify_write_rows(dhs_runtime *runtime, int32_t layer, const void *rows) {
  return onLoaded("dhs_verify_write_rows", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.verifyWriteRows(layer, rows); });
}
dhs_status dhs_verify_accept(dhs_runtime *runtime, int32_t rule, int32_t vocab, const float *target,
                             const float *draft_probs, uint64_t seed, int32_t *accepted,
                             int32_t *tokens) {
  return onLoaded("dhs_verify_accept", DHS_ERROR_DEVICE, runtime, [&](Runtime &rt) {
    rt.verifyAccept(static_cast<AcceptRule>(rule), vocab, target, draft_probs, seed, accepted,
                    tokens);
  });
}
dhs_status dhs_runtime_load_accept_step(dhs_runtime *runtime, const char *step_directory) {
  return onLoaded("dhs_runtime_load_accept_step", DHS_ERROR_STEP, runtime,
                  [&](Runtime &rt) { rt.loadAcceptStep(stepDirectory(step_directory)); });
}
dhs_status dhs_runtime_load_topk_step(dhs_runtime *runtime, const char *step_directory,
                                      dhs_topk_shape *shape) {
  return onHandle("dhs_runtime_load_topk_step", DHS_ERROR_STEP, runtime, [&](Runtime &rt) {
    rt.loadTopKStep(stepDirectory(step_directory));
    if (shape) {
      const TopKShape &s = *rt.topKStep();
      *shape = dhs_topk_shape{s.batch, s.positions, s.scored, s.k};
    }
  });
}
dhs_status dhs_topk(dhs_runtime *runtime, const float *scores, const int32_t *history_len,
                    int64_t batch, int32_t *rows) {
  const char *where = "dhs_topk";
  return guarded(where, DHS_ERROR_INTERNAL, [&] {
    if (!runtime)
      return failWith(DHS_ERROR_INVALID_HANDLE, where, "null runtime handle");
    if (!runtime->runtime->topKStep())
      return failWith(DHS_ERROR_NOT_LOADED, where,
                      "no top-k step is loaded (call dhs_runtime_load_topk_step first)");
    runtime->runtime->topK(scores, history_len, batch, rows);
    return DHS_OK;
  });
}
static void copySpecStats(const SpecStats &s, dhs_spec_stats *stats) {
  std::memset(stats, 0, sizeof(*stats));
  stats->verify_steps = s.verifySteps;
  stats->drafted = s.drafted;
  stats->accepted = s.accepted;
  stats->emitted = s.emitted;
  stats->mean_accepted_length = s.meanAcceptedLength();
  static_assert(SpecStats::kPositions == std::size(dhs_spec_stats{}.drafted_at));
  std::copy(s.draftedAt.begin(), s.draftedAt.end(), stats->drafted_at);
  std::copy(s.acceptedAt.begin(), s.acceptedAt.end(), stats->accepted_at);
  stats->host_rows_read = s.hostRowsRead;
  stats->host_rows_selected_missing = s.hostRowsSelectedMissing;
}
dhs_status dhs_runtime_get_spec_stats(const dhs_runtime *runtime, dhs_spec_stats *stats) {
  return onHandle("dhs_runtime_get_spec_stats", DHS_ERROR_INTERNAL, runtime,
                  [&](const Runtime &rt) {
                    if (!stats)
                      throw InputError("null stats pointer");
                    copySpecStats(rt.specStats(), stats);
                  });
}
dhs_status dhs_request_spec_stats(const dhs_runtime *runtime, uint64_t id, dhs_spec_stats *stats) {
  return onLoaded("dhs_request_spec_stats", DHS_ERROR_INTERNAL, runtime, [&](const Runtime &rt) {
    if (!stats)
      throw InputError("null stats pointer");
    copySpecStats(rt.specStats(id), stats);
  });
}
dhs_status dhs_step_abort(dhs_runtime *runtime) {
  return onLoaded("dhs_step_abort", DHS_ERROR_DEVICE, runtime,
                  [&](Runtime &rt) { rt.abortStep(); });
}

dhs_status dhs_runtime_check(dhs_runtime *runtime) {
  return onLoaded("dhs_runtime_check", DHS_ERROR_INVARIANT, runtime,
                  [&](Runtime &rt) { rt.checkInvariants(); });
}

const char *dhs_last_error(void) { return lastError.c_str(); }

const char *dhs_status_name(dhs_status status) {
  switch (rawEnum(status)) {
  case DHS_OK:
    return "DHS_OK";
  case DHS_ERROR_INVALID_HANDLE:
    return "DHS_ERROR_INVALID_HANDLE";
  case DHS_ERROR_INVALID_ARGUMENT:
    return "DHS_ERROR_INVALID_ARGUMENT";
  case DHS_ERROR_OUT_OF_RANGE:
    return "DHS_ERROR_OUT_OF_RANGE";
  case DHS_ERROR_UNKNOWN_REQUEST:
    return "DHS_ERROR_UNKNOWN_REQUEST";
  case DHS_ERROR_OUT_OF_MEMORY:
    return "DHS_ERROR_OUT_OF_MEMORY";
  case DHS_ERROR_NOT_LOADED:
    return "DHS_ERROR_NOT_LOADED";
  case DHS_ERROR_STATE:
    return "DHS_ERROR_STATE";
  case DHS_ERROR_STEP:
    return "DHS_ERROR_STEP";
  case DHS_ERROR_DEVICE:
    return "DHS_ERROR_DEVICE";
  case DHS_ERROR_INVARIANT:
    return "DHS_ERROR_INVARIANT";
  case DHS_ERROR_INTERNAL:
    return "DHS_ERROR_INTERNAL";
  }
  return "DHS_ERROR_UNKNOWN_STATUS";
}

} // extern "C"
