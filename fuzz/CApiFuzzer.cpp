//===- CApiFuzzer.cpp - libFuzzer: sequences of C API calls ---------------===//
//
// The input is decoded into a runtime configuration, a step (one of a few
// small CPU steps: MLA bf16 and FP8 rows, layer-group pools, verify steps of
// 2 and 3 positions) and a sequence of up to 256 C API calls (admit, append,
// finish, draft append and read, whole steps and steps in parts, verify
// steps: begin with or without rows, per-layer rows, accept with either
// rule over one-hot, uniform or arbitrary distributions; the top-k step,
// window writes, checks, queries) with arbitrary arguments: ids, lengths,
// positions and counts drawn from boundary values (0, -1, 2^31, INT64_MAX,
// ...) as often as from small ones, null or valid pointers, memory spaces
// that do not exist.
//
// Speed (RELIABILITY.md): loading a step parses its manifest, most of an
// input's time under the sanitizers, so the calls that load auxiliary steps
// (draft-ring and placement loads, always refused here, and the top-k step)
// run at most once per input; host stores stay small (full checks hash
// every row).
//
// Buffers are sized for every call the API can accept (the harness never
// lies about a buffer's size), so whatever a sanitizer finds is the
// runtime's. Every call must return a status; DHS_ERROR_INTERNAL (an error
// nothing documents) and DHS_ERROR_INVARIANT (the invariant checker, on
// here, found corrupt state) abort, as does a final full check that fails.
//
//===----------------------------------------------------------------------===//

#include "runtime/capi/dhs_runtime.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/RowFormat.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

/// Reads the fuzzer's bytes; zeros once they run out.
class Reader {
public:
  Reader(const std::uint8_t *data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v = v << 8 | u8();
    return v;
  }
  std::uint64_t u64() { return static_cast<std::uint64_t>(u32()) << 32 | u32(); }
  /// An integer in [lo, hi].
  std::int64_t range(std::int64_t lo, std::int64_t hi) {
    const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(u32() % span);
  }
  bool flag() { return u8() & 1; }

