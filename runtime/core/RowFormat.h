//===- RowFormat.h - KV row formats: layout, decoding, generation -*- C++ -*-===//
//
// The byte layouts of one KV row (one token of one layer) that compiled
// steps name in their manifests, as the kernels read them:
//   mla_bf16  576 bf16 (1152 B); keys 576 dims, values the first 512.
//   mla_fp8   512 e4m3 NoPE dims, 4 fp32 scales (one per 128 dims), 64 bf16
//             RoPE dims (656 B); keys 576 dims (e4m3 x scale, then RoPE),
//             values the first 512.
//   v41_fp8   512 e4m3 dims, 16 ue8m0 scales (2^(e-127), one per 32 dims)
//             (528 B); keys and values the same 512 dims.
// Decoding is exact (every e4m3 value times its scale is a double).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_ROWFORMAT_H
#define DHS_RUNTIME_CORE_ROWFORMAT_H

#include <cstdint>
#include <random>
#include <string>

namespace dhs::runtime {

/// A row format the runtime reads.
enum class RowFormat { MlaBf16, MlaFp8, V41Fp8, Gqa };

/// Element type of GQA rows.
enum class GqaElement { BF16, F16, F32 };

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

/// A GQA row: `kvHeads` keys of `headDim` elements, then `kvHeads` values.
struct GqaLayout {
  std::int64_t kvHeads = 0;
  std::int64_t headDim = 0;
  GqaElement element = GqaElement::BF16;

  /// Bytes of one element.
  std::int64_t elementBytes() const { return element == GqaElement::F32 ? 4 : 2; }
  /// Bytes of one row.
  std::int64_t rowBytes() const { return 2 * kvHeads * headDim * elementBytes(); }
};

/// Parses "bf16", "f16" or "f32"; throws Error otherwise.
GqaElement parseGqaElement(const std::string &name);

/// Decodes the key and the value of KV head `kvHead` of a GQA row.
void decodeGqa(const GqaLayout &layout, const std::uint8_t *row, std::int64_t kvHead, double *key,
               double *value);

/// Fills a GQA row with N(0,1) elements (never zero).
void fillRandomGqaRow(const GqaLayout &layout, std::uint8_t *row, std::mt19937_64 &rng);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_ROWFORMAT_H
