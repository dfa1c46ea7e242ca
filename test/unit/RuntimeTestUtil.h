//===- RuntimeTestUtil.h - Helpers for the step executor's tests --*- C++ -*-===//

#ifndef DHS_TEST_UNIT_RUNTIMETESTUTIL_H
#define DHS_TEST_UNIT_RUNTIMETESTUTIL_H

#include "TestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/capi/dhs_runtime.h"
#include "runtime/core/Bf16.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaResources.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace dhs::test {

/// Where the build compiled the layer-group test steps (fp8_g<G>/layer<l>,
/// see test/unit/CMakeLists.txt): $DHS_TEST_GROUP_STEPS_DIR if set (on a
/// machine that runs a copied test binary), else the build's; "" when the
/// compiler was not built.
inline std::string groupStepsDir() {
  if (const char *dir = std::getenv("DHS_TEST_GROUP_STEPS_DIR"))
    return dir;
  return DHS_TEST_GROUP_STEPS_DIR;
}

/// The step directories of a layer group of G layers: layer 0 .. G-1.
inline std::vector<std::string> groupSteps(int G, const std::string &variant = "") {
  std::vector<std::string> dirs;
  for (int l = 0; l < G; ++l)
    dirs.push_back(groupStepsDir() + "/fp8_g" + std::to_string(G) + variant + "/layer" +
                   std::to_string(l));
  return dirs;
}

/// A manifest of one sparse_attention step of shape [B, Q, H, K] over a pool
/// of `format` rows with `layers` layers per token, reading layer `layer`
/// (HBM slots and host rows left to run time unless given). Its PTX file is
/// not written: enough for the CPU backend.
inline std::string stepManifest(int B, int Q, int H, int K, long hbm = -1, long host = -1,
                                const std::string &format = "mla_bf16", int layers = 1,
                                int layer = 0) {
  using json = nlohmann::json;
  const runtime::RowFormatInfo &info = runtime::rowFormatInfo(format);
  const long qk = info.qkDim, v = info.vDim, rowBytes = info.rowBytes;
  // The step's memref arguments, in order (the pool is argument 5).
  struct Memref {
    int index;
    const char *role, *dtype;
    json shape;
  };
  const Memref memrefs[] = {
      {0, "queries", "bf16", {B, Q, H, qk}}, {1, "row_ids", "i32", {B, Q, K}},
      {2, "slots", "i32", {B, Q, K}},        {3, "history_start", "i64", {B}},
      {4, "history_len", "i32", {B}},        {6, "output", "bf16", {B, Q, H, v}}};
  const json pool = {
      {"index", 5},       {"role", "kv_pool"},     {"kind", "kv_pool"},         {"format", format},
      {"layers", layers}, {"row_bytes", rowBytes}, {"row_elems", rowBytes / 2}, {"qk_dim", qk},
      {"v_dim", v},       {"hbm_slots", hbm},      {"host_rows", host}};
  json arguments = json::array(), params = json::array();
  for (const Memref &m : memrefs) {
    if (m.index == 6) { // the pool and its two tiers come before the output
      arguments.push_back(pool);
      for (const char *tier : {"pool_hbm", "pool_host"})
        params.push_back({{"source", tier},
                          {"role", tier == std::string("pool_hbm") ? "hbm_tier" : "host_tier"},
                          {"index", 5},
                          {"dtype", "i8"},
                          {"shape", {-1, layers, rowBytes}}});
    }
    arguments.push_back({{"index", m.index},
                         {"role", m.role},
                         {"kind", "memref"},
                         {"dtype", m.dtype},
                         {"shape", m.shape}});
    params.push_back({{"source", "argument"},
                      {"role", m.role},
                      {"index", m.index},
                      {"dtype", m.dtype},
                      {"shape", m.shape}});
  }
  params.push_back({{"source", "status"}, {"role", "status"}, {"dtype", "i32"}, {"shape", {1}}});
  json launch = {{"kernel", "sparse_attention"},
                 {"ptx", "step.ptx"},
                 {"op", "sparse_attention"},
                 {"softmax_scale", 0.0416666679},
                 {"layer", layer},
                 {"grid", {1, 1, 1}},
                 {"block", {128, 1, 1}},
                 {"dynamic_shared_bytes", 0},
                 {"params", params}};
  return json{{"format", "dhs-step-manifest"},
              {"version", 2},
              {"arena_bytes", 0},
              {"target", {{"chip", "sm_90a"}, {"features", "+ptx80"}}},
              {"step", "test_step"},
              {"arguments", arguments},
              {"launches", {launch}}}
      .dump(2);
}

