//===- RuntimeTestUtil.h - Helpers for the step executor's tests --*- C++ -*-===//

#ifndef DHS_TEST_UNIT_RUNTIMETESTUTIL_H
#define DHS_TEST_UNIT_RUNTIMETESTUTIL_H

#include "TestUtil.h"

#include "runtime/core/Bf16.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cpu/CpuAttention.h"

#include <cstdlib>
#include <cstring>
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
  const runtime::RowFormatInfo &info = runtime::rowFormatInfo(format);
  const long qk = info.qkDim, v = info.vDim, rowBytes = info.rowBytes;
  auto dims = [](std::initializer_list<long> values) {
    std::string text = "[";
    for (long v : values)
      text += (text.size() > 1 ? "," : "") + std::to_string(v);
    return text + "]";
  };
  const std::string q = dims({B, Q, H, qk}), sel = dims({B, Q, K}), b = dims({B}),
                    out = dims({B, Q, H, v}), tier = dims({-1, layers, rowBytes});
  return R"({"format": "dhs-step-manifest", "version": 1, "arena_bytes": 0,
  "target": {"chip": "sm_90a", "features": "+ptx80"}, "step": "test_step",
  "arguments": [
    {"index": 0, "role": "queries", "kind": "memref", "dtype": "bf16", "shape": )" +
         q + R"(},
    {"index": 1, "role": "row_ids", "kind": "memref", "dtype": "i32", "shape": )" +
         sel + R"(},
    {"index": 2, "role": "slots", "kind": "memref", "dtype": "i32", "shape": )" +
         sel + R"(},
    {"index": 3, "role": "history_start", "kind": "memref", "dtype": "i64", "shape": )" +
         b + R"(},
    {"index": 4, "role": "history_len", "kind": "memref", "dtype": "i32", "shape": )" +
         b + R"(},
    {"index": 5, "role": "kv_pool", "kind": "kv_pool", "format": ")" +
         format + R"(", "layers": )" + std::to_string(layers) + R"(,
     "row_bytes": )" +
         std::to_string(rowBytes) + R"(, "row_elems": )" + std::to_string(rowBytes / 2) +
         R"(, "qk_dim": )" + std::to_string(qk) + R"(, "v_dim": )" + std::to_string(v) + R"(,
     "hbm_slots": )" +
         std::to_string(hbm) + R"(, "host_rows": )" + std::to_string(host) + R"(},
    {"index": 6, "role": "output", "kind": "memref", "dtype": "bf16", "shape": )" +
         out + R"(}
  ],
  "launches": [
    {"kernel": "sparse_attention", "ptx": "step.ptx", "op": "sparse_attention",
     "softmax_scale": 0.0416666679, "layer": )" +
         std::to_string(layer) + R"(,
     "grid": [1,1,1], "block": [128,1,1], "dynamic_shared_bytes": 0,
     "params": [
       {"source": "argument", "index": 0, "dtype": "bf16", "shape": )" +
         q + R"(},
       {"source": "argument", "index": 1, "dtype": "i32", "shape": )" +
         sel + R"(},
       {"source": "argument", "index": 2, "dtype": "i32", "shape": )" +
         sel + R"(},
       {"source": "argument", "index": 3, "dtype": "i64", "shape": )" +
         b + R"(},
       {"source": "argument", "index": 4, "dtype": "i32", "shape": )" +
         b + R"(},
       {"source": "pool_hbm", "index": 5, "dtype": "i8", "shape": )" +
         tier + R"(},
       {"source": "pool_host", "index": 5, "dtype": "i8", "shape": )" +
         tier + R"(},
       {"source": "argument", "index": 6, "dtype": "bf16", "shape": )" +
         out + R"(},
       {"source": "status", "dtype": "i32", "shape": [1]}
     ]}
  ]
})";
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

/// An independent oracle of one layer: attention over the selected rows
/// gathered into a compact host store of one layer per token (every
/// selection reads its own host row, nothing resident), computed by the
/// float CPU backend. `rowOf(b, r)` returns row r of lane b's request
/// (shape.rowBytes bytes of shape.format; for mla_bf16, 576 bf16 values).
template <typename RowOf>
std::vector<runtime::bf16_t> oracleLayer(const runtime::ProblemShape &shape, std::int64_t lanes,
                                         const std::int32_t *rowIds, const runtime::bf16_t *queries,
                                         RowOf rowOf) {
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
  return runtime::CpuAttention(runtime::CpuPrecision::Float, 1).run(p);
}

} // namespace dhs::test

#endif // DHS_TEST_UNIT_RUNTIMETESTUTIL_H
