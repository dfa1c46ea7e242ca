//===- RowFormat.cpp - KV row formats -------------------------------------===//

#include "runtime/RowFormat.h"

#include "runtime/Bf16.h"
#include "runtime/Error.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dhs::runtime {

namespace {

const RowFormatInfo kFormats[] = {
    {RowFormat::MlaBf16, "mla_bf16", 1152, 576, 512},
    {RowFormat::MlaFp8, "mla_fp8", 656, 576, 512},
    {RowFormat::V41Fp8, "v41_fp8", 528, 512, 512},
};

/// Reads a little-endian value of type T at `bytes`.
template <typename T> T load(const std::uint8_t *bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

/// N(0,1) by Box-Muller on 53-bit uniforms, so a seed gives the same values on
/// every platform (std::normal_distribution is implementation-defined).
double normal(std::mt19937_64 &rng) {
  auto uniform = [&] {
    return (static_cast<double>(rng() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  return std::sqrt(-2.0 * std::log(uniform())) *
         std::cos(6.283185307179586 * uniform());
}

/// A random e4m3 byte that is not NaN (0x7f, 0xff).
std::uint8_t randomE4M3(std::mt19937_64 &rng) {
  for (;;) {
    auto byte = static_cast<std::uint8_t>(rng() & 0xff);
    if ((byte & 0x7f) != 0x7f)
      return byte;
  }
}

} // namespace

const RowFormatInfo &rowFormatInfo(const std::string &name) {
  for (const RowFormatInfo &info : kFormats)
    if (name == info.name)
      return info;
  throw Error("unknown KV row format '" + name + "' (known: " +
              knownRowFormats() + ")");
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
  int sign = byte >> 7, exponent = (byte >> 3) & 15, mantissa = byte & 7;
  if (exponent == 15 && mantissa == 7)
    return std::numeric_limits<double>::quiet_NaN();
  double magnitude = exponent == 0
                         ? std::ldexp(mantissa, -9)
                         : std::ldexp(8 + mantissa, exponent - 10);
  return sign ? -magnitude : magnitude;
}

void decodeKey(RowFormat format, const std::uint8_t *row, double *key) {
  switch (format) {
  case RowFormat::MlaBf16:
    for (int d = 0; d < 576; ++d)
      key[d] = bf16ToFloat(load<bf16_t>(row + 2 * d));
    return;
  case RowFormat::MlaFp8:
    for (int d = 0; d < 512; ++d)
      key[d] = decodeE4M3(row[d]) *
               static_cast<double>(load<float>(row + 512 + 4 * (d / 128)));
    for (int d = 0; d < 64; ++d)
      key[512 + d] = bf16ToFloat(load<bf16_t>(row + 528 + 2 * d));
    return;
  case RowFormat::V41Fp8:
    for (int d = 0; d < 512; ++d) {
      int e = row[512 + d / 32];
      double scale = e == 255 ? std::numeric_limits<double>::quiet_NaN()
                              : std::ldexp(1.0, e - 127);
      key[d] = decodeE4M3(row[d]) * scale;
    }
    return;
  }
  throw Error("unknown KV row format");
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
    for (int d = 0; d < 576; ++d)
      putBf16(row + 2 * d);
    return;
  case RowFormat::MlaFp8:
    for (int d = 0; d < 512; ++d)
      row[d] = randomE4M3(rng);
    // Random bytes span +-448 (log-uniformly); scales of 2^-9..2^-8 keep the
    // keys within a few units, like quantized real KV.
    for (int g = 0; g < 4; ++g) {
      float scale = static_cast<float>(std::ldexp(1.0 + (rng() % 1024) / 1024.0, -9));
      std::memcpy(row + 512 + 4 * g, &scale, sizeof scale);
    }
    for (int d = 0; d < 64; ++d)
      putBf16(row + 528 + 2 * d);
    return;
  case RowFormat::V41Fp8:
    for (int d = 0; d < 512; ++d)
      row[d] = randomE4M3(rng);
    for (int g = 0; g < 16; ++g)
      row[512 + g] = static_cast<std::uint8_t>(118 + rng() % 3); // 2^-9..2^-7
    return;
  }
  throw Error("unknown KV row format");
}

} // namespace dhs::runtime