/// Random bf16 values, fast: sign, exponent in [-3, 0] and 7 random mantissa
/// bits from one splitmix64 step per four values (never zero or NaN).
inline void fillRandom(std::mt19937_64 &rng, runtime::bf16_t *data, std::size_t count) {
  std::uint64_t state = rng();
  for (std::size_t i = 0; i < count; i += 4) {
    std::uint64_t x = (state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    for (std::size_t j = 0; j < 4 && i + j < count; ++j) {
      const std::uint16_t bits = static_cast<std::uint16_t>(x >> (16 * j));
      const std::uint16_t sign = bits & 0x8000u;
      const std::uint16_t exponent = static_cast<std::uint16_t>(124 + ((bits >> 7) & 3));
      data[i + j] = static_cast<runtime::bf16_t>(sign | (exponent << 7) | (bits & 0x7Fu));
    }
  }
}

/// The problem of an independent oracle of one layer: the selected rows
/// gathered into a compact host store of one layer per token (every
/// selection reads its own host row, nothing resident). `rowOf(b, r)`
/// returns row r of lane b's request (shape.rowBytes bytes of shape.format;
/// for mla_bf16, 576 bf16 values).
template <typename RowOf>
runtime::SparseAttentionProblem oracleProblem(const runtime::ProblemShape &shape,
                                              std::int64_t lanes, const std::int32_t *rowIds,
                                              const runtime::bf16_t *queries, RowOf rowOf) {
  runtime::SparseAttentionProblem p;
  p.shape = shape;
  p.shape.batch = lanes;
  const std::int64_t perLane = shape.queries * shape.topk;
  p.shape.hostRows = lanes * perLane;
  p.shape.hbmSlots = 0;
  p.shape.layers = 1;
  p.shape.layer = 0;
  p.shape.rowElems = shape.rowBytes / 2;
  const std::int64_t units = shape.rowBytes / 2;
  p.queries.assign(queries, queries + lanes * shape.queries * shape.heads * shape.qkDim);
  p.rowIds.assign(static_cast<std::size_t>(lanes * perLane), -1);
  p.slots.assign(static_cast<std::size_t>(lanes * perLane), -1);
  p.historyStart.assign(static_cast<std::size_t>(lanes), 0);
  p.historyLen.assign(static_cast<std::size_t>(lanes), static_cast<std::int32_t>(lanes * perLane));
  p.hostStore.assign(static_cast<std::size_t>(lanes * perLane * units), 0);
  for (std::int64_t b = 0; b < lanes; ++b)
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::int32_t r = rowIds[b * perLane + i];
      if (r < 0)
        continue;
      const std::int64_t compact = b * perLane + i;
      p.rowIds[static_cast<std::size_t>(compact)] = static_cast<std::int32_t>(compact);
      const void *row = rowOf(b, r);
      std::memcpy(p.hostStore.data() + compact * units, row,
                  static_cast<std::size_t>(shape.rowBytes));
    }
  return p;
}

