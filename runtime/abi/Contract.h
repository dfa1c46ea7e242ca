//===- Contract.h - what the compiler and the runtime agree on --*- C++ -*-===//
//
// The one definition of the compiler-runtime contract, included by the
// dialect, code generation and the runtime: status bits, the step log, row
// layouts, roles, parameter sources, launch kinds, residency hints and the
// manifest's format. Header-only, no MLIR; lists are X-macro tables (*.def)
// beside this file. docs/compiler.md describes how the pieces meet.
//
// The namespace is dhs_abi, not dhs::abi: compiler code lives in mlir::dhs
// and says `using namespace mlir`, where a top-level dhs would make `dhs::`
// ambiguous. Both sides call it `abi` (an alias in mlir::dhs and in
// dhs::runtime).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_ABI_CONTRACT_H
#define DHS_RUNTIME_ABI_CONTRACT_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace dhs_abi {

//===----------------------------------------------------------------------===//
// The manifest
//===----------------------------------------------------------------------===//

/// The manifest's format name and version; the runtime reads this version
/// only.
inline constexpr const char *kManifestFormat = "dhs-step-manifest";
inline constexpr int kManifestVersion = 2;
/// The manifest's file name inside a step directory.
inline constexpr const char *kManifestFileName = "manifest.json";
/// A PTX file starts with a comment line of this marker, then JSON, for each
/// launch of it in the manifest: the launch as its kernel was compiled for
/// (kernel, grid, block, dynamic_shared_bytes, and params without their
/// argument index or arena offset, which the kernel takes as addresses).
/// The runtime refuses a launch that none of them describes: a manifest
/// edited after dhs-compile wrote it would launch the kernel with other
/// sizes than it indexes by.
inline constexpr const char *kPtxLaunchMarker = "// dhs.launch: ";
/// Kinds of step arguments ("arguments[i].kind").
inline constexpr const char *kMemRefKind = "memref";
inline constexpr const char *kPoolKind = "kv_pool";

//===----------------------------------------------------------------------===//
// Enums with names
//===----------------------------------------------------------------------===//

/// A launch's kernel (LaunchKinds.def).
enum class LaunchKind : std::uint8_t {
#define DHS_LAUNCH_KIND(Enum, Name) Enum,
#include "runtime/abi/LaunchKinds.def"
};

/// How a copy_rows launch moves rows (LaunchKinds.def).
enum class CopyDirection : std::uint8_t {
#define DHS_COPY_DIRECTION(Enum, Name) Enum,
#include "runtime/abi/LaunchKinds.def"
};

/// What a step argument is to the runtime (Roles.def).
enum class ArgumentRole : std::uint8_t {
#define DHS_ARGUMENT_ROLE(Enum, Name, Type, Rank) Enum,
#include "runtime/abi/Roles.def"
};

/// What a kernel parameter is (Roles.def): an argument role, a view of a
/// pool, or a buffer of the step itself. Argument roles come first, with the
/// same values as in ArgumentRole.
enum class ParamRole : std::uint8_t {
#define DHS_ARGUMENT_ROLE(Enum, Name, Type, Rank) Enum,
#define DHS_ARGUMENT_USE_ROLE(Enum, Name, Argument) Enum,
#define DHS_POOL_VIEW_ROLE(Enum, Name, Source) Enum,
#define DHS_LOCAL_ROLE(Enum, Name) Enum,
#include "runtime/abi/Roles.def"
};

/// Where a kernel parameter's memory comes from (ParamSources.def).
enum class ParamSource : std::uint8_t {
#define DHS_PARAM_SOURCE(Enum, Name) Enum,
#include "runtime/abi/ParamSources.def"
};

/// How spare HBM is used (Residency.def).
enum class ResidencyPolicy : std::uint8_t {
#define DHS_RESIDENCY_POLICY(Enum, Name) Enum,
#include "runtime/abi/Residency.def"
};

/// Which hot row gives up its slot (Residency.def).
enum class Replacement : std::uint8_t {
#define DHS_REPLACEMENT(Enum, Name) Enum,
#include "runtime/abi/Residency.def"
};

/// Element types of step arguments and kernel parameters (DTypes.def).
enum class DType : std::uint8_t {
#define DHS_DTYPE(Enum, Name, Bytes) Enum,
#include "runtime/abi/DTypes.def"
};