  /// Small values most of the time, boundary values often, anything else
  /// sometimes.
  std::int64_t interesting(std::int64_t smallMax) {
    static const std::int64_t edges[] = {0,
                                         -1,
                                         -2,
                                         1,
                                         2,
                                         (std::int64_t(1) << 31) - 1,
                                         std::int64_t(1) << 31,
                                         -(std::int64_t(1) << 31),
                                         std::int64_t(1) << 32,
                                         std::numeric_limits<std::int64_t>::max(),
                                         std::numeric_limits<std::int64_t>::max() - 1,
                                         std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::min() + 1};
    switch (u8() % 4) {
    case 0:
    case 1:
      return range(0, smallMax);
    case 2:
      return edges[u8() % (sizeof(edges) / sizeof(edges[0]))];
    default:
      return static_cast<std::int64_t>(u64());
    }
  }

private:
  const std::uint8_t *data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// "[a,b,...]"
std::string dims(std::initializer_list<long> values) {
  std::string text = "[";
  for (long v : values)
    text += (text.size() > 1 ? "," : "") + std::to_string(v);
  return text + "]";
}

/// A manifest's memref argument.
std::string argument(int index, const char *role, const char *dtype, const std::string &shape) {
  return "{\"index\": " + std::to_string(index) + ", \"role\": \"" + role +
         "\", \"kind\": \"memref\", \"dtype\": \"" + dtype + "\", \"shape\": " + shape + "}";
}

/// A launch parameter passing argument `index`.
std::string param(int index, const char *role, const char *dtype, const std::string &shape) {
  return "{\"source\": \"argument\", \"role\": \"" + std::string(role) +
         "\", \"index\": " + std::to_string(index) + ", \"dtype\": \"" + dtype +
         "\", \"shape\": " + shape + "}";
}

/// A manifest of one sparse_attention step of [B, Q, H, K] over a pool of
/// `format` rows, `layers` per token (PTX absent: the CPU needs none).
std::string manifest(int B, int Q, int H, int K, const std::string &format, int layers) {
  const dhs::runtime::RowFormatInfo &info = dhs::runtime::rowFormatInfo(format);
  const std::string q = dims({B, Q, H, info.qkDim}), sel = dims({B, Q, K}), b = dims({B}),
                    out = dims({B, Q, H, info.vDim}), tier = dims({-1, layers, info.rowBytes});
  return "{\"format\": \"dhs-step-manifest\", \"version\": 2, \"arena_bytes\": 0, "
         "\"target\": {\"chip\": \"sm_90a\", \"features\": \"+ptx80\"}, \"step\": \"fuzz\", "
         "\"arguments\": [" +
         argument(0, "queries", "bf16", q) + ", " + argument(1, "row_ids", "i32", sel) + ", " +
         argument(2, "slots", "i32", sel) + ", " + argument(3, "history_start", "i64", b) + ", " +
         argument(4, "history_len", "i32", b) +
         ", {\"index\": 5, \"role\": \"kv_pool\", \"kind\": \"kv_pool\", \"format\": \"" + format +
         "\", \"layers\": " + std::to_string(layers) +
         ", \"row_bytes\": " + std::to_string(info.rowBytes) +
         ", \"row_elems\": " + std::to_string(info.rowBytes / 2) +
         ", \"qk_dim\": " + std::to_string(info.qkDim) +
         ", \"v_dim\": " + std::to_string(info.vDim) + ", \"hbm_slots\": -1, \"host_rows\": -1}, " +
         argument(6, "output", "bf16", out) +
         "], \"launches\": [{\"kernel\": \"k\", \"ptx\": \"k.ptx\", \"op\": \"sparse_attention\", "
         "\"softmax_scale\": 0.04, \"layer\": 0, \"grid\": [1,1,1], \"block\": [128,1,1], "
         "\"dynamic_shared_bytes\": 0, \"params\": [" +
         param(0, "queries", "bf16", q) + ", " + param(1, "row_ids", "i32", sel) + ", " +
         param(2, "slots", "i32", sel) + ", " + param(3, "history_start", "i64", b) + ", " +
         param(4, "history_len", "i32", b) +
         ", {\"source\": \"pool_hbm\", \"role\": \"hbm_tier\", \"index\": 5, \"dtype\": "
         "\"i8\", \"shape\": " +
         tier +
         "}, {\"source\": \"pool_host\", \"role\": \"host_tier\", \"index\": 5, \"dtype\": "
         "\"i8\", \"shape\": " +
         tier + "}, " + param(6, "output", "bf16", out) +
         ", {\"source\": \"status\", \"role\": \"status\", \"dtype\": \"i32\", " +
         "\"shape\": [1]}]}]}";
}

/// A manifest of one dhs.topk step: scores [B, Q, N], rows [B, Q, K].
std::string topkManifest(int B, int Q, int N, int K) {
  const std::string scores = dims({B, Q, N}), len = dims({B}), rows = dims({B, Q, K});
  return "{\"format\": \"dhs-step-manifest\", \"version\": 2, \"arena_bytes\": 0, "
         "\"target\": {\"chip\": \"sm_90a\", \"features\": \"+ptx80\"}, \"step\": \"topk\", "
         "\"arguments\": [" +
         argument(0, "scores", "f32", scores) + ", " + argument(1, "history_len", "i32", len) +
         ", " + argument(2, "row_ids", "i32", rows) +
         "], \"launches\": [{\"kernel\": \"topk\", \"ptx\": \"topk.ptx\", \"op\": \"topk\", "
         "\"grid\": [1,1,1], \"block\": [1024,1,1], \"dynamic_shared_bytes\": 0, \"params\": [" +
         param(0, "scores", "f32", scores) + ", " + param(1, "history_len", "i32", len) + ", " +
         param(2, "row_ids", "i32", rows) +
         ", {\"source\": \"status\", \"role\": \"status\", \"dtype\": \"i32\", \"shape\": [1]}]}]}";
}

/// The top-k step's shapes.
constexpr int kTopKB = 2, kTopKQ = 2, kTopKN = 8, kTopKK = 3;

struct StepKind {
  int B, Q, H, K;
  const char *format;
  int poolLayers; ///< 1, or the layer group's layers
};
const StepKind kSteps[] = {{2, 1, 1, 4, "mla_bf16", 1},
                           {3, 2, 2, 3, "mla_fp8", 1},
                           {2, 1, 1, 5, "mla_bf16", 2},
                           {1, 3, 1, 2, "v41_fp8", 1},
                           {2, 3, 1, 3, "mla_bf16", 2}};
constexpr int kStepCount = sizeof(kSteps) / sizeof(kSteps[0]);
/// Vocabulary sizes acceptance may be given (buffers hold this many).
constexpr int kVocab = 16;

/// The steps' directories, written once (the attention steps, then the
/// top-k step).
const std::vector<std::string> &stepDirectories() {
  // Never destroyed: the exit handler below still needs the names.
  static const std::vector<std::string> &dirs = *new std::vector<std::string>([] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    base += "/dhs-fuzz-capi-" + std::to_string(getpid());
    std::vector<std::string> result;
    for (int i = 0; i < kStepCount; ++i) {
      const StepKind &k = kSteps[i];
      std::string dir = base + "/step" + std::to_string(i);
      std::filesystem::create_directories(dir);
      std::ofstream(dir + "/manifest.json") << manifest(k.B, k.Q, k.H, k.K, k.format, k.poolLayers);
      result.push_back(dir);
    }
    std::string dir = base + "/topk";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/manifest.json") << topkManifest(kTopKB, kTopKQ, kTopKN, kTopKK);
    result.push_back(dir);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::filesystem::path(stepDirectories().front()).parent_path(),
                                  ec);
    });
    return result;
  }());
  return dirs;
}

