//===- Manifest.h - The compiled step's manifest ----------------*- C++ -*-===//
//
// A compiled step is a directory written by dhs-compile: `manifest.json` plus
// the PTX files it names. The manifest says which arguments the step takes
// (role, dtype, shape; the KV pool's row format and tier sizes) and which
// kernels to launch, in order, with which parameters. Loading validates it
// strictly: any unknown format, version, role, source, dtype or key, any shape
// that disagrees with its argument, and any missing or non-PTX file is an
// error naming the file and the field.
//
// Kernel ABI: every entry of a launch's "params" is an MLIR memref descriptor
// flattened into 8-byte kernel parameters: allocated pointer, aligned pointer,
// offset, sizes[rank], strides[rank] (row-major, in elements).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_MANIFEST_H
#define DHS_RUNTIME_CORE_MANIFEST_H

#include "runtime/core/RowFormat.h"
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <string>
#include <vector>

namespace dhs::runtime {

/// The manifest format name and the only version this runtime reads.
inline constexpr const char *kManifestFormat = "dhs-step-manifest";
inline constexpr int kManifestVersion = 1;
/// The manifest's file name inside a step directory.
inline constexpr const char *kManifestFileName = "manifest.json";

/// Element types that may appear in a manifest.
enum class DType { BF16, I32, I64, I8, F32 };

/// Returns the manifest spelling of a dtype ("bf16", "i32", "i64", "i8").
const char *dtypeName(DType type);
/// Returns the size of one element in bytes.
std::size_t dtypeSize(DType type);
/// Parses a manifest dtype spelling; std::nullopt if unknown.
std::optional<DType> parseDType(const std::string &name);

/// What a step argument means to the runtime.
enum class ArgumentRole {
  Queries,      ///< bf16 [B,Q,H,qk_dim]
  RowIds,       ///< i32 [B,Q,K]: selected history rows, -1 = unused
  Slots,        ///< i32 [B,Q,K]: HBM slot of each selected row, -1 = host
  HistoryStart, ///< i64 [B]: first host-store row of each request
  HistoryLen,   ///< i32 [B]: history length of each request
  KvPool,       ///< the KV pool (HBM slots + pinned host store)
  Output,       ///< bf16 [B,Q,H,v_dim]
  Positions,    ///< i32 [B]: logical positions of draft rows (ring ops)
  Rows,         ///< i8 [B,N,layers,row_bytes]: rows moved whole (ring, window)
  DraftTokens,  ///< i32 [B,gamma]: drafted tokens (accept)
  TargetProbs,  ///< f32 [B,gamma+1,V]: the target's distributions (accept)
  DraftProbs,   ///< f32 [B,gamma,V]: the drafter's distributions (accept)
  Seeds,        ///< i64 [B]: per-request random seeds (accept)
  StepCounter,  ///< i64 [1]: the step counter (accept)
  Accepted,     ///< i32 [B]: accepted drafts (accept)
  NextToken,    ///< i32 [B]: the next token (accept)
  Scores,       ///< f32 [B,Q,N]: the indexer's score of each row (topk)
  WindowRing,   ///< i8 [B,R,layers,row_bytes]: sliding-window ring (attention)
  WindowTokens, ///< i32 [B]: raw tokens of each request (sliding window)
  PlaceRows,    ///< i64 [N]: host-store rows to place in HBM (-1: none)
  PlaceSlots,   ///< i32 [N]: their HBM slots (-1: the row left HBM)
};

/// Returns the manifest spelling of a role ("queries", "row_ids", ...).
const char *roleName(ArgumentRole role);

/// Where a kernel parameter's memory comes from.
enum class ParamSource {
  Argument,    ///< a memref argument of the step
  PoolHbm,     ///< the KV pool's HBM slots [hbm_slots, layers, row_bytes] x i8
  PoolHost,    ///< the host store [host_rows, layers, row_bytes] x i8, zero-copy
  PoolMap,     ///< the pool's residency map [host_rows] x i32: slot of each row
  PoolRecency, ///< the pool's replacement state [hbm_slots, 2] x i32: last
               ///< and previous use step of each slot
  PoolLog,     ///< the pool's step log [words] x i32 (see StepLog)
  Status,      ///< the step's device status word, i32 [1]
  Scratch,     ///< a buffer at `offset` bytes into the step's staging arena
};

/// Returns the manifest spelling of a parameter source.
const char *paramSourceName(ParamSource source);

/// Words of a pool's step log (dhs.pool_log), which a resolve kernel fills
/// for the residency controller: a header, then room for N hit slots and N
/// (lane, row id) miss pairs, for N selections.
struct StepLogLayout {
  static constexpr std::size_t kStep = 0;    ///< the step number (runtime-written)
  static constexpr std::size_t kHits = 1;    ///< distinct slots hit
  static constexpr std::size_t kMisses = 2;  ///< selections that missed
  static constexpr std::size_t kEntries = 3; ///< valid selections
  static constexpr std::size_t kHeader = 4;  ///< header words
  /// Words of a log for `selections` selections.
  static std::size_t words(std::size_t selections) { return kHeader + 3 * selections; }
};

/// Status word bits a kernel sets when it rejects its input.
enum StatusBits : std::uint32_t {
  kStatusRowOutsideHistory = 1,    ///< a row id outside its request's history
  kStatusSlotOutOfRange = 2,       ///< a slot >= hbm_slots
  kStatusHostRowOutOfRange = 4,    ///< a host index >= host_rows
  kStatusStagingOutOfRange = 8,    ///< a staging position outside its buffer
  kStatusHistoryBeyondScores = 16, ///< a history longer than its scores (topk)
  kStatusBadWindowTokens = 32,     ///< a negative sliding-window token count
};

/// Describes the set bits of a status word in words, e.g.
/// "0x3: row id outside its request's history, slot >= hbm_slots".
std::string describeStatus(std::uint32_t status);

/// The KV pool argument: row format and tier sizes.
struct KvPoolInfo {
  std::string format;    ///< row format, e.g. "mla_bf16"
  DType elementType;     ///< element type of a row (bf16 for mla_bf16)
  std::int64_t rowBytes; ///< bytes per row (1152 for mla_bf16)
  std::int64_t rowElems; ///< row bytes / 2 (bf16 elements for mla_bf16)
  std::int64_t layers;   ///< layers per token in the pool's group
  std::int64_t qkDim;    ///< dims used for scores (576)
  std::int64_t vDim;     ///< leading dims used as values (512)
  std::int64_t hbmSlots; ///< fixed HBM slot count, or -1 = chosen at run time
  std::int64_t hostRows; ///< fixed host-store rows, or -1 = chosen at run time
  GqaLayout gqa;         ///< the layout of "gqa" rows
};

/// One argument of the step.
struct Argument {
  int index = 0;                   ///< position in "arguments"
  ArgumentRole role;               ///< what it means
  bool isPool = false;             ///< kind "kv_pool" (else "memref")
  DType dtype = DType::BF16;       ///< element type (memref arguments)
  std::vector<std::int64_t> shape; ///< static shape (memref arguments)
  KvPoolInfo pool{};               ///< row format and sizes (kv_pool only)
};

/// One kernel parameter (a memref descriptor).
struct LaunchParam {
  ParamSource source;              ///< where its memory comes from
  int argumentIndex = -1;          ///< argument index (-1 for status, scratch)
  std::int64_t offset = 0;         ///< byte offset into the arena (scratch)
  DType dtype;                     ///< element type
  std::vector<std::int64_t> shape; ///< sizes; -1 = pool size chosen at run time

