//===- RowFormatTest.cpp - KV row formats: decoding and generation --------===//

#include "TestUtil.h"

#include "runtime/core/Bf16.h"
#include "runtime/core/Error.h"
#include "runtime/core/RandomStream.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/testing/ProblemGenerator.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

using namespace dhs::runtime;

TEST_CASE("e4m3 bytes decode to the OCP FP8 values", "[format]") {
  CHECK(decodeE4M3(0x00) == 0.0);
  CHECK(std::signbit(decodeE4M3(0x80)));
  CHECK(decodeE4M3(0x01) == std::ldexp(1.0, -9)); // smallest subnormal
  CHECK(decodeE4M3(0x07) == 7 * std::ldexp(1.0, -9));
  CHECK(decodeE4M3(0x08) == std::ldexp(1.0, -6)); // smallest normal
  CHECK(decodeE4M3(0x38) == 1.0);
  CHECK(decodeE4M3(0x3c) == 1.5);
  CHECK(decodeE4M3(0xb8) == -1.0);
  CHECK(decodeE4M3(0x7e) == 448.0); // largest finite
  CHECK(decodeE4M3(0xfe) == -448.0);
  CHECK(std::isnan(decodeE4M3(0x7f)));
  CHECK(std::isnan(decodeE4M3(0xff)));
}

TEST_CASE("formats are looked up by name with their sizes", "[format]") {
  CHECK(rowFormatInfo("mla_bf16").rowBytes == 1152);
  CHECK(rowFormatInfo("mla_fp8").rowBytes == 656);
  CHECK(rowFormatInfo("mla_fp8").qkDim == 576);
  CHECK(rowFormatInfo("v41_fp8").rowBytes == 528);
  CHECK(rowFormatInfo("v41_fp8").qkDim == 512);
  CHECK_THROWS_WITH(rowFormatInfo("mla_fp4"),
                    Catch::Contains("unknown KV row format 'mla_fp4' (known: "
                                    "mla_bf16, mla_fp8, v41_fp8)"));
}

TEST_CASE("mla_fp8 keys: e4m3 times the group's fp32 scale, then bf16 RoPE", "[format]") {
  std::vector<std::uint8_t> row(656, 0);
  row[3] = 0x38;   // 1.0 in group 0
  row[130] = 0xbc; // -1.5 in group 1
  float scales[4] = {0.5f, 0.25f, 2.0f, 4.0f};
  std::memcpy(row.data() + 512, scales, sizeof scales);
  bf16_t rope = floatToBf16(1.5f);
  std::memcpy(row.data() + 528 + 2 * 5, &rope, sizeof rope);
  std::vector<double> key(576);
  decodeKey(RowFormat::MlaFp8, row.data(), key.data());
  CHECK(key[3] == 0.5);
  CHECK(key[130] == -0.375);
  CHECK(key[0] == 0.0);
  CHECK(key[512 + 5] == 1.5);
  CHECK(key[512] == 0.0);
}

TEST_CASE("v41_fp8 keys: e4m3 times 2^(e - 127) per 32 dims", "[format]") {
  std::vector<std::uint8_t> row(528, 0);
  row[0] = 0x38;  // 1.0, scale byte 0
  row[33] = 0x40; // 2.0, scale byte 1
  row[512] = 127; // 2^0
  row[513] = 125; // 2^-2
  row[514] = 0;   // 2^-127
  row[64] = 0x38; // 1.0 with scale byte 2
  std::vector<double> key(512);
  decodeKey(RowFormat::V41Fp8, row.data(), key.data());
  CHECK(key[0] == 1.0);
  CHECK(key[33] == 0.5);
  CHECK(key[64] == std::ldexp(1.0, -127));
}

TEST_CASE("random rows are finite, not zero, and of every format", "[format]") {
  std::mt19937_64 rng(7);
  // From std::mt19937_64, and from a counter-based stream per row.
  for (bool streams : {false, true})
    for (RowFormat format : {RowFormat::MlaBf16, RowFormat::MlaFp8, RowFormat::V41Fp8}) {
      const RowFormatInfo &info = rowFormatInfo(format);
      INFO((streams ? "RandomStream " : "mt19937_64 ") << info.name);
      std::vector<std::uint8_t> row(static_cast<std::size_t>(info.rowBytes));
      std::vector<double> key(static_cast<std::size_t>(info.qkDim));
      double norm = 0;
      for (int trial = 0; trial < 50; ++trial) {
        if (streams) {
          RandomStream stream(11, static_cast<std::uint64_t>(trial));
          fillRandomRow(format, row.data(), stream);
        } else {
          fillRandomRow(format, row.data(), rng);
        }
        decodeKey(format, row.data(), key.data());
        for (double v : key) {
          REQUIRE(std::isfinite(v));
          norm += v * v;
        }
      }
      INFO(info.name);
      // Keys of a few units: unit-scale attention, not one-hot softmax.
      double rms = std::sqrt(norm / (50.0 * static_cast<double>(info.qkDim)));
      CHECK(rms > 0.05);
      CHECK(rms < 10.0);
    }
}

