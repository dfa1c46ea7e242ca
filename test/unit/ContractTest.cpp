//===- ContractTest.cpp - the compiler-runtime contract's tables ----------===//

#include "runtime/abi/Contract.h"
#include "runtime/core/Manifest.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <set>
#include <string>

namespace abi = dhs_abi;

namespace {

/// Every value's name is distinct and parses back to the value.
template <typename Enum> void checkNames() {
  std::set<std::string> seen;
  for (Enum value : abi::allValues<Enum>()) {
    std::string name = abi::name(value);
    INFO(name);
    CHECK(name != "?");
    CHECK(seen.insert(name).second);
    CHECK(abi::parse<Enum>(name) == value);
  }
  CHECK_FALSE(abi::parse<Enum>("").has_value());
  CHECK_FALSE(abi::parse<Enum>("no_such_name").has_value());
}

} // namespace

TEST_CASE("every name of the contract parses back to its value", "[contract]") {
  checkNames<abi::LaunchKind>();
  checkNames<abi::CopyDirection>();
  checkNames<abi::ArgumentRole>();
  checkNames<abi::ParamRole>();
  checkNames<abi::ParamSource>();
  checkNames<abi::ResidencyPolicy>();
  checkNames<abi::Replacement>();
  checkNames<abi::DType>();
  checkNames<abi::RowElement>();
  checkNames<abi::RowFormat>();
  CHECK(abi::knownNames<abi::Replacement>() == "clock, lru, lru2");
}

TEST_CASE("kernel parameter roles give step arguments their roles", "[contract]") {
  // Argument roles keep their names as parameter roles.
  for (abi::ArgumentRole role : abi::allValues<abi::ArgumentRole>()) {
    CHECK(abi::argumentRole(abi::toParamRole(role)) == role);
    CHECK(std::string(abi::name(role)) == abi::name(abi::toParamRole(role)));
  }
  // A kernel's two uses of rows are rows arguments.
  CHECK(abi::argumentRole(abi::ParamRole::CopySource) == abi::ArgumentRole::Rows);
  CHECK(abi::argumentRole(abi::ParamRole::CopyDestination) == abi::ArgumentRole::Rows);
  // Views of a pool make it a kv_pool argument, each from its own source.
  std::set<abi::ParamSource> sources;
  for (abi::ParamRole role :
       {abi::ParamRole::HbmTier, abi::ParamRole::HostTier, abi::ParamRole::ResidencyMap,
        abi::ParamRole::ReplacementState, abi::ParamRole::StepLog}) {
    CHECK(abi::argumentRole(role) == abi::ArgumentRole::KvPool);
    REQUIRE(abi::poolViewSource(role).has_value());
    CHECK(sources.insert(*abi::poolViewSource(role)).second);
  }
  // The step's own buffers are never arguments.
  for (abi::ParamRole role : {abi::ParamRole::Status, abi::ParamRole::Staging,
                              abi::ParamRole::Partials, abi::ParamRole::RingSlots}) {
    CHECK_FALSE(abi::argumentRole(role).has_value());
    CHECK_FALSE(abi::poolViewSource(role).has_value());
  }
  // Except a union of missing rows and its remap, which a decision step
  // takes as arguments (elsewhere they are scratch buffers), and the
  // selections share_rows reorders.
  for (abi::ParamRole role :
       {abi::ParamRole::Missing, abi::ParamRole::Remap, abi::ParamRole::SharedRows,
        abi::ParamRole::SharedSlots, abi::ParamRole::SharedTiles}) {
    CHECK(abi::argumentRole(role).has_value());
    CHECK(std::string(abi::name(*abi::argumentRole(role))) == abi::name(role));
    CHECK_FALSE(abi::poolViewSource(role).has_value());
  }
}

TEST_CASE("status bits are distinct single bits, each described", "[contract]") {
  std::uint32_t all = 0;
  for (const abi::StatusBitInfo &bit : abi::kStatusBits) {
    CHECK(bit.bit != 0);
    CHECK((bit.bit & (bit.bit - 1)) == 0);
    CHECK((all & bit.bit) == 0);
    all |= bit.bit;
    CHECK(dhs::runtime::describeStatus(bit.bit) == "0x" + [&] {
      char text[16];
      std::snprintf(text, sizeof text, "%x", bit.bit);
      return std::string(text);
    }() + ": " + bit.message);
  }
  CHECK(all == abi::kKnownStatusBits);
}

TEST_CASE("the step log has room for every hit and miss", "[contract]") {
  using Log = abi::StepLogLayout;
  const std::size_t n = 4 * 2 * 256;
  CHECK(Log::hitsBegin() == Log::kHeader);
  CHECK(Log::missesBegin(n) == Log::kHeader + n);
  CHECK(Log::words(n) == Log::kHeader + 3 * n);
  CHECK(Log::kStep < Log::kHeader);
  CHECK(Log::kEntries < Log::kHeader);
}

TEST_CASE("row layouts add up to their row sizes", "[contract]") {
  using Fp8 = abi::MlaFp8Row;
  CHECK(Fp8::kNopeDims + Fp8::kScales * Fp8::kScaleBytes + 2 * Fp8::kRopeDims == Fp8::kRowBytes);
  CHECK(Fp8::kScales * Fp8::kDimsPerScale == Fp8::kNopeDims);
  using V41 = abi::V41Fp8Row;
  CHECK(V41::kScales * V41::kDimsPerScale == V41::kDims);
  CHECK(abi::GqaRow::rowBytes(8, 128, abi::RowElement::BF16) == 4096);
  CHECK(abi::GqaRow::valueOffset(8, 1, 128, abi::RowElement::F32) == 9 * 128 * 4);
  for (abi::RowFormat format : abi::allValues<abi::RowFormat>()) {
    INFO(abi::name(format));
    CHECK(abi::fixedRowSizes(format).has_value() == (format != abi::RowFormat::Gqa));
  }
}