  /// Number of 8-byte kernel parameters this descriptor flattens to.
  std::size_t flattenedCount() const { return 3 + 2 * shape.size(); }
};

/// One kernel launch.
struct Launch {
  std::string kernel;      ///< entry point name in the PTX
  std::string ptxFile;     ///< file name as written in the manifest
  std::string ptxPath;     ///< that file, resolved in the step directory
  bool ptxPresent = false; ///< the file exists (and was validated)
  /// operation: "sparse_attention" (fused retrieval), "attention" (staged
  /// rows), "fetch" or "union_missing"
  std::string op;
  float softmaxScale = 0.0f;       ///< attention ops' attribute
  int layer = 0;                   ///< layer of the pool's group it reads
  std::int64_t windowSize = 0;     ///< sliding-window tokens (0: none)
  std::array<unsigned, 3> grid{};  ///< grid dimensions
  std::array<unsigned, 3> block{}; ///< block dimensions
  unsigned dynamicSharedBytes = 0; ///< dynamic shared memory per block
  std::vector<LaunchParam> params; ///< memref descriptors, in order

  /// Whether the launch computes attention (sparse_attention, attention).
  bool isAttention() const { return op == "sparse_attention" || op == "attention"; }

  /// Total number of 8-byte kernel parameters.
  std::size_t flattenedParamCount() const;
};

/// A pool's residency spec (dhs.residency): its protected working set and
/// the hints for optional residency.
struct ResidencySpec {
  int pool = -1;                   ///< argument index of the pool
  std::int32_t newest = 0;         ///< newest tokens always resident
  std::int32_t floor = 0;          ///< guaranteed hot slots per request
  std::string policy;              ///< "adaptive" or "fixed"
  std::string replacement;         ///< "clock", "lru" or "lru2"
  std::int32_t maxPromotions = -1; ///< rows promoted per request and step (-1: all)