/// The memref a step argument of a role is (Roles.def): its element type and
/// rank; rank -1 for kv_pool, which is not a memref.
struct ArgumentType {
  DType dtype;
  int rank;
};
constexpr ArgumentType argumentType(ArgumentRole role) {
  switch (role) {
#define DHS_ARGUMENT_ROLE(Enum, Name, Type, Rank)                                                  \
  case ArgumentRole::Enum:                                                                         \
    return {DType::Type, Rank};
#include "runtime/abi/Roles.def"
  }
  return {DType::I8, -1};
}

/// Element types of GQA rows (DTypes.def).
enum class RowElement : std::uint8_t {
#define DHS_ROW_ELEMENT(Enum, Name, Bytes) Enum,
#include "runtime/abi/DTypes.def"
};

/// A KV row format (RowFormats.def).
enum class RowFormat : std::uint8_t {
#define DHS_ROW_FORMAT(Enum, Name) Enum,
#include "runtime/abi/RowFormats.def"
};

/// The spellings of an enum's values, in the order of its table.
template <typename Enum> struct EnumNames;
template <> struct EnumNames<LaunchKind> {
  static constexpr const char *values[] = {
#define DHS_LAUNCH_KIND(Enum, Name) Name,
#include "runtime/abi/LaunchKinds.def"
  };
};
template <> struct EnumNames<CopyDirection> {
  static constexpr const char *values[] = {
#define DHS_COPY_DIRECTION(Enum, Name) Name,
#include "runtime/abi/LaunchKinds.def"
  };
};
template <> struct EnumNames<ParamRole> {
  static constexpr const char *values[] = {
#define DHS_ARGUMENT_ROLE(Enum, Name, Type, Rank) Name,
#define DHS_ARGUMENT_USE_ROLE(Enum, Name, Argument) Name,
#define DHS_POOL_VIEW_ROLE(Enum, Name, Source) Name,
#define DHS_LOCAL_ROLE(Enum, Name) Name,
#include "runtime/abi/Roles.def"
  };
};
template <> struct EnumNames<ArgumentRole> {
  static constexpr const char *values[] = {
#define DHS_ARGUMENT_ROLE(Enum, Name, Type, Rank) Name,
#include "runtime/abi/Roles.def"
  };
};
template <> struct EnumNames<ParamSource> {
  static constexpr const char *values[] = {
#define DHS_PARAM_SOURCE(Enum, Name) Name,
#include "runtime/abi/ParamSources.def"
  };
};
template <> struct EnumNames<ResidencyPolicy> {
  static constexpr const char *values[] = {
#define DHS_RESIDENCY_POLICY(Enum, Name) Name,
#include "runtime/abi/Residency.def"
  };
};
template <> struct EnumNames<Replacement> {
  static constexpr const char *values[] = {
#define DHS_REPLACEMENT(Enum, Name) Name,
#include "runtime/abi/Residency.def"
  };
};
template <> struct EnumNames<DType> {
  static constexpr const char *values[] = {
#define DHS_DTYPE(Enum, Name, Bytes) Name,
#include "runtime/abi/DTypes.def"
  };
};
template <> struct EnumNames<RowElement> {
  static constexpr const char *values[] = {
#define DHS_ROW_ELEMENT(Enum, Name, Bytes) Name,
#include "runtime/abi/DTypes.def"
  };
};
template <> struct EnumNames<RowFormat> {
  static constexpr const char *values[] = {
#define DHS_ROW_FORMAT(Enum, Name) Name,
#include "runtime/abi/RowFormats.def"
  };
};

/// How many values `Enum` has; they are 0 .. count - 1.
template <typename Enum> constexpr std::size_t count() {
  return std::size(EnumNames<Enum>::values);
}

/// Every value of `Enum`, in table order.
template <typename Enum> constexpr std::array<Enum, count<Enum>()> allValues() {
  std::array<Enum, count<Enum>()> values{};
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<Enum>(i);
  return values;
}

/// The manifest spelling of `value`.
template <typename Enum> constexpr const char *name(Enum value) {
  return EnumNames<Enum>::values[static_cast<std::size_t>(value)];
}

constexpr ParamRole toParamRole(ArgumentRole role) { return static_cast<ParamRole>(role); }

/// Bytes of one element.
constexpr std::size_t bytes(DType type) {
  constexpr std::size_t sizes[] = {
#define DHS_DTYPE(Enum, Name, Bytes) Bytes,
#include "runtime/abi/DTypes.def"
  };
  return sizes[static_cast<std::size_t>(type)];
}
constexpr std::int64_t bytes(RowElement element) {
  constexpr std::int64_t sizes[] = {
#define DHS_ROW_ELEMENT(Enum, Name, Bytes) Bytes,
#include "runtime/abi/DTypes.def"
  };
  return sizes[static_cast<std::size_t>(element)];
}

