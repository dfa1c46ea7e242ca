//===- RowFormat.h - KV row formats: layout, decoding, generation -*- C++ -*-===//
//
// The KV row formats that compiled steps name in their manifests (their
// layouts are the contract's, runtime/abi/Contract.h): sizes, exact decoding
// (every e4m3 value times its scale is a double) and random rows for tests.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_ROWFORMAT_H
#define DHS_RUNTIME_CORE_ROWFORMAT_H

#include "runtime/abi/Contract.h"

#include <cstdint>
#include <random>
#include <string>

namespace dhs::runtime {

class RandomStream;

/// The compiler-runtime contract (runtime/abi/Contract.h).
namespace abi = ::dhs_abi;

/// A row format the runtime reads, and the element type of GQA rows
/// (runtime/abi/Contract.h has their layouts).
using abi::RowFormat;
using GqaElement = abi::RowElement;

/// Sizes of a row format.
struct RowFormatInfo {
  RowFormat format;
  const char *name;      ///< as in manifests: "mla_bf16", ...
  std::int64_t rowBytes; ///< bytes of one row
  std::int64_t qkDim;    ///< key dims
  std::int64_t vDim;     ///< value dims (the leading key dims)
};

/// The MLA format named `name`; throws Error for unknown names (GQA rows are
/// described by GqaLayout).
const RowFormatInfo &rowFormatInfo(const std::string &name);
/// The sizes of `format`.
const RowFormatInfo &rowFormatInfo(RowFormat format);
/// Names of every known format, for messages ("mla_bf16, mla_fp8, v41_fp8").
std::string knownRowFormats();

/// The value of an e4m3 (OCP FP8, "fn": no infinities) byte; NaN for
/// 0x7f and 0xff.
double decodeE4M3(std::uint8_t byte);

/// Decodes the qk_dim key elements of one row of `format` into `key`.
void decodeKey(RowFormat format, const std::uint8_t *row, double *key);

/// Fills one row of `format` with random finite values of about unit
/// magnitude (never all zero): N(0,1) bf16 elements, or e4m3 bytes with
/// random scales and N(0,1) RoPE dims.
void fillRandomRow(RowFormat format, std::uint8_t *row, std::mt19937_64 &rng);
/// The same from a counter-based stream (RandomStream.h), several times faster:
/// eight e4m3 bytes per number and N(0,1) bf16 elements from normalBf16.
void fillRandomRow(RowFormat format, std::uint8_t *row, RandomStream &rng);

/// A GQA row: `kvHeads` keys of `headDim` elements, then `kvHeads` values.
struct GqaLayout {
  std::int64_t kvHeads = 0;
  std::int64_t headDim = 0;
  GqaElement element = GqaElement::BF16;

  /// Bytes of one element.
  std::int64_t elementBytes() const { return abi::bytes(element); }
  /// Bytes of one row.
  std::int64_t rowBytes() const { return abi::GqaRow::rowBytes(kvHeads, headDim, element); }
};

/// Parses "bf16", "f16" or "f32"; throws Error otherwise.
GqaElement parseGqaElement(const std::string &name);

/// Decodes the key and the value of KV head `kvHead` of a GQA row.
void decodeGqa(const GqaLayout &layout, const std::uint8_t *row, std::int64_t kvHead, double *key,
               double *value);

/// Fills a GQA row with N(0,1) elements (never zero).
void fillRandomGqaRow(const GqaLayout &layout, std::uint8_t *row, std::mt19937_64 &rng);
/// The same from a counter-based stream (RandomStream.h).
void fillRandomGqaRow(const GqaLayout &layout, std::uint8_t *row, RandomStream &rng);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_ROWFORMAT_H