/// An independent oracle of one layer (oracleProblem), computed by the
/// float CPU backend.
template <typename RowOf>
std::vector<runtime::bf16_t> oracleLayer(const runtime::ProblemShape &shape, std::int64_t lanes,
                                         const std::int32_t *rowIds, const runtime::bf16_t *queries,
                                         RowOf rowOf) {
  return runtime::CpuAttention(runtime::CpuPrecision::Float, 1)
      .run(oracleProblem(shape, lanes, rowIds, queries, rowOf));
}

/// The fp64 reference of one layer over the rows `rowOf` gives (as
/// oracleLayer, in double, unrounded).
template <typename RowOf>
std::vector<double> referenceLayer(const runtime::ProblemShape &shape, std::int64_t lanes,
                                   const std::int32_t *rowIds, const runtime::bf16_t *queries,
                                   RowOf rowOf) {
  return runtime::CpuAttention(runtime::CpuPrecision::Double, 1)
      .runUnrounded(oracleProblem(shape, lanes, rowIds, queries, rowOf));
}

/// True when a runtime of `backend` can run here; for CUDA without a usable
/// GPU, says that the case is skipped and returns false.
inline bool backendOrSkip(runtime::BackendKind backend) {
  if (backend != runtime::BackendKind::Cuda)
    return true;
  return gpuOrSkip();
}

/// "cpu" / "cuda", to name the backend a parameterized case runs on.
inline const char *backendName(runtime::BackendKind backend) {
  return backend == runtime::BackendKind::Cuda ? "cuda" : "cpu";
}

/// Runs the rest of a test case once per backend: declares `backend` as the
/// CPU, then CUDA (Catch2 GENERATE), names it in messages, and ends the CUDA
/// run where no GPU is usable, saying so.
#define DHS_FOR_EACH_BACKEND(backend)                                                              \
  const ::dhs::runtime::BackendKind backend =                                                      \
      GENERATE(::dhs::runtime::BackendKind::Cpu, ::dhs::runtime::BackendKind::Cuda);               \
  INFO(::dhs::test::backendName(backend));                                                         \
  if (!::dhs::test::backendOrSkip(backend))                                                        \
  return

/// A runtime config for the tests on `backend`: `layers` in groups of `G`,
/// `hostRows` host rows, 8 requests, per request the newest 16 tokens, a hot
/// floor of `floor` and draft rings of `draftWindow` tokens, the invariant
/// checker on (a full check every 8 steps).
inline runtime::RuntimeConfig testConfig(std::int32_t layers, std::int32_t G,
                                         runtime::BackendKind backend, std::int32_t draftWindow = 4,
                                         std::int32_t floor = 64, std::int64_t hostRows = 8192) {
  runtime::RuntimeConfig config;
  config.layers = layers;
  config.layersPerGroup = G;
  config.hostRows = hostRows;
  config.maxRequests = 8;
  config.newestWindow = 16;
  config.draftWindow = draftWindow;
  config.hotFloor = floor;
  config.checkInvariants = true;
  config.fullCheckInterval = 8;
  config.backend = backend;
  return config;
}

/// A C API config of the CPU backend for stepManifest(2, 1, 1, 4): 2 layers
/// in groups of 1, 64 HBM slots, 4096 host rows, 8 requests, per request the
/// newest 4 tokens and a hot floor of 4, the invariant checker on.
inline dhs_runtime_config smallCApiConfig() {
  dhs_runtime_config c;
  dhs_runtime_config_init(&c);
  c.layers = 2;
  c.layers_per_group = 1;
  c.hbm_slots = 64;
  c.host_rows = 4096;
  c.max_requests = 8;
  c.newest_window = 4;
  c.hot_floor = 4;
  c.check_invariants = 1;
  return c;
}

/// What the engine wrote: every row of every request, per layer; the
/// oracle's input.
struct Shadow {
  std::int32_t layers = 1;
  runtime::RowFormat format = runtime::RowFormat::MlaBf16;
  std::int64_t rowBytes = 1152;
  std::map<std::uint64_t, std::vector<std::vector<std::uint8_t>>> rows; // id -> [layer][bytes]

