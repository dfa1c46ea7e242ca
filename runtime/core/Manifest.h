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

#include "runtime/abi/Contract.h"
#include "runtime/core/RowFormat.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <string>
#include <vector>

namespace dhs::runtime {

// The contract's names (runtime/abi/Contract.h): the manifest's format and
// version, element types, roles, parameter sources, the step log and the
// status bits.
using abi::ArgumentRole;
using abi::DType;
using abi::kManifestFileName;
using abi::kManifestFormat;
using abi::kManifestVersion;
using abi::ParamSource;
using abi::StepLogLayout;

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

  /// Bytes of a memref argument's buffer: its elements (at most 2^40, the
  /// parser checked) times its dtype's size.
  std::size_t bytes() const;
};

/// One kernel parameter (a memref descriptor).
struct LaunchParam {
  ParamSource source;              ///< where its memory comes from
  abi::ParamRole role;             ///< what the kernel takes it as
  int argumentIndex = -1;          ///< argument index (-1 for status, scratch)
  std::int64_t offset = 0;         ///< byte offset into the arena (scratch)
  DType dtype;                     ///< element type
  std::vector<std::int64_t> shape; ///< sizes; -1 = pool size chosen at run time

  /// Number of 8-byte kernel parameters this descriptor flattens to.
  std::size_t flattenedCount() const { return 3 + 2 * shape.size(); }
  /// Number of elements of a static shape (a scratch buffer's, bounded by
  /// the arena; an argument's, bounded by the parser).
  std::size_t elements() const {
    std::size_t count = 1;
    for (std::int64_t dim : shape)
      count *= static_cast<std::size_t>(dim);
    return count;
  }
};

/// One kernel launch.
struct Launch {
  std::string kernel;      ///< entry point name in the PTX
  /// The launch's resident form, another entry point of the same PTX
  /// ("resident_kernel", attention only; empty: none): faster when the rows
  /// it reads are in HBM, slower when they come from the host. A backend
  /// launches one of the two each step, either computing the same bits.
  std::string residentKernel;
  std::string ptxFile;     ///< file name as written in the manifest
  std::string ptxPath;     ///< that file, resolved in the step directory
  bool ptxPresent = false; ///< the file exists (and was validated)
  /// The dhs op it was generated from ("op"), read once at load.
  abi::LaunchKind kind = abi::LaunchKind::SparseAttention;
  /// How a copy_rows launch moves rows ("direction"; copy_rows only).
  std::optional<abi::CopyDirection> direction;
  float softmaxScale = 0.0f;       ///< attention ops' attribute
  int layer = 0;                   ///< layer of the pool's group it reads
  std::int64_t windowSize = 0;     ///< sliding-window tokens (0: none)
  std::int64_t tile = 0;           ///< rows of a shared tile ("tile"; share_rows only)
  /// An attention launch of the requests whose shared prefix is not shared
  /// (tile count 0), before its clustered twin, which takes the others
  /// ("unshared_requests"; a dhs-share-tiles step's attention).
  bool unsharedRequests = false;
  /// The launch may start while the launch before it still runs (a
  /// programmatic dependent launch on CUDA): its kernel waits for that
  /// launch itself ("dependent_launch", optional).
  bool dependentLaunch = false;
  /// Prefix rows missing from HBM a share_rows launch shares from
  /// ("min_missing", optional; 0: always).
  std::int64_t minMissing = 0;
  /// The band of the share of its layer group's selected rows missing from
  /// HBM in which the launch runs: above `missingAbove` and at most
  /// `missingUpTo` ("missing_above", "missing_up_to", optional: -1 and 1,
  /// every step). A layer group's forms are launches of complementary
  /// bands; a backend runs the one form a step's share takes (LaunchForms.h).
  double missingAbove = -1.0;
  double missingUpTo = 1.0;
  std::array<unsigned, 3> grid{};  ///< grid dimensions
  std::array<unsigned, 3> block{}; ///< block dimensions
  unsigned dynamicSharedBytes = 0; ///< dynamic shared memory per block
  std::vector<LaunchParam> params; ///< memref descriptors, in order

  /// Whether the launch computes attention (sparse_attention, attention).
  bool isAttention() const { return abi::isAttention(kind); }
  /// Whether one launch may run several layer groups (its last parameter
  /// is a group_bindings table; a CTA per group along the grid's z).
  bool isGrouped() const {
    return !params.empty() && params.back().source == ParamSource::GroupBindings;
  }

  /// Total number of 8-byte kernel parameters.
  std::size_t flattenedParamCount() const;
};

/// A pool's residency spec (dhs.residency): its protected working set and
/// the hints for optional residency.
struct ResidencySpec {
  int pool = -1;           ///< argument index of the pool
  std::int32_t newest = 0; ///< newest tokens always resident
  std::int32_t floor = 0;  ///< guaranteed hot slots per request
  abi::ResidencyPolicy policy = abi::ResidencyPolicy::Adaptive; ///< spare-memory policy
  abi::Replacement replacement = abi::Replacement::Clock;       ///< victim choice
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

  /// Throws Error unless the step's arguments have exactly `roles`, one
  /// each (`what` names the step, e.g. "the placement step"): a backend that
  /// passes those only would give a kernel no address for another.
  void requireArgumentRoles(const std::string &what,
                            std::initializer_list<ArgumentRole> roles) const;

  /// Distinct PTX paths of all launches, in first-use order.
  std::vector<std::string> ptxPaths() const;
};

/// True for a chip name like sm_90, sm_90a, sm_100f: "sm_", two or three
/// digits, then optionally 'a' or 'f'. A manifest's target chip is one, and
/// so is every architecture nvJitLink is asked to link for ("-arch=").
bool isChipName(const std::string &chip);

/// Reads a PTX file (a regular file of at most kMaxPtxBytes, BoundedFile.h)
/// and checks that it looks like PTX: non-empty, and the first thing after
/// comments and blank space is a `.version` directive. Throws Error naming
/// the file.
std::string readPtxFile(const std::string &path);

/// Checks PTX text as readPtxFile does; `name` is used in messages.
void checkPtxText(const std::string &text, const std::string &name);

/// The byte sizes of the parameters that the `.entry` of kernel `kernel`
/// declares in PTX `text`, in order (`.param .u64 name` is 8 bytes, `.param
/// .align A .b8 name[N]` N), or nullopt where `text` declares no such entry
/// or a parameter of no size it can read.
std::optional<std::vector<std::size_t>> ptxEntryParamSizes(const std::string &text,
                                                           const std::string &kernel);

/// Checks that the file at `path` is a regular file of at most kMaxPtxBytes
/// whose start looks like PTX, reading only its first 64 KiB, and returns the
/// launches its leading comments describe (abi::kPtxLaunchMarker lines, the
/// JSON after the marker; none in PTX that dhs-compile did not write).
/// Throws Error naming the file.
std::vector<std::string> checkPtxFile(const std::string &path);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_MANIFEST_H
