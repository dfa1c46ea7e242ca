//===- ManifestLaunches.cpp - A manifest's launches and parameters --------===//

#include "runtime/core/ManifestParser.h"

#include "runtime/core/BoundedFile.h"
#include "runtime/core/Checked.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

namespace dhs::runtime::manifest_detail {

namespace fs = std::filesystem;

LaunchParam ManifestParser::parseParam(const json &value, const std::string &field,
                                       const Manifest &manifest) const {
  LaunchParam param;
  param.source = getEnum<ParamSource>(value, "source", "source", field);
  const std::string sourceText = abi::name(param.source);
  // What the kernel takes it as, which must suit its source.
  param.role = getEnum<abi::ParamRole>(value, "role", "role", field);
  const std::string roleText = abi::name(param.role);
  // (A scratch buffer may stand for an argument of the step, e.g. a fetch's
  // row list; an argument parameter's role is checked against its argument
  // below, after its index.)
  const std::optional<ParamSource> view = abi::poolViewSource(param.role);
  const bool suits =
      param.source == ParamSource::Status          ? param.role == abi::ParamRole::Status
      : param.source == ParamSource::GroupBindings ? param.role == abi::ParamRole::GroupBindings
      : param.source == ParamSource::Scratch
          ? param.role != abi::ParamRole::Status && param.role != abi::ParamRole::GroupBindings &&
                !view
      : param.source == ParamSource::Argument ? abi::argumentRole(param.role).has_value()
                                              : view && *view == param.source;
  if (!suits)
    fail(field + ".role",
         "a " + roleText + " parameter cannot come from source '" + sourceText + "'");

  if (param.source == ParamSource::Scratch) {
    // A static buffer inside the staging arena.
    checkKeys(value, field, {"source", "role", "offset", "dtype", "shape"});
    param.dtype = getDType(value, field);
    param.shape = getIntArray(value, "shape", field);
    param.offset = getInt(value, "offset", field);
    std::optional<std::int64_t> bytes = static_cast<std::int64_t>(abi::bytes(param.dtype));
    for (std::int64_t dim : param.shape) {
      if (dim <= 0)
        fail(field + ".shape", formatShape(param.shape) + ": scratch buffers have static, positive "
                                                          "sizes");
      bytes = bytes ? tryMul(*bytes, dim) : std::nullopt;
    }
    // The runtime clears ready flags as 32-bit words before their fetch,
    // and copies a scratch buffer that stands for an argument (a fetch's
    // row list) by its role's element type.
    if (param.role == abi::ParamRole::ReadyFlags && param.dtype != DType::I32)
      fail(field + ".dtype", std::string("ready flags are i32, not ") + abi::name(param.dtype));
    if (std::optional<ArgumentRole> standsFor = abi::argumentRole(param.role))
      if (param.dtype != abi::argumentType(*standsFor).dtype)
        fail(field + ".dtype", std::string("a ") + roleText + " buffer is " +
                                   abi::name(abi::argumentType(*standsFor).dtype) + ", not " +
                                   abi::name(param.dtype));
    std::optional<std::int64_t> end = bytes ? tryAdd(param.offset, *bytes) : std::nullopt;
    if (param.offset < 0 || param.offset % 16 != 0 || !end || *end > manifest.arenaBytes)
      fail(field + ".offset", std::to_string(param.offset) + " (+" +
                                  (bytes ? std::to_string(*bytes) : std::string("2^63 or more")) +
                                  " bytes) does not lie 16-byte aligned inside the " +
                                  std::to_string(manifest.arenaBytes) + "-byte staging arena");
    return param;
  }

  if (param.source == ParamSource::Status) {
    checkKeys(value, field, {"source", "role", "dtype", "shape"});
    param.dtype = getDType(value, field);
    param.shape = getIntArray(value, "shape", field);
    if (param.dtype != DType::I32 || param.shape != std::vector<std::int64_t>{1})
      fail(field, std::string("the status word must be i32 [1], not ") + abi::name(param.dtype) +
                      " " + formatShape(param.shape));
    return param;
  }

  if (param.source == ParamSource::GroupBindings) {
    checkKeys(value, field, {"source", "role", "dtype", "shape"});
    param.dtype = getDType(value, field);
    param.shape = getIntArray(value, "shape", field);
    if (param.dtype != DType::I64 || param.shape != std::vector<std::int64_t>{-1, -1})
      fail(field, std::string("a grouped launch's table is i64 [-1, -1] (groups, parameters), "
                              "not ") +
                      abi::name(param.dtype) + " " + formatShape(param.shape));
    return param;
  }

  checkKeys(value, field, {"source", "role", "index", "dtype", "shape"});
  std::int64_t index = getInt(value, "index", field);
  if (index < 0 || index >= static_cast<std::int64_t>(manifest.arguments.size()))
    fail(field + ".index", "argument " + std::to_string(index) + " does not exist (the step has " +
                               std::to_string(manifest.arguments.size()) + " arguments)");
  param.argumentIndex = static_cast<int>(index);
  param.dtype = getDType(value, field);
  param.shape = getIntArray(value, "shape", field);
  const Argument &arg = manifest.arguments[static_cast<std::size_t>(index)];
  std::string argText = "argument " + std::to_string(index) + " (" + abi::name(arg.role) + ")";

  if (param.source == ParamSource::Argument) {
    if (arg.isPool)
      fail(field + ".source", argText + " is a kv_pool: pass it as pool_hbm or "
                                        "pool_host");
    if (abi::argumentRole(param.role) != arg.role)
      fail(field + ".role", std::string("a ") + roleText + " parameter cannot take " + argText);
    if (param.dtype != arg.dtype)
      fail(field + ".dtype", std::string(abi::name(param.dtype)) + " does not match " + argText +
                                 " dtype " + abi::name(arg.dtype));
    if (param.shape != arg.shape)
      fail(field + ".shape", formatShape(param.shape) + " does not match " + argText + " shape " +
                                 formatShape(arg.shape));
    return param;
  }

  // pool_hbm / pool_host: [tokens, layers, row_bytes] of i8; pool_map:
  // [host_rows] of i32.
  if (!arg.isPool)
    fail(field + ".index",
         argText + " is not a kv_pool argument (source '" + sourceText + "' needs one)");
  const KvPoolInfo &pool = arg.pool;
  if (param.source == ParamSource::PoolMap) {
    if (param.dtype != DType::I32 || param.shape.size() != 1 ||
        (param.shape[0] != -1 && param.shape[0] != pool.hostRows))
      fail(field, std::string("a residency map is i32 [host_rows], not ") + abi::name(param.dtype) +
                      " " + formatShape(param.shape));
    return param;
  }
  if (param.source == ParamSource::PoolRecency) {
    if (param.dtype != DType::I32 || param.shape.size() != 2 || param.shape[1] != 2 ||
        (param.shape[0] != -1 && param.shape[0] != pool.hbmSlots))
      fail(field, std::string("a replacement state is i32 [hbm_slots, 2], not ") +
                      abi::name(param.dtype) + " " + formatShape(param.shape));
    return param;
  }
  if (param.source == ParamSource::PoolLog) {
    if (param.dtype != DType::I32 || param.shape.size() != 1)
      fail(field, std::string("a step log is i32 [words], not ") + abi::name(param.dtype) + " " +
                      formatShape(param.shape));
    return param;
  }
  if (param.dtype != DType::I8)
    fail(field + ".dtype",
         std::string(abi::name(param.dtype)) + ": pool tiers are passed as bytes (i8)");
  if (param.source == ParamSource::PoolWriteBack) {
    // The runtime sizes the ring: [-1, layers, row_bytes].
    if (param.shape.size() != 3 || param.shape[0] != -1 || param.shape[1] != pool.layers ||
        param.shape[2] != pool.rowBytes)
      fail(field + ".shape",
           formatShape(param.shape) + " is not a write-back ring of the pool: [-1," +
               std::to_string(pool.layers) + "," + std::to_string(pool.rowBytes) + "]");
    return param;
  }
  std::int64_t fixed = param.source == ParamSource::PoolHbm ? pool.hbmSlots : pool.hostRows;
  const char *countKey = param.source == ParamSource::PoolHbm ? "hbm_slots" : "host_rows";
  bool ok = param.shape.size() == 3 && param.shape[1] == pool.layers &&
            param.shape[2] == pool.rowBytes &&
            (param.shape[0] == -1 || (fixed != -1 && param.shape[0] == fixed));
  if (!ok)
    fail(field + ".shape", formatShape(param.shape) + " does not match the pool's [" +
                               (fixed == -1 ? std::string("-1") : std::to_string(fixed)) + "," +
                               std::to_string(pool.layers) + "," + std::to_string(pool.rowBytes) +
                               "] (" + countKey + " " + std::to_string(fixed) + ", layers " +
                               std::to_string(pool.layers) + ", row_bytes " +
                               std::to_string(pool.rowBytes) + ")");
  return param;
}

void ManifestParser::parseAttentionAttributes(const json &value, const std::string &field,
                                              const Manifest &manifest, Launch &launch) const {
  double scale = getNumber(value, "softmax_scale", field);
  if (!std::isfinite(scale) || scale <= 0.0 || scale > std::numeric_limits<float>::max())
    fail(field + ".softmax_scale", "must be a positive finite f32");
  launch.softmaxScale = static_cast<float>(scale);
  std::int64_t layer = getInt(value, "layer", field);
  std::int64_t layers = manifest.argument(ArgumentRole::KvPool).pool.layers;
  if (layer < 0 || layer >= layers)
    fail(field + ".layer", "is " + std::to_string(layer) + ": the pool's group has layers 0.." +
                               std::to_string(layers - 1));
  launch.layer = static_cast<int>(layer);
  if (value.contains("window_size")) {
    std::int64_t size = getInt(value, "window_size", field);
    if (size <= 0 || size > std::numeric_limits<std::int32_t>::max())
      fail(field + ".window_size",
           "is " + std::to_string(size) + ": must be a positive token count");
    launch.windowSize = size;
  }
}

Launch ManifestParser::parseLaunch(const json &value, std::size_t position,
                                   const Manifest &manifest) {
  std::string field = "launches[" + std::to_string(position) + "]";
  Launch launch;
  launch.kind = getEnum<abi::LaunchKind>(value, "op", "op", field);
  // Attention launches carry their scale and layer, row copies their
  // direction.
  if (launch.isAttention() && value.contains("window_size"))
    checkKeys(value, field,
              {"kernel", "ptx", "op", "softmax_scale", "layer", "window_size", "grid", "block",
               "dynamic_shared_bytes", "params"},
              {"resident_kernel", "dependent_launch", "missing_above", "missing_up_to"});
  else if (launch.isAttention())
    checkKeys(value, field,
              {"kernel", "ptx", "op", "softmax_scale", "layer", "grid", "block",
               "dynamic_shared_bytes", "params"},
              {"unshared_requests", "resident_kernel", "dependent_launch", "missing_above",
               "missing_up_to"});
  else if (launch.kind == abi::LaunchKind::CopyRows)
    checkKeys(
        value, field,
        {"kernel", "ptx", "op", "direction", "grid", "block", "dynamic_shared_bytes", "params"});
  else if (launch.kind == abi::LaunchKind::ShareRows)
    checkKeys(value, field,
              {"kernel", "ptx", "op", "tile", "grid", "block", "dynamic_shared_bytes", "params"},
              {"min_missing"});
  else
    checkKeys(value, field,
              {"kernel", "ptx", "op", "grid", "block", "dynamic_shared_bytes", "params"},
              {"dependent_launch", "missing_above", "missing_up_to"});
  if (launch.kind == abi::LaunchKind::CopyRows) {
    launch.direction = getEnum<abi::CopyDirection>(value, "direction", "direction", field);
  }
  if (value.contains("dependent_launch"))
    launch.dependentLaunch = getBool(value, "dependent_launch", field);
  if (value.contains("unshared_requests"))
    launch.unsharedRequests = getBool(value, "unshared_requests", field);
  if (launch.kind == abi::LaunchKind::ShareRows) {
    launch.tile = getInt(value, "tile", field);
    if (launch.tile <= 0)
      fail(field + ".tile", "is " + std::to_string(launch.tile) + ": must be a positive row count");
    if (value.contains("min_missing")) {
      launch.minMissing = getInt(value, "min_missing", field);
      if (launch.minMissing < 0)
        fail(field + ".min_missing",
             "is " + std::to_string(launch.minMissing) + ": must be a row count (>= 0)");
    }
  }
  // A form's band: lines strictly inside (0, 1), the lower below the upper.
  auto line = [&](const char *key) {
    const double share = getNumber(value, key, field);
    if (!(share > 0.0 && share < 1.0))
      fail(field + "." + key,
           "is " + std::to_string(share) + ": must be a share of rows strictly between 0 and 1");
    return share;
  };
  if (value.contains("missing_above"))
    launch.missingAbove = line("missing_above");
  if (value.contains("missing_up_to"))
    launch.missingUpTo = line("missing_up_to");
  if (launch.missingAbove >= launch.missingUpTo)
    fail(field + ".missing_up_to", "is " + std::to_string(launch.missingUpTo) +
                                       ": must be above missing_above (" +
                                       std::to_string(launch.missingAbove) + ")");
  launch.kernel = getString(value, "kernel", field);
  if (!isPtxIdentifier(launch.kernel))
    fail(field + ".kernel", "'" + launch.kernel + "' is not a PTX identifier");
  if (value.contains("resident_kernel")) {
    launch.residentKernel = getString(value, "resident_kernel", field);
    if (!isPtxIdentifier(launch.residentKernel))
      fail(field + ".resident_kernel", "'" + launch.residentKernel + "' is not a PTX identifier");
    if (launch.residentKernel == launch.kernel)
      fail(field + ".resident_kernel", "names the launch's own kernel");
  }
  if (launch.isAttention())
    parseAttentionAttributes(value, field, manifest, launch);

  // Grid and block: three positive dimensions within CUDA's limits.
  std::vector<std::int64_t> grid = getIntArray(value, "grid", field);
  std::vector<std::int64_t> block = getIntArray(value, "block", field);
  const std::int64_t gridMax[3] = {2147483647, 65535, 65535};
  const std::int64_t blockMax[3] = {1024, 1024, 64};
  if (grid.size() != 3)
    fail(field + ".grid", "must have 3 dimensions");
  if (block.size() != 3)
    fail(field + ".block", "must have 3 dimensions");
  for (int i = 0; i < 3; ++i) {
    if (grid[i] < 1 || grid[i] > gridMax[i])
      fail(field + ".grid[" + std::to_string(i) + "]",
           std::to_string(grid[i]) + " is outside [1, " + std::to_string(gridMax[i]) + "]");
    if (block[i] < 1 || block[i] > blockMax[i])
      fail(field + ".block[" + std::to_string(i) + "]",
           std::to_string(block[i]) + " is outside [1, " + std::to_string(blockMax[i]) + "]");
    launch.grid[i] = static_cast<unsigned>(grid[i]);
    launch.block[i] = static_cast<unsigned>(block[i]);
  }
  if (block[0] * block[1] * block[2] > 1024)
    fail(field + ".block", "more than 1024 threads per block");

  std::int64_t shared = getInt(value, "dynamic_shared_bytes", field);
  // 227 KiB is the most any current GPU grants one block.
  if (shared < 0 || shared > 232448)
    fail(field + ".dynamic_shared_bytes", std::to_string(shared) + " is outside [0, 232448]");
  launch.dynamicSharedBytes = static_cast<unsigned>(shared);

  const json &params = member(value, "params", field);
  if (!params.is_array() || params.empty())
    fail(field + ".params", "must be a non-empty array");
  for (std::size_t i = 0; i < params.size(); ++i)
    launch.params.push_back(
        parseParam(params[i], field + ".params[" + std::to_string(i) + "]", manifest));
  // A grouped launch's groups go along the grid's z; its table comes last.
  for (std::size_t i = 0; i < launch.params.size(); ++i)
    if (launch.params[i].source == ParamSource::GroupBindings &&
        (i + 1 != launch.params.size() || launch.grid[2] != 1))
      fail(field + ".params[" + std::to_string(i) + "]",
           "a grouped launch's table is its last parameter, and its grid's z is 1 (" +
               std::to_string(launch.grid[2]) + ")");
  // The classic kernel parameter space is 4 KiB.
  if (launch.flattenedParamCount() * 8 > 4096)
    fail(field + ".params", "the flattened descriptors take " +
                                std::to_string(launch.flattenedParamCount() * 8) +
                                " bytes, more than the 4096-byte kernel "
                                "parameter space");

  // The PTX file: a plain relative name inside the step directory.
  launch.ptxFile = getString(value, "ptx", field);
  fs::path ptx(launch.ptxFile);
  bool escapes = launch.ptxFile.empty() || ptx.is_absolute();
  for (const fs::path &part : ptx)
    escapes = escapes || part == "..";
  if (escapes)
    fail(field + ".ptx", "'" + launch.ptxFile +
                             "' must be a relative path inside the step "
                             "directory");
  launch.ptxPath = (fs::path(directory_) / ptx).string();
  launch.ptxPresent = fileExists(launch.ptxPath);
  if (!launch.ptxPresent) {
    if (options_.requirePtx)
      fail(field + ".ptx", "PTX file " + launch.ptxPath + " does not exist");
  } else {
    // Its start only (the CPU backend never reads the rest; CUDA reads it
    // whole, within the same size limit, to link it).
    std::vector<std::string> compiledFor;
    try {
      compiledFor = checkPtxFile(launch.ptxPath);
    } catch (const Error &error) {
      fail(field + ".ptx", error.what());
    }
    // PTX from dhs-compile says which launches its kernels were compiled
    // for: the kernels index by those sizes, whatever the manifest says.
    if (!compiledFor.empty()) {
      json params = json::array();
      for (const json &param : value.at("params")) {
        json copy = param;
        copy.erase("index");
        copy.erase("offset");
        params.push_back(std::move(copy));
      }
      const json described = {{"kernel", value.at("kernel")},
                              {"grid", value.at("grid")},
                              {"block", value.at("block")},
                              {"dynamic_shared_bytes", value.at("dynamic_shared_bytes")},
                              {"params", std::move(params)}};
      const bool compiled =
          std::any_of(compiledFor.begin(), compiledFor.end(), [&](const std::string &text) {
            const json other = json::parse(text, nullptr, /*allow_exceptions=*/false);
            return !other.is_discarded() && other == described;
          });
      if (!compiled)
        fail(field, "is not a launch its PTX file " + launch.ptxPath +
                        " was compiled for (kernel, grid, block, shared memory and parameters "
                        "as its '" +
                        abi::kPtxLaunchMarker +
                        "' lines say): compile the step "
                        "again rather than edit its manifest");
    }
  }
  return launch;
}

} // namespace dhs::runtime::manifest_detail