  explicit Shadow(std::int32_t l = 1, runtime::RowFormat f = runtime::RowFormat::MlaBf16)
      : layers(l), format(f), rowBytes(runtime::rowFormatInfo(f).rowBytes) {}

  std::int64_t len(std::uint64_t id) const {
    return static_cast<std::int64_t>(rows.at(id)[0].size()) / rowBytes;
  }
  const std::uint8_t *row(std::uint64_t id, std::int32_t layer, std::int64_t r) const {
    return rows.at(id)[static_cast<std::size_t>(layer)].data() + r * rowBytes;
  }
  /// `count` random rows of the format.
  std::vector<std::uint8_t> randomRows(std::mt19937_64 &rng, std::int64_t count) const {
    std::vector<std::uint8_t> data(static_cast<std::size_t>(count * rowBytes));
    if (format == runtime::RowFormat::MlaBf16)
      fillRandom(rng, reinterpret_cast<runtime::bf16_t *>(data.data()), data.size() / 2);
    else
      for (std::int64_t i = 0; i < count; ++i)
        runtime::fillRandomRow(format, data.data() + i * rowBytes, rng);
    return data;
  }
};

/// Admits `id` with `len` random prefill rows into every runtime and the
/// shadow.
inline void admitRandom(const std::vector<runtime::Runtime *> &runtimes, Shadow &shadow,
                        std::mt19937_64 &rng, std::uint64_t id, std::int64_t len,
                        std::int64_t maxContext) {
  std::vector<std::uint8_t> prefill = shadow.randomRows(rng, shadow.layers * len);
  for (runtime::Runtime *rt : runtimes)
    rt->admit(id, len, maxContext, prefill.empty() ? nullptr : prefill.data());
  auto &layers = shadow.rows[id];
  layers.resize(static_cast<std::size_t>(shadow.layers));
  const std::int64_t perLayer = len * shadow.rowBytes;
  for (std::int32_t l = 0; l < shadow.layers; ++l)
    layers[static_cast<std::size_t>(l)].assign(prefill.begin() + l * perLayer,
                                               prefill.begin() + (l + 1) * perLayer);
}
inline void admitRandom(runtime::Runtime &rt, Shadow &shadow, std::mt19937_64 &rng,
                        std::uint64_t id, std::int64_t len, std::int64_t maxContext) {
  admitRandom(std::vector<runtime::Runtime *>{&rt}, shadow, rng, id, len, maxContext);
}

/// Appends one random token to `id` in every runtime and the shadow.
inline void appendRandom(const std::vector<runtime::Runtime *> &runtimes, Shadow &shadow,
                         std::mt19937_64 &rng, std::uint64_t id) {
  std::vector<std::uint8_t> rows = shadow.randomRows(rng, shadow.layers);
  for (runtime::Runtime *rt : runtimes)
    rt->append(id, rows.data());
  for (std::int32_t l = 0; l < shadow.layers; ++l) {
    auto &layer = shadow.rows[id][static_cast<std::size_t>(l)];
    layer.insert(layer.end(), rows.begin() + l * shadow.rowBytes,
                 rows.begin() + (l + 1) * shadow.rowBytes);
  }
}
inline void appendRandom(runtime::Runtime &rt, Shadow &shadow, std::mt19937_64 &rng,
                         std::uint64_t id) {
  appendRandom(std::vector<runtime::Runtime *>{&rt}, shadow, rng, id);
}