/// The value of `Enum` spelled `text`, or nothing.
template <typename Enum> constexpr std::optional<Enum> parse(std::string_view text) {
  for (Enum value : allValues<Enum>())
    if (text == name(value))
      return value;
  return std::nullopt;
}

/// The spellings of every value of `Enum`, for messages: "a, b, c".
template <typename Enum> std::string knownNames() {
  std::string names;
  for (Enum value : allValues<Enum>())
    names += (names.empty() ? "" : ", ") + std::string(name(value));
  return names;
}

//===----------------------------------------------------------------------===//
// Launches and roles
//===----------------------------------------------------------------------===//

/// Whether a launch computes attention (and so carries softmax_scale, layer
/// and, with a sliding window, window_size).
constexpr bool isAttention(LaunchKind kind) {
  return kind == LaunchKind::SparseAttention || kind == LaunchKind::Attention;
}

/// The role a step argument gets when it is passed as a parameter of `role`:
/// the same role (or the one a use of it names), kv_pool for views of a
/// pool, none for the step's own buffers (which are never step arguments).
constexpr std::optional<ArgumentRole> argumentRole(ParamRole role) {
  switch (role) {
#define DHS_ARGUMENT_ROLE(Enum, Name, Type, Rank)                                                  \
  case ParamRole::Enum:                                                                            \
    return ArgumentRole::Enum;
#define DHS_ARGUMENT_USE_ROLE(Enum, Name, Argument)                                                \
  case ParamRole::Enum:                                                                            \
    return ArgumentRole::Argument;
#define DHS_POOL_VIEW_ROLE(Enum, Name, Source)                                                     \
  case ParamRole::Enum:                                                                            \
    return ArgumentRole::KvPool;
#include "runtime/abi/Roles.def"
  default:
    return std::nullopt;
  }
}

/// The source of a view of a pool, or nothing for other roles.
constexpr std::optional<ParamSource> poolViewSource(ParamRole role) {
  switch (role) {
#define DHS_POOL_VIEW_ROLE(Enum, Name, Source)                                                     \
  case ParamRole::Enum:                                                                            \
    return ParamSource::Source;
#include "runtime/abi/Roles.def"
  default:
    return std::nullopt;
  }
}

//===----------------------------------------------------------------------===//
// The step status
//===----------------------------------------------------------------------===//

/// Bits a kernel ORs into the step status word when it rejects its input
/// (StatusBits.def).
enum StatusBit : std::uint32_t {
#define DHS_STATUS_BIT(Name, Bit, Message) kStatus##Name = Bit,
#include "runtime/abi/StatusBits.def"
};

/// A status bit and what it means.
struct StatusBitInfo {
  std::uint32_t bit;
  const char *message;
};
inline constexpr StatusBitInfo kStatusBits[] = {
#define DHS_STATUS_BIT(Name, Bit, Message) {Bit, Message},
#include "runtime/abi/StatusBits.def"
};
/// Every bit kernels may set.
inline constexpr std::uint32_t kKnownStatusBits = 0
#define DHS_STATUS_BIT(Name, Bit, Message) | Bit
#include "runtime/abi/StatusBits.def"
    ;

//===----------------------------------------------------------------------===//
// The step log
//===----------------------------------------------------------------------===//

/// Words of a pool's step log (dhs.pool_log), which a resolve kernel fills
/// for the residency controller: a header, then room for N hit slots and N
/// (lane, row id) miss pairs, for N selections.
struct StepLogLayout {
  static constexpr std::size_t kStep = 0;    ///< the step number (runtime-written)
  static constexpr std::size_t kHits = 1;    ///< distinct slots hit
  static constexpr std::size_t kMisses = 2;  ///< selections that missed
  static constexpr std::size_t kEntries = 3; ///< valid selections
  static constexpr std::size_t kHeader = 4;  ///< header words
  /// Words per hit entry (a slot) and per miss entry (lane, row id).
  static constexpr std::size_t kHitWords = 1;
  static constexpr std::size_t kMissWords = 2;
  /// The first word of the hit list and of the miss list.
  static constexpr std::size_t hitsBegin() { return kHeader; }
  static constexpr std::size_t missesBegin(std::size_t selections) {
    return kHeader + kHitWords * selections;
  }
  /// Words of a log for `selections` selections.
  static constexpr std::size_t words(std::size_t selections) {
    return missesBegin(selections) + kMissWords * selections;
  }
};