/// Aborts on a status no input may cause.
void expect(dhs_status status, const char *call) {
  if (status == DHS_ERROR_INTERNAL || status == DHS_ERROR_INVARIANT) {
    std::fprintf(stderr, "dhs-fuzz-capi: %s returned %s: %s\n", call, dhs_status_name(status),
                 dhs_last_error());
    std::abort();
  }
  if (status != DHS_OK && dhs_last_error()[0] == '\0') {
    std::fprintf(stderr, "dhs-fuzz-capi: %s returned %s without a message\n", call,
                 dhs_status_name(status));
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Sizes the configuration allows stay far below this; a load that needed
  // more would be refused, not attempted.
  dhs::runtime::faults::setHostMemoryLimit(std::uint64_t(1) << 30);
  (void)stepDirectories();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  Reader in(data, size);
  // The configuration (within what the buffers below are sized for).
  dhs_runtime_config c;
  dhs_runtime_config_init(&c);
  const StepKind &kind = kSteps[in.u8() % kStepCount];
  c.layers = static_cast<std::int32_t>(in.range(1, 3));
  c.layers_per_group =
      kind.poolLayers > 1 ? kind.poolLayers : static_cast<std::int32_t>(in.range(1, c.layers));
  if (c.layers_per_group > c.layers)
    c.layers = c.layers_per_group;
  c.hbm_slots = static_cast<std::int32_t>(in.range(0, 96));
  c.host_rows = in.range(1, 128); // (small: full checks hash every row)
  c.max_requests = static_cast<std::int32_t>(in.range(1, 6));
  c.newest_window = static_cast<std::int32_t>(in.range(0, 6));
  c.draft_window = static_cast<std::int32_t>(in.range(0, 4));
  c.hot_floor = static_cast<std::int32_t>(in.range(0, 6));
  c.policy = static_cast<std::int32_t>(in.range(0, 1));
  c.replacement = static_cast<std::int32_t>(in.range(0, 3));
  c.max_promotions_per_step = static_cast<std::int32_t>(in.range(-1, 4));
  c.full_check_interval = static_cast<std::int32_t>(in.range(0, 4));
  c.check_invariants = 1;
  c.cpu_threads = 1;
  if (in.u8() % 16 == 0) // now and then a configuration the runtime must refuse
    c.max_requests = static_cast<std::int32_t>(in.interesting(8));

  dhs_runtime *rt = nullptr;
  dhs_status status = dhs_runtime_create(&c, &rt);
  expect(status, "dhs_runtime_create");
  if (status != DHS_OK)
    return 0;
  status = dhs_runtime_load_step(
      rt, stepDirectories()[static_cast<std::size_t>(&kind - kSteps)].c_str());
  expect(status, "dhs_runtime_load_step");
  if (status != DHS_OK) {
    dhs_runtime_destroy(rt);
    return 0;
  }
  dhs_step_shape shape;
  if (dhs_runtime_get_shape(rt, &shape) != DHS_OK)
    std::abort();

  // Buffers for every call that can succeed: prefill for a whole host
  // store, draft tokens for a whole ring (4), window tokens for 8.
  const std::size_t token = static_cast<std::size_t>(c.layers * shape.row_bytes);
  // Exactly that large (ASan sees a read past them); 0x3c bytes are finite
  // bf16 and FP8 values. (Filled by the vector: a byte loop here would
  // be most of the time, under coverage instrumentation.)
  const std::int64_t lanes = shape.batch;
  // Rows for 8 tokens of draft ring or window, or a verify step's [B][Q].
  const std::size_t rowTokens =
      std::max<std::size_t>(8, static_cast<std::size_t>(lanes * shape.queries));
  std::vector<std::uint8_t> prefill(static_cast<std::size_t>(c.host_rows) * token, 0x3c),
      rows(rowTokens * token, 0x3a), out(8 * token, 0);
  const std::size_t perLane = static_cast<std::size_t>(shape.queries * shape.topk);
  std::vector<std::int32_t> selections(static_cast<std::size_t>(shape.groups) *
                                       static_cast<std::size_t>(lanes) * perLane);
  std::vector<std::uint16_t> queries(
      static_cast<std::size_t>(c.layers * lanes * shape.queries * shape.heads * shape.qk_dim),
      0x3f80),
      output(
          static_cast<std::size_t>(c.layers * lanes * shape.queries * shape.heads * shape.v_dim));
  // Acceptance: distributions [B][Q][kVocab], outputs [B] and [B][Q].
  const std::size_t positions = static_cast<std::size_t>(lanes * shape.queries);
  std::vector<float> target(positions * kVocab), draftProbs(positions * kVocab);
  std::vector<std::int32_t> accepted(static_cast<std::size_t>(lanes)), tokens(positions);
  std::vector<std::int32_t> draftLens(static_cast<std::size_t>(lanes) + 1),
      draftTokens((static_cast<std::size_t>(lanes) + 1) * static_cast<std::size_t>(shape.queries));
  // The top-k step's buffers.
  std::vector<float> scores(kTopKB * kTopKQ * kTopKN);
  std::vector<std::int32_t> topkLen(kTopKB), topkRows(kTopKB * kTopKQ * kTopKK);
  bool triedAuxiliary = false;
  std::vector<std::uint64_t> live; // ids admitted (as far as the harness knows)
  auto pickId = [&]() -> std::uint64_t {
    if (!live.empty() && in.u8() % 4 != 0)
      return live[in.u8() % live.size()];
    return in.u8() % 3 == 0 ? in.u64() : static_cast<std::uint64_t>(in.range(0, 9));
  };
  auto pointer = [&](void *valid) -> void * { return in.u8() % 8 == 0 ? nullptr : valid; };
  auto memory = [&]() {
    const std::uint8_t m = in.u8() % 16;
    return static_cast<dhs_memory>(m == 0 ? 1 : m == 1 ? 7 : 0);
  };
  // Each row of `vocab` values: one-hot, uniform (exact for powers of two),
  // or arbitrary (negative, NaN, not summing to 1).
  auto fillDistributions = [&](float *values, std::size_t count, std::int64_t vocab) {
    const std::size_t n = static_cast<std::size_t>(std::clamp<std::int64_t>(vocab, 1, kVocab));
    for (std::size_t r = 0; r + n <= count; r += n) {
      const std::uint8_t how = in.u8() % 8;
      for (std::size_t i = 0; i < n; ++i) {
        float v;
        if (how < 4)
          v = i == in.u8() % n ? 1.0f : 0.0f;
        else if (how < 7)
          v = 1.0f / static_cast<float>(n);
        else {
          const std::uint32_t bits = in.u32();
          std::memcpy(&v, &bits, sizeof v);
        }
        values[r + i] = v;
      }
    }
  };
  bool begunWithRows = false;
  // dhs_verify_begin over up to B + 1 ids, with rows or without.
  auto verifyBegin = [&]() {
    std::vector<std::uint64_t> ids(static_cast<std::size_t>(lanes) + 1);
    for (std::uint64_t &id : ids)
      id = pickId();
    const std::int64_t batch = in.u8() % 8 == 0 ? in.interesting(4) : in.range(0, lanes);
    for (std::int32_t &len : draftLens)
      len = in.u8() % 8 == 0 ? static_cast<std::int32_t>(in.interesting(4))
                             : static_cast<std::int32_t>(in.range(0, shape.queries - 1));
    for (std::int32_t &t : draftTokens)
      t = in.u8() % 8 == 0 ? static_cast<std::int32_t>(in.interesting(kVocab))
                           : static_cast<std::int32_t>(in.range(0, kVocab - 1));
    begunWithRows = in.flag();
    const dhs_status begun =
        dhs_verify_begin(rt, static_cast<const std::uint64_t *>(pointer(ids.data())), batch,
                         static_cast<const std::int32_t *>(pointer(draftLens.data())),
                         static_cast<const std::int32_t *>(pointer(draftTokens.data())),
                         begunWithRows ? pointer(rows.data()) : nullptr);
    expect(begun, "dhs_verify_begin");
    return begun;
  };
  // dhs_verify_accept: vocabularies the buffers hold, or refused ones.
  auto verifyAccept = [&]() {
    const std::int32_t rule = in.u8() % 8 == 0 ? static_cast<std::int32_t>(in.interesting(2))
                                               : static_cast<std::int32_t>(in.range(0, 1));
    const std::int32_t vocab = in.u8() % 8 == 0
                                   ? static_cast<std::int32_t>(-in.range(0, 2))
                                   : static_cast<std::int32_t>(std::int64_t(1) << in.range(0, 4));
    fillDistributions(target.data(), target.size(), vocab);
    fillDistributions(draftProbs.data(), draftProbs.size(), vocab);
    expect(dhs_verify_accept(rt, rule, vocab, static_cast<const float *>(pointer(target.data())),
                             in.flag() ? nullptr : draftProbs.data(), in.u64(),
                             static_cast<std::int32_t *>(pointer(accepted.data())),
                             static_cast<std::int32_t *>(pointer(tokens.data()))),
           "dhs_verify_accept");
  };
  auto fillSelections = [&](std::int32_t *ids, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint8_t how = in.u8() % 8;
      ids[i] = how < 2   ? -1
               : how < 7 ? static_cast<std::int32_t>(in.range(0, 12))
                         : static_cast<std::int32_t>(in.interesting(16));
    }
  };

  for (int op = 0; op < 256 && !in.empty(); ++op) {
    switch (in.u8() % 20) {
    case 0:
    case 1: { // admit: history up to the host store's rows, or anything
      const std::uint64_t id = pickId();
      std::int64_t len = in.flag() ? in.range(0, c.host_rows) : in.interesting(c.host_rows);
      // (Unsigned: len + extra may wrap, as an engine's arithmetic might.)
      std::int64_t max =
          in.flag() ? static_cast<std::int64_t>(static_cast<std::uint64_t>(len) +
                                                static_cast<std::uint64_t>(in.range(0, 16)))
                    : in.interesting(c.host_rows);
      // A history longer than the host store can never be admitted, so
      // the prefill buffer (a whole host store) is always large enough.
      status = dhs_request_admit(rt, id, len, max, pointer(prefill.data()));
      expect(status, "dhs_request_admit");
      if (status == DHS_OK)
        live.push_back(id);
      break;
    }
    case 2:
    case 3:
      expect(dhs_request_append(rt, pickId(), pointer(rows.data())), "dhs_request_append");
      break;
    case 4: {
      const std::uint64_t id = pickId();
      status = dhs_request_finish(rt, id);
      expect(status, "dhs_request_finish");
      if (status == DHS_OK)
        live.erase(std::find(live.begin(), live.end(), id));
      break;
    }
    case 5: { // draft append: counts above 4 exceed every ring here
      const std::int64_t count = in.interesting(6);
      expect(dhs_draft_append(rt, pickId(), in.interesting(64), count, pointer(rows.data())),
             "dhs_draft_append");
      break;
    }
    case 6:
      expect(
          dhs_draft_read(rt, pickId(), in.interesting(64), in.interesting(6), pointer(out.data())),
          "dhs_draft_read");
      break;
    case 7:
    case 8:
    case 9: { // a whole step over up to B + 1 ids
      std::vector<std::uint64_t> ids(static_cast<std::size_t>(lanes) + 1);
      const std::int64_t batch = in.u8() % 8 == 0 ? in.interesting(4) : in.range(0, lanes);
      for (std::uint64_t &id : ids)
        id = pickId();
      fillSelections(selections.data(), selections.size());
      status = dhs_step_run(rt, static_cast<const std::uint64_t *>(pointer(ids.data())), batch,
                            static_cast<const std::int32_t *>(pointer(selections.data())),
                            static_cast<const std::uint16_t *>(pointer(queries.data())),
                            static_cast<std::uint16_t *>(pointer(output.data())), memory());
      expect(status, "dhs_step_run");
      break;
    }
    case 10: { // a step in parts, in any order
      std::vector<std::uint64_t> ids(static_cast<std::size_t>(lanes));
      for (std::uint64_t &id : ids)
        id = pickId();
      switch (in.u8() % 5) {
      case 0:
        expect(dhs_step_begin(rt, ids.data(), in.range(0, lanes)), "dhs_step_begin");
        break;
      case 1:
        fillSelections(selections.data(), static_cast<std::size_t>(lanes) * perLane);
        expect(dhs_step_select(rt, static_cast<std::int32_t>(in.interesting(3)),
                               static_cast<const std::int32_t *>(pointer(selections.data())),
                               memory()),
               "dhs_step_select");
        break;
      case 2:
        expect(dhs_step_attend(rt, static_cast<std::int32_t>(in.interesting(3)),
                               static_cast<const std::uint16_t *>(pointer(queries.data())),
                               static_cast<std::uint16_t *>(pointer(output.data())), memory()),
               "dhs_step_attend");
        break;
      case 3:
        expect(dhs_step_end(rt), "dhs_step_end");
        break;
      default:
        expect(dhs_step_abort(rt), "dhs_step_abort");
        break;
      }
      break;
    }
    case 11: { // window writes (these steps have no window: always refused)
      std::int64_t count = in.interesting(8);
      expect(dhs_window_write(rt, pickId(), in.interesting(64),
                              count > 8 && count < 1 << 20 ? 8 : count, pointer(rows.data())),
             "dhs_window_write");
      break;
    }
    case 12:
      expect(dhs_runtime_check(rt), "dhs_runtime_check");
      break;
    case 13: {
      std::int64_t length = 0;
      dhs_stats stats;
      char text[32];
      expect(dhs_request_length(rt, pickId(), in.flag() ? &length : nullptr), "dhs_request_length");
      expect(dhs_runtime_get_stats(rt, in.flag() ? &stats : nullptr), "dhs_runtime_get_stats");
      expect(dhs_runtime_describe(rt, text, in.range(0, sizeof(text))), "dhs_runtime_describe");
      double share = 0.0;
      expect(dhs_runtime_get_form_share(rt, static_cast<std::int32_t>(in.range(0, 4)) - 1,
                                        in.flag() ? &share : nullptr),
             "dhs_runtime_get_form_share");
      break;
    }
    case 14: {
      // (The CPU backend takes no stream: a pointer is refused, none is fine.)
      int notAStream = 0;
      if (in.flag())
        expect(dhs_runtime_set_stream(rt, in.flag() ? pointer(&notAStream) : nullptr),
               "dhs_runtime_set_stream");
      else
        expect(dhs_runtime_set_cuda_graphs(rt, in.u8()), "dhs_runtime_set_cuda_graphs");
      break;
    }
    case 15: // a verify step begins (with rows or per layer)
      verifyBegin();
      break;
    case 16:
      expect(dhs_verify_write_rows(rt, static_cast<std::int32_t>(in.interesting(3)),
                                   pointer(rows.data())),
             "dhs_verify_write_rows");
      break;
    case 17:
      verifyAccept();
      break;
    case 18: { // a whole verify step, each call in order until one fails
      const bool perLayer = verifyBegin() == DHS_OK && !begunWithRows;
      status = DHS_OK;
      for (std::int32_t g = 0; g < shape.groups && status == DHS_OK; ++g) {
        fillSelections(selections.data(), static_cast<std::size_t>(lanes) * perLane);
        status = dhs_step_select(rt, g, selections.data(), DHS_MEMORY_HOST);
        expect(status, "dhs_step_select (verify)");
        for (std::int32_t l = g * c.layers_per_group;
             l < std::min(c.layers, (g + 1) * c.layers_per_group) && status == DHS_OK; ++l) {
          if (perLayer) {
            status = dhs_verify_write_rows(rt, l, rows.data());
            expect(status, "dhs_verify_write_rows (verify)");
          }
          if (status == DHS_OK) {
            status = dhs_step_attend(rt, l, queries.data(), output.data(), DHS_MEMORY_HOST);
            expect(status, "dhs_step_attend (verify)");
          }
        }
      }
      verifyAccept();
      break;
    }
    default: // steps that are not draft-ring or placement steps (once an
             // input: parsing a manifest is slow), and the top-k step
      if (!triedAuxiliary) {
        triedAuxiliary = true;
        expect(dhs_runtime_load_draft_step(rt, in.flag() ? stepDirectories()[0].c_str() : nullptr),
               "dhs_runtime_load_draft_step");
        expect(dhs_runtime_load_placement_step(rt, stepDirectories()[1].c_str()),
               "dhs_runtime_load_placement_step");
        dhs_topk_shape topk;
        expect(dhs_runtime_load_topk_step(rt, stepDirectories().back().c_str(),
                                          in.flag() ? &topk : nullptr),
               "dhs_runtime_load_topk_step");
      }
      for (float &score : scores) {
        const std::uint32_t bits = in.u8() % 4 == 0 ? in.u32() : in.u8();
        std::memcpy(&score, &bits, sizeof score);
      }
      for (std::int32_t &len : topkLen)
        len = static_cast<std::int32_t>(in.flag() ? in.range(0, kTopKN) : in.interesting(kTopKN));
      expect(dhs_topk(rt, static_cast<const float *>(pointer(scores.data())),
                      static_cast<const std::int32_t *>(pointer(topkLen.data())),
                      in.flag() ? in.range(1, kTopKB) : in.interesting(kTopKB),
                      static_cast<std::int32_t *>(pointer(topkRows.data()))),
             "dhs_topk");
      break;
    }
  }
  // Whatever happened, the state is consistent and every request can go.
  dhs_step_abort(rt);
  expect(dhs_runtime_check(rt), "dhs_runtime_check (final)");
  for (std::uint64_t id : live)
    expect(dhs_request_finish(rt, id), "dhs_request_finish (final)");
  dhs_stats stats;
  if (dhs_runtime_get_stats(rt, &stats) != DHS_OK || stats.admitted_requests != 0 ||
      stats.hbm_bytes_used != 0 || stats.host_bytes_used != 0) {
    std::fprintf(stderr, "dhs-fuzz-capi: requests or memory left after finishing every request\n");
    std::abort();
  }
  dhs_runtime_destroy(rt);
  return 0;
}