/// Random selections for a batch: [groups][batch][Q][K], some -1, rows
/// drawn half the time from the newest 32 so that they recur across steps.
inline std::vector<std::int32_t> randomSelections(std::mt19937_64 &rng, const Shadow &shadow,
                                                  const std::vector<std::uint64_t> &batch,
                                                  std::int32_t groups,
                                                  const runtime::ProblemShape &shape) {
  std::vector<std::int32_t> rows;
  for (std::int32_t g = 0; g < groups; ++g)
    for (std::uint64_t id : batch) {
      const std::int64_t len = shadow.len(id);
      for (std::int64_t i = 0; i < shape.queries * shape.topk; ++i) {
        if (len == 0 || rng() % 7 == 0) {
          rows.push_back(-1);
          continue;
        }
        std::int64_t r = rng() % 2
                             ? len - 1 - static_cast<std::int64_t>(rng() % 32)
                             : static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(len));
        rows.push_back(static_cast<std::int32_t>(std::max<std::int64_t>(0, r)));
      }
    }
  return rows;
}

/// Checks a layer's output against the fp64 reference: nothing non-finite,
/// within bf16 tolerance. Returns the relative error.
inline double expectNearReference(const std::vector<runtime::bf16_t> &actual,
                                  const std::vector<double> &reference) {
  const runtime::Comparison c = runtime::compareOutputs(actual, reference);
  REQUIRE(c.nonFinite == 0);
  REQUIRE(c.relativeError < 1e-2);
  return c.relativeError;
}

/// Checks a layer's output against the oracle's: bit for bit from the CPU
/// backend (the oracle is its float attention), within bf16 tolerance from
/// CUDA (kernels sum in another order). Returns the relative error.
inline double expectMatchesOracle(const std::vector<runtime::bf16_t> &actual,
                                  const std::vector<runtime::bf16_t> &expected, bool onCuda) {
  if (!onCuda) {
    REQUIRE(runtime::countBitDifferences(actual, expected) == 0);
    return 0.0;
  }
  const runtime::Comparison c = runtime::compareOutputs(actual, expected);
  REQUIRE(c.nonFinite == 0);
  REQUIRE(c.relativeError < 1e-2);
  return c.relativeError;
}