/// The words of a plan_promotions launch's control buffer (role
/// promotion_control) and the layout of the lists it writes (roles
/// place_rows and place_slots, [2 x B x N] for B lanes of N fetched rows).
/// The host writes the inputs before the launch and reads the counts after
/// it; the list is what a place_rows launch carries out. A non-zero status
/// word at the launch's entry (the step failed) plans nothing: the counts
/// are 0, the list all (-1, -1), the state and the other words as they were.
struct PromotionPlanLayout {
  static constexpr std::size_t kHand = 0;       ///< CLOCK hand (in; out: the new hand)
  static constexpr std::size_t kFreeCount = 1;  ///< free-stack entries (in; out: left)
  static constexpr std::size_t kFreeBudget = 2; ///< optional budget - excess (in)
  static constexpr std::size_t kPromoted = 3;   ///< rows given a slot (out)
  static constexpr std::size_t kReleased = 4;   ///< hot rows evicted for them (out)
  /// Fetched rows listed by all lanes, before the per-lane cap (out): the
  /// controller's notPromoted is listed - promoted.
  static constexpr std::size_t kListed = 5;
  /// The controller's noVictimStep memo of the group (in and out): the step
  /// in which a non-forced victim search found nothing. In: a memo equal to
  /// the (non-zero) step finds no victims. Out: the step when the plan
  /// wanted victims and ran out of candidates, else as it was.
  static constexpr std::size_t kNoVictimStep = 6;
  /// The group's hot rows above their floors (in and out): a promotion into
  /// a free slot adds one, a hot victim replaced leaves it (floor 0).
  static constexpr std::size_t kExcess = 7;
  static constexpr std::size_t kWords = 8;
  /// Promotion i (a fetched row's rank: lanes in order, rows as listed) is
  /// entry i of the list, (host row, slot) or (-1, -1); eviction v is entry
  /// releasesBegin + v, (evicted host row, -1) or (-1, -1).
  static constexpr std::size_t releasesBegin(std::size_t fetched) { return fetched; }
  /// Entries of the list for `fetched` = B x N fetched rows.
  static constexpr std::size_t entries(std::size_t fetched) { return 2 * fetched; }
};

/// A dhs.age_rows launch: the appends recorded between steps (role age_list,
/// i64 [N x kEntryWords]), the control words it reads and writes in the
/// promotion_control buffer (i32 [kWords], shared with plan_promotions), and
/// the list it writes for place_rows (roles place_rows and place_slots,
/// [2 x N]).
struct AgeRowsLayout {
  static constexpr std::size_t kAged = 0;       ///< host row leaving the newest window, -1: none
  static constexpr std::size_t kFresh = 1;      ///< the new host row (-1: padding, skipped)
  static constexpr std::size_t kOwnerBegin = 2; ///< its request's host range [begin,
  static constexpr std::size_t kOwnerEnd = 3;   ///< end)
  static constexpr std::size_t kEntryWords = 4;
  /// The words it reads and writes (plan_promotions' words): the hand, the
  /// free count, the budget word (optional budget - excess), the step a
  /// non-forced victim search failed in, and the excess.
  static constexpr std::size_t kHand = PromotionPlanLayout::kHand;
  static constexpr std::size_t kFreeCount = PromotionPlanLayout::kFreeCount;
  static constexpr std::size_t kFreeBudget = PromotionPlanLayout::kFreeBudget;
  static constexpr std::size_t kNoVictimStep = PromotionPlanLayout::kNoVictimStep;
  static constexpr std::size_t kExcess = PromotionPlanLayout::kExcess;
  static constexpr std::size_t kWords = PromotionPlanLayout::kWords;
  /// Append i is entry i of the list, (new host row, its slot after the
  /// list) or (-1, -1) when it left HBM again in the list; entry N + i is
  /// (the host row append i released, -1) or (-1, -1).
  static constexpr std::size_t releasesBegin(std::size_t appends) { return appends; }
  /// Entries of the list for N appends.
  static constexpr std::size_t entries(std::size_t appends) { return 2 * appends; }
};

//===----------------------------------------------------------------------===//
// Row layouts
//===----------------------------------------------------------------------===//

