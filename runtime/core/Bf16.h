//===- Bf16.h - bfloat16 conversions ----------------------------*- C++ -*-===//
//
// bfloat16 values are stored as their raw 16-bit patterns (uint16_t): the top
// half of an IEEE-754 binary32. Conversions to bf16 round to nearest, ties to
// even, and keep NaNs NaN (quieted, sign preserved).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_BF16_H
#define DHS_RUNTIME_BF16_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dhs::runtime {

/// Raw bit pattern of one bfloat16 value.
using bf16_t = std::uint16_t;

/// The bf16 pattern the runtime poisons outputs with before a kernel runs
/// (a negative quiet NaN); a kernel never produces it from finite inputs.
inline constexpr bf16_t kBf16Poison = 0xFFFF;

/// Returns the bits of a float.
inline std::uint32_t floatBits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// Returns the float with the given bits.
inline float floatFromBits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// Converts a bf16 value to float (exact).
inline float bf16ToFloat(bf16_t value) {
  return floatFromBits(static_cast<std::uint32_t>(value) << 16);
}

/// Returns true if the bf16 value is a NaN.
inline bool bf16IsNan(bf16_t value) {
  return (value & 0x7F80u) == 0x7F80u && (value & 0x007Fu) != 0;
}

/// Converts a float to bf16, rounding to nearest with ties to even. NaNs stay
/// NaN (sign kept, quiet bit set); infinities and overflow give infinities.
inline bf16_t floatToBf16(float value) {
  std::uint32_t bits = floatBits(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
    // NaN: keep the sign and the top payload bits, force the quiet bit so
    // that truncating the payload never turns the NaN into an infinity.
    return static_cast<bf16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even: add 0x7FFF plus the lowest kept bit. A carry out
  // of the mantissa correctly bumps the exponent (up to infinity).
  std::uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7FFFu + lsb;
  return static_cast<bf16_t>(bits >> 16);
}

/// Converts a double to bf16 with a single rounding (to nearest, ties to
/// even): the double is first narrowed to float with round-to-odd, which has
/// enough extra bits (24 vs 8) that the second rounding is exact.
inline bf16_t doubleToBf16(double value) {
  if (std::isnan(value))
    return floatToBf16(static_cast<float>(value));
  float narrowed = static_cast<float>(value);
  if (static_cast<double>(narrowed) != value) {
    // Inexact: truncate toward zero, then set the sticky (lowest) bit.
    if (std::fabs(static_cast<double>(narrowed)) > std::fabs(value))
      narrowed = std::nextafter(narrowed, 0.0f);
    narrowed = floatFromBits(floatBits(narrowed) | 1u);
  }
  return floatToBf16(narrowed);
}

} // namespace dhs::runtime

#endif // DHS_RUNTIME_BF16_H