/// Runs one step over `batch` on every runtime (the same random selections
/// and queries; selections in device memory for the runtimes marked in
/// `deviceSelections`), checks every layer's output against the oracle
/// over the shadow's rows (expectMatchesOracle) and the fp64 reference,
/// and, with several runtimes, that all made the same residency decisions
/// as the first. Returns each runtime's outputs [L][batch][Q][H][v_dim];
/// `worst` collects the largest relative error against fp64.
inline std::vector<std::vector<runtime::bf16_t>>
stepAndCompare(const std::vector<runtime::Runtime *> &runtimes, const Shadow &shadow,
               std::mt19937_64 &rng, const std::vector<std::uint64_t> &batch,
               double *worst = nullptr, const std::vector<bool> &deviceSelections = {}) {
  using namespace runtime;
  const Runtime &first = *runtimes.front();
  const ProblemShape &s = first.shape();
  const std::int64_t lanes = static_cast<std::int64_t>(batch.size());
  std::vector<std::int32_t> rows = randomSelections(rng, shadow, batch, first.groups(), s);
  const std::int32_t L = shadow.layers;
  const std::int64_t qPerLayer = lanes * s.queries * s.heads * s.qkDim;
  const std::int64_t oPerLayer = lanes * s.queries * s.heads * s.vDim;
  std::vector<bf16_t> queries(static_cast<std::size_t>(L * qPerLayer));
  fillRandom(rng, queries.data(), queries.size());
  // Device selections come from device memory, as an engine's indexer
  // would leave them.
  std::unique_ptr<cuda_detail::DeviceBuffer> deviceRows;
  if (std::find(deviceSelections.begin(), deviceSelections.end(), true) != deviceSelections.end()) {
    deviceRows = std::make_unique<cuda_detail::DeviceBuffer>(rows.size() * 4, "selections");
    CudaDriver::instance().check(
        CudaDriver::instance().memcpyHtoD(deviceRows->get(), rows.data(), rows.size() * 4),
        "uploading selections");
  }
  std::vector<std::vector<bf16_t>> outputs;
  for (std::size_t i = 0; i < runtimes.size(); ++i) {
    const bool onDevice = i < deviceSelections.size() && deviceSelections[i];
    outputs.emplace_back(static_cast<std::size_t>(L * oPerLayer), kBf16Poison);
    runtimes[i]->step(batch.data(), lanes,
                      onDevice ? reinterpret_cast<const std::int32_t *>(deviceRows->get())
                               : rows.data(),
                      queries.data(), outputs.back().data(), MemorySpace::Host,
                      onDevice ? MemorySpace::Device : MemorySpace::Host);
  }
  const ResidencyStepStats a = first.stats().lastStep;
  for (const Runtime *rt : runtimes) {
    const ResidencyStepStats b = rt->stats().lastStep;
    REQUIRE(a.selected == b.selected);
    REQUIRE(a.resident == b.resident);
    REQUIRE(a.fetched == b.fetched);
    REQUIRE(a.promoted == b.promoted);
    REQUIRE(a.evicted == b.evicted);
  }
  const std::int32_t G = first.groups();
  const std::int32_t perGroup = (L + G - 1) / G;
  for (std::int32_t l = 0; l < L && lanes > 0; ++l) {
    INFO("layer " << l);
    const std::int32_t g = l / perGroup;
    const auto rowOf = [&](std::int64_t b, std::int32_t r) {
      return shadow.row(batch[static_cast<std::size_t>(b)], l, r);
    };
    const std::int32_t *groupRows = rows.data() + g * lanes * s.queries * s.topk;
    const std::vector<bf16_t> expected =
        oracleLayer(s, lanes, groupRows, queries.data() + l * qPerLayer, rowOf);
    const std::vector<double> reference =
        referenceLayer(s, lanes, groupRows, queries.data() + l * qPerLayer, rowOf);
    for (std::size_t i = 0; i < runtimes.size(); ++i) {
      const std::vector<bf16_t> actual(outputs[i].begin() + l * oPerLayer,
                                       outputs[i].begin() + (l + 1) * oPerLayer);
      expectMatchesOracle(actual, expected, runtimes[i]->device() != nullptr);
      const double error = expectNearReference(actual, reference);
      if (worst)
        *worst = std::max(*worst, error);
    }
  }
  return outputs;
}
inline std::vector<runtime::bf16_t> stepAndCompare(runtime::Runtime &rt, const Shadow &shadow,
                                                   std::mt19937_64 &rng,
                                                   const std::vector<std::uint64_t> &batch) {
  return stepAndCompare(std::vector<runtime::Runtime *>{&rt}, shadow, rng, batch).front();
}

/// Runs `steps` steps over `batch` on `rt`, each checked against the oracle
/// after one random token is appended to every request of `growing`;
/// returns the outputs of all steps, one after the other.
inline std::vector<runtime::bf16_t> runSteps(runtime::Runtime &rt, Shadow &shadow,
                                             std::mt19937_64 &rng, int steps,
                                             const std::vector<std::uint64_t> &batch,
                                             const std::vector<std::uint64_t> &growing) {
  std::vector<runtime::bf16_t> all;
  for (int step = 0; step < steps; ++step) {
    for (std::uint64_t id : growing)
      appendRandom(rt, shadow, rng, id);
    std::vector<runtime::bf16_t> out = stepAndCompare(rt, shadow, rng, batch);
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

/// Checks that two runtimes' controllers hold the same rows in every slot.
inline void expectSameResidency(const runtime::Runtime &a, const runtime::Runtime &b) {
  const std::int32_t slots = a.controller().config().hbmSlots;
  for (std::int32_t g = 0; g < a.groups(); ++g)
    for (std::int32_t slot = 0; slot < slots; ++slot) {
      REQUIRE(a.controller().slotOwner(g, slot) == b.controller().slotOwner(g, slot));
      REQUIRE(a.controller().slotRow(g, slot) == b.controller().slotRow(g, slot));
    }
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_RUNTIMETESTUTIL_H