/// mla_bf16: the MLA latent, 512 NoPE + 64 RoPE dims in bf16. Keys are whole
/// rows, values the first 512 dims (MLA in absorbed form).
struct MlaBf16Row {
  static constexpr std::int64_t kDims = 576;
  static constexpr std::int64_t kRowBytes = 2 * kDims;
  static constexpr std::int64_t kQKDim = kDims;
  static constexpr std::int64_t kVDim = 512;
};

/// mla_fp8 (DeepSeek-V3.2): bytes [0, 512) the NoPE dims in e4m3, then four
/// fp32 scales (one per 128 NoPE dims), then the 64 RoPE dims in bf16,
/// unquantized. Keys are 576 dims, values the 512 dequantized NoPE dims.
struct MlaFp8Row {
  static constexpr std::int64_t kNopeDims = 512;
  static constexpr std::int64_t kDimsPerScale = 128;
  static constexpr std::int64_t kScales = kNopeDims / kDimsPerScale;
  static constexpr std::int64_t kScaleOffset = kNopeDims;
  static constexpr std::int64_t kScaleBytes = 4;
  static constexpr std::int64_t kRopeOffset = kScaleOffset + kScaleBytes * kScales;
  static constexpr std::int64_t kRopeDims = 64;
  static constexpr std::int64_t kRowBytes = kRopeOffset + 2 * kRopeDims;
  static constexpr std::int64_t kQKDim = kNopeDims + kRopeDims;
  static constexpr std::int64_t kVDim = kNopeDims;
};

/// v41_fp8 (DeepSeek-V4.1 compressed entry): 512 dims in e4m3, then 16 ue8m0
/// scales (2^(e-127); e = 255 is NaN), one per 32 dims. Keys and values are
/// the same 512 dims.
struct V41Fp8Row {
  static constexpr std::int64_t kDims = 512;
  static constexpr std::int64_t kDimsPerScale = 32;
  static constexpr std::int64_t kScales = kDims / kDimsPerScale;
  static constexpr std::int64_t kScaleOffset = kDims;
  static constexpr std::int64_t kRowBytes = kScaleOffset + kScales;
  static constexpr std::int64_t kQKDim = kDims;
  static constexpr std::int64_t kVDim = kDims;
};

/// gqa: `kvHeads` keys of `headDim` elements, then `kvHeads` values.
struct GqaRow {
  static constexpr std::int64_t rowBytes(std::int64_t kvHeads, std::int64_t headDim,
                                         RowElement element) {
    return 2 * kvHeads * headDim * bytes(element);
  }
  /// Byte offsets of KV head `head`'s key and value.
  static constexpr std::int64_t keyOffset(std::int64_t head, std::int64_t headDim,
                                          RowElement element) {
    return head * headDim * bytes(element);
  }
  static constexpr std::int64_t valueOffset(std::int64_t kvHeads, std::int64_t head,
                                            std::int64_t headDim, RowElement element) {
    return (kvHeads + head) * headDim * bytes(element);
  }
};

static_assert(MlaBf16Row::kRowBytes == 1152, "mla_bf16 rows are 1152 bytes");
static_assert(MlaFp8Row::kRopeOffset == 528 && MlaFp8Row::kRowBytes == 656,
              "mla_fp8 rows are 512 e4m3 + 4 fp32 scales + 64 bf16 = 656 bytes");
static_assert(V41Fp8Row::kRowBytes == 528, "v41_fp8 rows are 512 e4m3 + 16 ue8m0 = 528 bytes");

/// The sizes of a fixed-size format (all but gqa).
struct RowSizes {
  std::int64_t rowBytes = 0;
  std::int64_t qkDim = 0;
  std::int64_t vDim = 0;
};
constexpr std::optional<RowSizes> fixedRowSizes(RowFormat format) {
  switch (format) {
  case RowFormat::MlaBf16:
    return RowSizes{MlaBf16Row::kRowBytes, MlaBf16Row::kQKDim, MlaBf16Row::kVDim};
  case RowFormat::MlaFp8:
    return RowSizes{MlaFp8Row::kRowBytes, MlaFp8Row::kQKDim, MlaFp8Row::kVDim};
  case RowFormat::V41Fp8:
    return RowSizes{V41Fp8Row::kRowBytes, V41Fp8Row::kQKDim, V41Fp8Row::kVDim};
  case RowFormat::Gqa:
    return std::nullopt;
  }
  return std::nullopt;
}

} // namespace dhs_abi

#endif // DHS_RUNTIME_ABI_CONTRACT_H