  bool operator==(const ResidencySpec &other) const {
    return newest == other.newest && floor == other.floor && policy == other.policy &&
           replacement == other.replacement && maxPromotions == other.maxPromotions;
  }
};

/// How strictly PTX files are required when loading.
struct ManifestLoadOptions {
  /// Every launch's PTX file must exist (needed to run on a GPU or link). When
  /// false, missing files are allowed (the CPU backend needs only shapes), but
  /// files that exist are still validated.
  bool requirePtx = true;
};

/// A parsed and validated step manifest.
struct Manifest {
  std::string path;                     ///< manifest.json path (for messages)
  std::string directory;                ///< step directory
  int version = 0;                      ///< manifest version (1)
  std::string chip;                     ///< compile target, e.g. "sm_90a"
  std::string features;                 ///< target features, e.g. "+ptx80"
  std::string step;                     ///< step name
  std::int64_t arenaBytes = 0;          ///< the staging arena scratch buffers live in
  std::vector<Argument> arguments;      ///< by index
  std::vector<Launch> launches;         ///< in launch order
  std::vector<ResidencySpec> residency; ///< the pools' specs (may be none)

  /// Whether the step computes attention (its attention arguments, each
  /// role once, are then present and checked).
  bool hasAttention() const;

  /// Loads `<stepDirectory>/manifest.json` and validates it. Throws Error.
  static Manifest load(const std::string &stepDirectory, const ManifestLoadOptions &options = {});

  /// Parses manifest JSON text; PTX file names resolve against `directory`.
  /// `sourceName` names the text in messages. Throws Error.
  static Manifest parse(const std::string &jsonText, const std::string &directory,
                        const std::string &sourceName, const ManifestLoadOptions &options = {});

  /// The argument with a role (each role appears exactly once).
  const Argument &argument(ArgumentRole role) const;

  /// Distinct PTX paths of all launches, in first-use order.
  std::vector<std::string> ptxPaths() const;
};

/// Reads a PTX file (a regular file of at most kMaxPtxBytes, BoundedFile.h)
/// and checks that it looks like PTX: non-empty, and the first thing after
/// comments and blank space is a `.version` directive. Throws Error naming
/// the file.
std::string readPtxFile(const std::string &path);

/// Checks PTX text as readPtxFile does; `name` is used in messages.
void checkPtxText(const std::string &text, const std::string &name);

/// Checks that the file at `path` is a regular file of at most kMaxPtxBytes
/// whose start looks like PTX, reading only its first 64 KiB. Throws Error
/// naming the file.
void checkPtxFile(const std::string &path);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_MANIFEST_H
