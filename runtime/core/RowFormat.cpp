//===- RowFormat.cpp - KV row formats -------------------------------------===//

#include "runtime/core/RowFormat.h"

#include "runtime/core/Bf16.h"
#include "runtime/core/Error.h"
#include "runtime/core/RandomStream.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dhs::runtime {

namespace {

using MlaBf16 = abi::MlaBf16Row;
using MlaFp8 = abi::MlaFp8Row;
using V41Fp8 = abi::V41Fp8Row;

/// The sizes of a format of fixed size.
constexpr RowFormatInfo fixedSizeFormat(RowFormat format) {
  abi::RowSizes sizes = *abi::fixedRowSizes(format);
  return {format, abi::name(format), sizes.rowBytes, sizes.qkDim, sizes.vDim};
}

/// The formats of fixed size (GQA rows are sized by their GqaLayout).
const RowFormatInfo kFormats[] = {fixedSizeFormat(RowFormat::MlaBf16),
                                  fixedSizeFormat(RowFormat::MlaFp8),
                                  fixedSizeFormat(RowFormat::V41Fp8)};

/// Reads a little-endian value of type T at `bytes`.
template <typename T> T load(const std::uint8_t *bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

/// N(0,1) by Box-Muller on 53-bit uniforms, so a seed gives the same values on
/// every platform (std::normal_distribution is implementation-defined).
template <typename Rng> double normal(Rng &rng) {
  auto uniform = [&] {
    return (static_cast<double>(rng() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
}

/// A random e4m3 byte that is not NaN (0x7f, 0xff).
std::uint8_t randomE4M3(std::mt19937_64 &rng) {
  for (;;) {
    auto byte = static_cast<std::uint8_t>(rng() & 0xff);
    if ((byte & 0x7f) != 0x7f)
      return byte;
  }
}

/// `count` random e4m3 bytes that are not NaN: the bytes of numbers of `rng`,
/// low byte first, NaN bytes skipped (the rest of the last number unused).
void randomE4M3s(std::uint8_t *out, int count, RandomStream &rng) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  for (int i = 0; i < count;) {
    std::uint64_t bits = rng();
    // A byte is NaN when its low 7 bits are all set, i.e. adding 1 to them
    // carries into bit 7 (never further).
    const bool anyNaN = (((bits & ~kHigh) + kOnes) & kHigh) != 0;
    if (!anyNaN && i + 8 <= count) {
      for (int j = 0; j < 8; ++j)
        out[i + j] = static_cast<std::uint8_t>(bits >> (8 * j));
      i += 8;
      continue;
    }
    for (int j = 0; j < 8 && i < count; ++j, bits >>= 8) {
      const auto byte = static_cast<std::uint8_t>(bits & 0xff);
      if ((byte & 0x7f) != 0x7f)
        out[i++] = byte;
    }
  }
}

/// The e4m3 values, decoded once.
struct E4M3Table {
  double values[256];
  E4M3Table() {
    for (int byte = 0; byte < 256; ++byte) {
      int sign = byte >> 7, exponent = (byte >> 3) & 15, mantissa = byte & 7;
      double magnitude = exponent == 15 && mantissa == 7 ? std::numeric_limits<double>::quiet_NaN()
                         : exponent == 0                 ? std::ldexp(mantissa, -9)
                                                         : std::ldexp(8 + mantissa, exponent - 10);
      values[byte] = sign ? -magnitude : magnitude;
    }
  }
};

} // namespace

const RowFormatInfo &rowFormatInfo(const std::string &name) {
  for (const RowFormatInfo &info : kFormats)
    if (name == info.name)
      return info;
  throw Error("unknown KV row format '" + name + "' (known: " + knownRowFormats() + ")");
}

const RowFormatInfo &rowFormatInfo(RowFormat format) {
  for (const RowFormatInfo &info : kFormats)
    if (info.format == format)
      return info;
  throw Error("unknown KV row format");
}

std::string knownRowFormats() {
  std::string names;
  for (const RowFormatInfo &info : kFormats)
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  return names;
}

double decodeE4M3(std::uint8_t byte) {
  static const E4M3Table table;
  return table.values[byte];
}

void decodeKey(RowFormat format, const std::uint8_t *row, double *key) {
  switch (format) {
  case RowFormat::MlaBf16:
    for (int d = 0; d < MlaBf16::kDims; ++d)
      key[d] = bf16ToFloat(load<bf16_t>(row + 2 * d));
    return;
  case RowFormat::MlaFp8:
    for (int d = 0; d < MlaFp8::kNopeDims; ++d)
      key[d] = decodeE4M3(row[d]) *
               static_cast<double>(load<float>(row + MlaFp8::kScaleOffset +
                                               MlaFp8::kScaleBytes * (d / MlaFp8::kDimsPerScale)));
    for (int d = 0; d < MlaFp8::kRopeDims; ++d)
      key[MlaFp8::kNopeDims + d] = bf16ToFloat(load<bf16_t>(row + MlaFp8::kRopeOffset + 2 * d));
    return;
  case RowFormat::V41Fp8:
    for (int d = 0; d < V41Fp8::kDims; ++d) {
      int e = row[V41Fp8::kScaleOffset + d / V41Fp8::kDimsPerScale];
      double scale = e == 255 ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, e - 127);
      key[d] = decodeE4M3(row[d]) * scale;
    }
    return;
  case RowFormat::Gqa:
    break;
  }
  throw Error("decodeKey reads MLA rows; GQA rows are decoded by decodeGqa");
}

GqaElement parseGqaElement(const std::string &name) {
  if (std::optional<GqaElement> element = abi::parse<GqaElement>(name))
    return *element;
  throw Error("GQA rows hold bf16, f16 or f32, not '" + name + "'");
}

/// IEEE half precision to double.
static double halfToDouble(std::uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(mantissa, -24);
  else if (exponent == 31)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  else
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -magnitude : magnitude;
}

void decodeGqa(const GqaLayout &layout, const std::uint8_t *row, std::int64_t kvHead, double *key,
               double *value) {
  const std::int64_t d = layout.headDim, size = layout.elementBytes();
  auto element = [&](std::int64_t index) -> double {
    const std::uint8_t *at = row + index * size;
    switch (layout.element) {
    case GqaElement::BF16:
      return bf16ToFloat(load<bf16_t>(at));
    case GqaElement::F16:
      return halfToDouble(load<std::uint16_t>(at));
    case GqaElement::F32:
      return load<float>(at);
    }
    return 0.0;
  };
  for (std::int64_t i = 0; i < d; ++i) {
    key[i] = element(kvHead * d + i);
    value[i] = element((layout.kvHeads + kvHead) * d + i);
  }
}

namespace {

template <typename Rng>
void fillRandomGqaRowWith(const GqaLayout &layout, std::uint8_t *row, Rng &rng) {
  const std::int64_t count = 2 * layout.kvHeads * layout.headDim;
  for (std::int64_t i = 0; i < count; ++i) {
    double v = normal(rng);
    if (v == 0.0)
      v = 0.5;
    switch (layout.element) {
    case GqaElement::BF16: {
      bf16_t b = doubleToBf16(v);
      std::memcpy(row + 2 * i, &b, 2);
      break;
    }
    case GqaElement::F16: {
      // Round to half by way of float: exact enough for test data, and the
      // decoder reads back exactly what is stored.
      float f = static_cast<float>(v);
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000);
      int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      std::uint16_t half = sign;
      if (exponent > 0 && exponent < 31)
        half |= static_cast<std::uint16_t>((exponent << 10) | ((bits >> 13) & 0x3ff));
      else if (exponent >= 31)
        half |= 0x7bff; // largest finite
      else
        half |= 0x0400; // smallest normal, keeping it nonzero
      std::memcpy(row + 2 * i, &half, 2);
      break;
    }
    case GqaElement::F32: {
      float f = static_cast<float>(v);
      std::memcpy(row + 4 * i, &f, 4);
      break;
    }
    }
  }
}

/// A V4.1 FP8 row's random ue8m0 scale bytes: 118..120 (scales 2^-9..2^-7).
template <typename Rng> void randomV41Scales(std::uint8_t *row, Rng &rng) {
  for (int g = 0; g < V41Fp8::kScales; ++g)
    row[V41Fp8::kScaleOffset + g] = static_cast<std::uint8_t>(118 + rng() % 3);
}

constexpr const char *kNotMlaRow =
    "fillRandomRow fills MLA rows; GQA rows are filled by fillRandomGqaRow";

} // namespace

void fillRandomGqaRow(const GqaLayout &layout, std::uint8_t *row, std::mt19937_64 &rng) {
  fillRandomGqaRowWith(layout, row, rng);
}

void fillRandomGqaRow(const GqaLayout &layout, std::uint8_t *row, RandomStream &rng) {
  fillRandomGqaRowWith(layout, row, rng);
}

void fillRandomRow(RowFormat format, std::uint8_t *row, std::mt19937_64 &rng) {
  auto putBf16 = [&](std::uint8_t *at) {
    bf16_t value = doubleToBf16(normal(rng));
    if ((value & 0x7fff) == 0) // never exact zeros
      value = floatToBf16(0.5f);
    std::memcpy(at, &value, sizeof value);
  };
  switch (format) {
  case RowFormat::MlaBf16:
    for (int d = 0; d < MlaBf16::kDims; ++d)
      putBf16(row + 2 * d);
    return;
  case RowFormat::MlaFp8:
    for (int d = 0; d < MlaFp8::kNopeDims; ++d)
      row[d] = randomE4M3(rng);
    // Random bytes span +-448 (log-uniformly); scales of 2^-9..2^-8 keep the
    // keys within a few units, like quantized real KV.
    for (int g = 0; g < MlaFp8::kScales; ++g) {
      float scale = static_cast<float>(std::ldexp(1.0 + (rng() % 1024) / 1024.0, -9));
      std::memcpy(row + MlaFp8::kScaleOffset + MlaFp8::kScaleBytes * g, &scale, sizeof scale);
    }
    for (int d = 0; d < MlaFp8::kRopeDims; ++d)
      putBf16(row + MlaFp8::kRopeOffset + 2 * d);
    return;
  case RowFormat::V41Fp8:
    for (int d = 0; d < V41Fp8::kDims; ++d)
      row[d] = randomE4M3(rng);
    randomV41Scales(row, rng);
    return;
  case RowFormat::Gqa:
    break;
  }
  throw Error(kNotMlaRow);
}

void fillRandomRow(RowFormat format, std::uint8_t *row, RandomStream &rng) {
  switch (format) {
  case RowFormat::MlaBf16:
    normalsBf16(rng, row, MlaBf16::kDims);
    return;
  case RowFormat::MlaFp8:
    randomE4M3s(row, MlaFp8::kNopeDims, rng);
    // As above: scales of 2^-9..2^-8 (the same values as ldexp(x, -9)).
    for (int g = 0; g < MlaFp8::kScales; ++g) {
      float scale = static_cast<float>((1.0 + static_cast<double>(rng() % 1024) / 1024.0) / 512.0);
      std::memcpy(row + MlaFp8::kScaleOffset + MlaFp8::kScaleBytes * g, &scale, sizeof scale);
    }
    normalsBf16(rng, row + MlaFp8::kRopeOffset, MlaFp8::kRopeDims);
    return;
  case RowFormat::V41Fp8:
    randomE4M3s(row, V41Fp8::kDims, rng);
    randomV41Scales(row, rng);
    return;
  case RowFormat::Gqa:
    break;
  }
  throw Error(kNotMlaRow);
}

} // namespace dhs::runtime
