//===- Bf16Test.cpp - bfloat16 conversions --------------------------------===//

#include "runtime/core/Bf16.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace dhs::runtime;

TEST_CASE("bf16 round trip of representable values is exact", "[bf16]") {
  for (float value : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f}) {
    bf16_t bits = floatToBf16(value);
    // Values with at most 8 significant bits come back unchanged.
    float back = bf16ToFloat(bits);
    CHECK(back == value);
    CHECK(std::signbit(back) == std::signbit(value));
  }
  // Near the ends of the range (not representable: rounded to nearest,
  // ties to even): 3e38 (0x7F61B1E6) and the subnormal-adjacent 1e-38
  // (0x006CE3EE).
  CHECK(floatToBf16(3.0e38f) == 0x7F62);
  CHECK(floatToBf16(1.0e-38f) == 0x006D);
  CHECK(floatToBf16(1.0f) == 0x3F80);
  CHECK(floatToBf16(-2.0f) == 0xC000);
  CHECK(bf16ToFloat(0x3FC0) == 1.5f);
}

TEST_CASE("float to bf16 rounds to nearest, ties to even", "[bf16]") {
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  CHECK(floatToBf16(floatFromBits(0x3F808000)) == 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: rounds up.
  CHECK(floatToBf16(floatFromBits(0x3F818000)) == 0x3F82);
  // Just above and below halfway.
  CHECK(floatToBf16(floatFromBits(0x3F808001)) == 0x3F81);
  CHECK(floatToBf16(floatFromBits(0x3F807FFF)) == 0x3F80);
  // Negative values round symmetrically.
  CHECK(floatToBf16(floatFromBits(0xBF818000)) == 0xBF82);
  // Overflow to infinity, and the largest finite bf16 stays finite.
  CHECK(floatToBf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(floatToBf16(bf16ToFloat(0x7F7F)) == 0x7F7F);
  CHECK(floatToBf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(floatToBf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  // Subnormals round like everything else.
  CHECK(floatToBf16(floatFromBits(0x00008000)) == 0x0000);
  CHECK(floatToBf16(floatFromBits(0x00018000)) == 0x0002);
}

TEST_CASE("NaN stays NaN through bf16", "[bf16]") {
  // A NaN whose payload lies only in the low 16 bits must not become inf.
  float lowPayloadNan = floatFromBits(0x7F800001);
  REQUIRE(std::isnan(lowPayloadNan));
  bf16_t bits = floatToBf16(lowPayloadNan);
  CHECK(bf16IsNan(bits));
  CHECK(std::isnan(bf16ToFloat(bits)));
  // The sign is kept.
  CHECK((floatToBf16(floatFromBits(0xFFC00000)) & 0x8000) == 0x8000);
  CHECK(bf16IsNan(floatToBf16(std::numeric_limits<float>::quiet_NaN())));
  CHECK(bf16IsNan(doubleToBf16(std::numeric_limits<double>::quiet_NaN())));
  CHECK(bf16IsNan(kBf16Poison));
  CHECK_FALSE(bf16IsNan(0x7F80)); // infinity
}

TEST_CASE("double to bf16 rounds once", "[bf16]") {
  // 1 + 2^-8 + 2^-30 is just above halfway; narrowing to float first would
  // lose the 2^-30 and tie to even (down). One rounding goes up.
  double above = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  CHECK(doubleToBf16(above) == 0x3F81);
  CHECK(floatToBf16(static_cast<float>(above)) == 0x3F80); // the double rounding
  double below = 1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -30);
  CHECK(doubleToBf16(below) == 0x3F80);
  CHECK(doubleToBf16(1.0 + std::ldexp(1.0, -8)) == 0x3F80); // exact tie: even
  CHECK(doubleToBf16(-above) == 0xBF81);
  CHECK(doubleToBf16(1e300) == 0x7F80);
  CHECK(doubleToBf16(-1e300) == 0xFF80);
  CHECK(doubleToBf16(1e-300) == 0x0000);
  CHECK(doubleToBf16(-1e-300) == 0x8000);
  // Agrees with float rounding wherever the double is a float.
  for (std::uint32_t bits = 0x3F000000; bits < 0x3F000000 + 200000; bits += 7) {
    float f = floatFromBits(bits);
    REQUIRE(doubleToBf16(f) == floatToBf16(f));
  }
}