TEST_CASE("the CPU backend reads FP8 rows and the right layer of a group", "[format][cpu]") {
  for (RowFormat format : {RowFormat::MlaFp8, RowFormat::V41Fp8}) {
    const RowFormatInfo &info = rowFormatInfo(format);
    ProblemShape shape = dhs::test::smallShape(2, 2, 3, 16);
    shape.format = format;
    shape.rowBytes = info.rowBytes;
    shape.qkDim = info.qkDim;
    shape.vDim = info.vDim;
    shape.layers = 2;
    shape.layer = 1;
    shape.rowElems = shape.layers * shape.rowBytes / 2;
    GeneratorOptions options;
    options.seed = dhs::test::freshSeed() + 21;
    INFO("DHS_TEST_SEED=" << dhs::test::freshSeed());
    options.historyRows = 64;
    options.residency = 0.5;
    SparseAttentionProblem p = generateProblem(shape, options);
    std::vector<double> ref = CpuAttention(CpuPrecision::Double).runUnrounded(p);

    // Independently: decode the selected rows of layer 1 and attend in fp64.
    const ProblemShape &s = p.shape;
    double err = 0, norm = 0;
    for (std::int64_t b = 0; b < s.batch; ++b)
      for (std::int64_t q = 0; q < s.queries; ++q)
        for (std::int64_t h = 0; h < s.heads; ++h) {
          std::vector<std::vector<double>> keys;
          for (std::int64_t k = 0; k < s.topk; ++k) {
            const bf16_t *token = p.row(b, q, k);
            if (!token)
              continue;
            std::vector<double> key(static_cast<std::size_t>(s.qkDim));
            decodeKey(format, reinterpret_cast<const std::uint8_t *>(token) + s.rowBytes,
                      key.data());
            keys.push_back(key);
          }
          std::vector<double> scores;
          double max = -INFINITY;
          for (const auto &key : keys) {
            double dot = 0;
            for (std::int64_t d = 0; d < s.qkDim; ++d)
              dot += bf16ToFloat(p.queries[static_cast<std::size_t>(
                         (((b * s.queries + q) * s.heads + h) * s.qkDim) + d)]) *
                     key[static_cast<std::size_t>(d)];
            scores.push_back(s.softmaxScale * dot);
            max = std::max(max, scores.back());
          }
          double sum = 0;
          for (double &x : scores)
            sum += (x = std::exp(x - max));
          for (std::int64_t v = 0; v < s.vDim; ++v) {
            double o = 0;
            for (std::size_t k = 0; k < keys.size(); ++k)
              o += scores[k] / sum * keys[k][static_cast<std::size_t>(v)];
            double r =
                ref[static_cast<std::size_t>((((b * s.queries + q) * s.heads + h) * s.vDim) + v)];
            err += (o - r) * (o - r);
            norm += o * o;
          }
        }
    INFO(info.name);
    REQUIRE(norm > 0);
    CHECK(std::sqrt(err / norm) < 1e-12);
    // Residency does not change the answer.
    applyResidency(p, 1.0, 3);
    CHECK(compareOutputs(CpuAttention(CpuPrecision::Double).runUnrounded(p), ref).relativeError ==
          0.0);
  }
}

TEST_CASE("GQA rows: each KV head's key, then its value", "[format]") {
  for (GqaElement element : {GqaElement::BF16, GqaElement::F16, GqaElement::F32}) {
    GqaLayout layout{4, 64, element};
    CHECK(layout.rowBytes() == 2 * 4 * 64 * layout.elementBytes());
    std::vector<std::uint8_t> row(static_cast<std::size_t>(layout.rowBytes()));
    std::mt19937_64 rng(5);
    fillRandomGqaRow(layout, row.data(), rng);
    std::vector<double> key(64), value(64), otherKey(64), otherValue(64);
    decodeGqa(layout, row.data(), 2, key.data(), value.data());
    decodeGqa(layout, row.data(), 3, otherKey.data(), otherValue.data());
    double norm = 0;
    for (int i = 0; i < 64; ++i) {
      REQUIRE(std::isfinite(key[i]));
      REQUIRE(std::isfinite(value[i]));
      CHECK(key[i] != 0.0);
      norm += key[i] * key[i];
    }
    CHECK(norm > 10.0);
    CHECK(key != otherKey);
    CHECK(key != value);
  }
  // Element 5 of KV head 1's key sits at element index 1 * 64 + 5; its value
  // at (4 + 1) * 64 + 5.
  GqaLayout layout{4, 64, GqaElement::BF16};
  std::vector<std::uint8_t> row(static_cast<std::size_t>(layout.rowBytes()), 0);
  bf16_t k = floatToBf16(1.25f), v = floatToBf16(-3.0f);
  std::memcpy(row.data() + 2 * (64 + 5), &k, 2);
  std::memcpy(row.data() + 2 * (5 * 64 + 5), &v, 2);
  std::vector<double> key(64), value(64);
  decodeGqa(layout, row.data(), 1, key.data(), value.data());
  CHECK(key[5] == 1.25);
  CHECK(value[5] == -3.0);
  CHECK_THROWS_WITH(parseGqaElement("i8"), Catch::Contains("bf16, f16 or f32"));
}
