//===- Manifest.cpp - Parse and validate a step manifest ------------------===//

#include "runtime/core/Manifest.h"

#include "runtime/core/BoundedFile.h"
#include "runtime/core/Checked.h"
#include "runtime/core/Error.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>

namespace dhs::runtime {

namespace fs = std::filesystem;
using nlohmann::json;

std::string describeStatus(std::uint32_t status) {
  std::ostringstream out;
  out << "0x" << std::hex << status << std::dec;
  const char *separator = ": ";
  for (const abi::StatusBitInfo &bit : abi::kStatusBits) {
    if (status & bit.bit) {
      out << separator << bit.message;
      separator = ", ";
    }
  }
  if (status & ~abi::kKnownStatusBits) {
    std::ostringstream unknown;
    unknown << "unknown bits 0x" << std::hex << (status & ~abi::kKnownStatusBits);
    out << separator << unknown.str();
  }
  return out.str();
}

std::size_t Launch::flattenedParamCount() const {
  std::size_t count = 0;
  for (const LaunchParam &param : params)
    count += param.flattenedCount();
  return count;
}

bool Manifest::hasAttention() const {
  return std::any_of(launches.begin(), launches.end(),
                     [](const Launch &launch) { return launch.isAttention(); });
}

const Argument &Manifest::argument(ArgumentRole role) const {
  for (const Argument &arg : arguments)
    if (arg.role == role)
      return arg;
  // Validation guarantees every role is present; reaching this is a bug in a
  // hand-built Manifest, reported rather than crashing.
  throw Error(std::string("manifest ") + path + ": no argument with role '" + abi::name(role) +
              "'");
}

std::vector<std::string> Manifest::ptxPaths() const {
  std::vector<std::string> paths;
  for (const Launch &launch : launches) {
    bool seen = false;
    for (const std::string &known : paths)
      seen = seen || known == launch.ptxPath;
    if (!seen)
      paths.push_back(launch.ptxPath);
  }
  return paths;
}

//===----------------------------------------------------------------------===//
// PTX checks
//===----------------------------------------------------------------------===//

namespace {

/// Checks that `text` (a whole PTX file, or its first bytes when `head`)
/// starts with a .version directive after comments and blank space.
void checkPtxStart(const std::string &text, const std::string &name, bool head) {
  if (text.empty())
    throw Error("PTX file " + name + " is empty");
  // Skip blank space, `//` line comments and `/* */` block comments.
  std::size_t pos = 0;
  const std::size_t size = text.size();
  while (pos < size) {
    unsigned char c = static_cast<unsigned char>(text[pos]);
    if (std::isspace(c)) {
      ++pos;
    } else if (text.compare(pos, 2, "//") == 0) {
      std::size_t end = text.find('\n', pos);
      pos = end == std::string::npos ? size : end + 1;
    } else if (text.compare(pos, 2, "/*") == 0) {
      std::size_t end = text.find("*/", pos + 2);
      if (end == std::string::npos)
        throw Error("PTX file " + name +
                    (head ? " has no .version directive in its first " +
                                std::to_string(text.size()) + " bytes (a /* comment runs past them)"
                          : std::string(" has an unterminated /* comment")));
      pos = end + 2;
    } else {
      break;
    }
  }
  static const std::string directive = ".version";
  bool ok = text.compare(pos, directive.size(), directive) == 0 && pos + directive.size() < size &&
            std::isspace(static_cast<unsigned char>(text[pos + directive.size()]));
  if (!ok)
    throw Error("PTX file " + name +
                " is not PTX: PTX must start with a .version directive "
                "(after comments)");
}

/// The bytes of a PTX file read to check its start.
constexpr std::uint64_t kPtxHeadBytes = 64 << 10;

} // namespace

void checkPtxText(const std::string &text, const std::string &name) {
  checkPtxStart(text, name, /*head=*/false);
}

std::string readPtxFile(const std::string &path) {
  std::string text = readRegularFile(path, kMaxPtxBytes, "PTX file");
  checkPtxText(text, path);
  return text;
}

void checkPtxFile(const std::string &path) {
  std::string head = readRegularFileHead(path, kPtxHeadBytes, kMaxPtxBytes, "PTX file");
  checkPtxStart(head, path, /*head=*/head.size() == kPtxHeadBytes);
}

//===----------------------------------------------------------------------===//
// JSON helpers
//===----------------------------------------------------------------------===//

namespace {

/// Formats a shape as "[4,1,16,576]".
std::string formatShape(const std::vector<std::int64_t> &shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ",";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

/// Validation context: the manifest's name, for messages.
class Parser {
public:
  Parser(std::string sourceName, std::string directory, const ManifestLoadOptions &options)
      : source_(std::move(sourceName)), directory_(std::move(directory)), options_(options) {}

  Manifest parse(const std::string &text);
  Manifest parseRoot(const json &root);

private:
  [[noreturn]] void fail(const std::string &field, const std::string &message) const {
    throw Error("manifest " + source_ + ": " + field + ": " + message);
  }

  void requireObject(const json &value, const std::string &field) const {
    if (!value.is_object())
      fail(field, "must be a JSON object");
  }

  /// Checks that `object` has exactly the keys in `required` (plus any of
  /// `optional`), naming the first missing or unknown key.
  void checkKeys(const json &object, const std::string &field,
                 std::initializer_list<const char *> required) const {
    requireObject(object, field);
    for (const char *key : required)
      if (!object.contains(key))
        fail(field, std::string("missing key '") + key + "'");
    for (auto it = object.begin(); it != object.end(); ++it) {
      bool known = false;
      for (const char *key : required)
        known = known || it.key() == key;
      if (!known)
        fail(field, "unknown key '" + it.key() + "'");
    }
  }

  /// object[key], failing with the field's name when `object` is not an
  /// object or lacks the key (never a JSON library exception).
  const json &member(const json &object, const char *key, const std::string &field) const {
    requireObject(object, field);
    auto it = object.find(key);
    if (it == object.end())
      fail(field, std::string("missing key '") + key + "'");
    return *it;
  }

  std::string getString(const json &object, const char *key, const std::string &field) const {
    const json &value = member(object, key, field);
    if (!value.is_string())
      fail(field + "." + key, "must be a string");
    return value.get<std::string>();
  }

  std::int64_t getInt(const json &object, const char *key, const std::string &field) const {
    return asInt(member(object, key, field), field + "." + key);
  }

  std::int64_t asInt(const json &value, const std::string &field) const {
    if (value.is_number_unsigned()) {
      auto v = value.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(field, "integer out of range");
      return static_cast<std::int64_t>(v);
    }
    if (!value.is_number_integer())
      fail(field, "must be an integer");
    return value.get<std::int64_t>();
  }

  double getNumber(const json &object, const char *key, const std::string &field) const {
    const json &value = member(object, key, field);
    if (!value.is_number())
      fail(field + "." + key, "must be a number");
    return value.get<double>();
  }

  std::vector<std::int64_t> getIntArray(const json &object, const char *key,
                                        const std::string &field) const {
    const json &value = member(object, key, field);
    std::string here = field + "." + key;
    if (!value.is_array())
      fail(here, "must be an array of integers");
    std::vector<std::int64_t> result;
    for (std::size_t i = 0; i < value.size(); ++i)
      result.push_back(asInt(value[i], here + "[" + std::to_string(i) + "]"));
    return result;
  }

  DType getDType(const json &object, const std::string &field) const {
    std::string name = getString(object, "dtype", field);
    std::optional<DType> type = abi::parse<DType>(name);
    if (!type)
      fail(field + ".dtype",
           "unknown dtype '" + name + "' (known: " + abi::knownNames<DType>() + ")");
    return *type;
  }

  Argument parseArgument(const json &value, std::size_t position);
  void checkArgumentShapes(Manifest &manifest) const;
  void parseAttentionAttributes(const json &value, const std::string &field,
                                const Manifest &manifest, Launch &launch) const;
  /// The step has attention launches.
  bool attention_ = false;
  Launch parseLaunch(const json &value, std::size_t position, const Manifest &manifest);
  LaunchParam parseParam(const json &value, const std::string &field,
                         const Manifest &manifest) const;

  std::string source_;
  std::string directory_;
  ManifestLoadOptions options_;
};

/// The roles of an attention step, each present exactly once.
const ArgumentRole kAllRoles[] = {
    ArgumentRole::Queries,    ArgumentRole::RowIds, ArgumentRole::Slots, ArgumentRole::HistoryStart,
    ArgumentRole::HistoryLen, ArgumentRole::KvPool, ArgumentRole::Output};
/// True for a chip name like sm_90, sm_90a, sm_100f.
bool isChipName(const std::string &chip) {
  if (chip.size() < 5 || chip.compare(0, 3, "sm_") != 0)
    return false;
  std::size_t i = 3;
  while (i < chip.size() && std::isdigit(static_cast<unsigned char>(chip[i])))
    ++i;
  std::size_t digits = i - 3;
  if (digits < 2 || digits > 3)
    return false;
  if (i == chip.size())
    return true;
  return i + 1 == chip.size() && (chip[i] == 'a' || chip[i] == 'f');
}

/// True for a PTX identifier: [A-Za-z_$%][A-Za-z0-9_$]*.
bool isPtxIdentifier(const std::string &name) {
  if (name.empty())
    return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = std::isalpha(c) || c == '_' || c == '$' || (i == 0 ? c == '%' : std::isdigit(c) != 0);
    if (!ok)
      return false;
  }
  return true;
}

Argument Parser::parseArgument(const json &value, std::size_t position) {
  std::string field = "arguments[" + std::to_string(position) + "]";
  requireObject(value, field);
  if (!value.contains("role"))
    fail(field, "missing key 'role'");
  std::string roleText = getString(value, "role", field);
  std::optional<ArgumentRole> role = abi::parse<ArgumentRole>(roleText);
  if (!role)
    fail(field + ".role",
         "unknown role '" + roleText + "' (known: " + abi::knownNames<ArgumentRole>() + ")");

  Argument arg;
  arg.role = *role;
  arg.isPool = *role == ArgumentRole::KvPool;
  if (arg.isPool && value.contains("format") && value.at("format") == "gqa")
    checkKeys(value, field,
              {"index", "role", "kind", "format", "kv_heads", "element", "layers", "row_bytes",
               "row_elems", "qk_dim", "v_dim", "hbm_slots", "host_rows"});
  else if (arg.isPool)
    checkKeys(value, field,
              {"index", "role", "kind", "format", "layers", "row_bytes", "row_elems", "qk_dim",
               "v_dim", "hbm_slots", "host_rows"});
  else
    checkKeys(value, field, {"index", "role", "kind", "dtype", "shape"});

  std::int64_t index = getInt(value, "index", field);
  if (index != static_cast<std::int64_t>(position))
    fail(field + ".index",
         "is " + std::to_string(index) + ", expected its position " + std::to_string(position));
  arg.index = static_cast<int>(position);

  std::string kind = getString(value, "kind", field);
  std::string expectedKind = arg.isPool ? abi::kPoolKind : abi::kMemRefKind;
  if (kind != abi::kMemRefKind && kind != abi::kPoolKind)
    fail(field + ".kind", "unknown kind '" + kind + "' (known: memref, kv_pool)");
  if (kind != expectedKind)
    fail(field + ".kind",
         "role '" + roleText + "' needs kind '" + expectedKind + "', not '" + kind + "'");

  if (!arg.isPool) {
    arg.dtype = getDType(value, field);
    arg.shape = getIntArray(value, "shape", field);
    for (std::size_t i = 0; i < arg.shape.size(); ++i) {
      std::int64_t dim = arg.shape[i];
      std::string here = field + ".shape[" + std::to_string(i) + "]";
      if (dim == -1)
        fail(here, "dynamic dimensions in argument shapes are not supported");
      if (dim <= 0 || dim > std::numeric_limits<std::int32_t>::max())
        fail(here, "dimension " + std::to_string(dim) + " is out of range");
    }
    return arg;
  }

  KvPoolInfo &pool = arg.pool;
  pool.format = getString(value, "format", field);
  // MLA formats have fixed sizes; a GQA row's follow from its layout.
  RowFormatInfo sizes{};
  if (pool.format == "gqa") {
    pool.gqa.kvHeads = getInt(value, "kv_heads", field);
    try {
      pool.gqa.element = parseGqaElement(getString(value, "element", field));
    } catch (const Error &e) {
      fail(field + ".element", e.what());
    }
    pool.gqa.headDim = getInt(value, "qk_dim", field);
    if (pool.gqa.kvHeads < 1 || pool.gqa.kvHeads > 1024 || pool.gqa.headDim < 1 ||
        pool.gqa.headDim > 4096)
      fail(field, "a GQA row has 1..1024 KV heads of 1..4096 dims");
    sizes = {RowFormat::Gqa, "gqa", pool.gqa.rowBytes(), pool.gqa.headDim, pool.gqa.headDim};
  } else {
    try {
      sizes = rowFormatInfo(pool.format);
    } catch (const Error &e) {
      fail(field + ".format", e.what());
    }
  }
  const RowFormatInfo *format = &sizes;
  pool.elementType = DType::BF16;
  pool.rowBytes = getInt(value, "row_bytes", field);
  pool.rowElems = getInt(value, "row_elems", field);
  pool.layers = getInt(value, "layers", field);
  if (pool.layers < 1 || pool.layers > 64)
    fail(field + ".layers",
         "is " + std::to_string(pool.layers) + ": a layer group has 1 to 64 layers");
  pool.qkDim = getInt(value, "qk_dim", field);
  pool.vDim = getInt(value, "v_dim", field);
  pool.hbmSlots = getInt(value, "hbm_slots", field);
  pool.hostRows = getInt(value, "host_rows", field);
  // The sizes must be the format's.
  auto expect = [&](const char *key, std::int64_t actual, std::int64_t wanted) {
    if (actual != wanted)
      fail(field + "." + key, "is " + std::to_string(actual) + ", format " + pool.format + " has " +
                                  std::to_string(wanted));
  };
  expect("row_bytes", pool.rowBytes, format->rowBytes);
  expect("row_elems", pool.rowElems, format->rowBytes / 2);
  expect("qk_dim", pool.qkDim, format->qkDim);
  expect("v_dim", pool.vDim, format->vDim);
  auto checkCount = [&](const char *key, std::int64_t count) {
    if (count != -1 && (count <= 0 || count > std::numeric_limits<std::int32_t>::max()))
      fail(field + "." + key, "is " + std::to_string(count) +
                                  ": must be -1 (chosen at run time) or a "
                                  "positive row count below 2^31");
  };
  checkCount("hbm_slots", pool.hbmSlots);
  checkCount("host_rows", pool.hostRows);
  return arg;
}

void Parser::checkArgumentShapes(Manifest &manifest) const {
  // Ring arguments: positions [B] i32, rows [B, N, layers, bytes] i8.
  for (const Argument &arg : manifest.arguments) {
    std::string here = "arguments[" + std::to_string(arg.index) + "]";
    if (arg.role == ArgumentRole::Positions && (arg.dtype != DType::I32 || arg.shape.size() != 1))
      fail(here, "positions are i32 [B]");
    if (arg.role == ArgumentRole::Rows && (arg.dtype != DType::I8 || arg.shape.size() != 4))
      fail(here, "rows are i8 [B, N, layers, row bytes]");
    if (arg.role == ArgumentRole::Scores && (arg.dtype != DType::F32 || arg.shape.size() != 3))
      fail(here, "scores are f32 [B, Q, rows]");
    if (arg.role == ArgumentRole::WindowRing && (arg.dtype != DType::I8 || arg.shape.size() != 4))
      fail(here, "a window ring is i8 [B, R, layers, row bytes]");
    if (arg.role == ArgumentRole::WindowTokens &&
        (arg.dtype != DType::I32 || arg.shape.size() != 1))
      fail(here, "window token counts are i32 [B]");
    if (arg.role == ArgumentRole::PlaceRows && (arg.dtype != DType::I64 || arg.shape.size() != 1))
      fail(here, "rows to place are i64 [N]");
    if (arg.role == ArgumentRole::PlaceSlots && (arg.dtype != DType::I32 || arg.shape.size() != 1))
      fail(here, "slots to place rows in are i32 [N]");
  }
  if (!attention_)
    return;
  // An attention step: each of its roles exactly once.
  for (ArgumentRole role : kAllRoles) {
    int count = 0;
    for (const Argument &arg : manifest.arguments)
      count += arg.role == role;
    if (count == 0)
      fail("arguments", std::string("no argument with role '") + abi::name(role) + "'");
    if (count > 1)
      fail("arguments", std::string("role '") + abi::name(role) + "' appears " +
                            std::to_string(count) + " times");
  }
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;

  auto fieldOf = [](const Argument &arg) {
    return "arguments[" + std::to_string(arg.index) + "] (" + abi::name(arg.role) + ")";
  };
  auto expectDType = [&](ArgumentRole role, DType type) {
    const Argument &arg = manifest.argument(role);
    if (arg.dtype != type)
      fail(fieldOf(arg) + ".dtype",
           std::string("is ") + abi::name(arg.dtype) + ", expected " + abi::name(type));
  };
  auto expectRank = [&](ArgumentRole role, std::size_t rank) {
    const Argument &arg = manifest.argument(role);
    if (arg.shape.size() != rank)
      fail(fieldOf(arg) + ".shape", formatShape(arg.shape) + " has rank " +
                                        std::to_string(arg.shape.size()) + ", expected " +
                                        std::to_string(rank));
  };
  expectDType(ArgumentRole::Queries, DType::BF16);
  expectDType(ArgumentRole::RowIds, DType::I32);
  expectDType(ArgumentRole::Slots, DType::I32);
  expectDType(ArgumentRole::HistoryStart, DType::I64);
  expectDType(ArgumentRole::HistoryLen, DType::I32);
  expectDType(ArgumentRole::Output, DType::BF16);
  expectRank(ArgumentRole::Queries, 4);
  expectRank(ArgumentRole::RowIds, 3);
  expectRank(ArgumentRole::Slots, 3);
  expectRank(ArgumentRole::HistoryStart, 1);
  expectRank(ArgumentRole::HistoryLen, 1);
  expectRank(ArgumentRole::Output, 4);

  // queries [B,Q,H,qk_dim] fixes B, Q, H; row_ids [B,Q,K] fixes K.
  const std::vector<std::int64_t> &q = manifest.argument(ArgumentRole::Queries).shape;
  const std::vector<std::int64_t> &ids = manifest.argument(ArgumentRole::RowIds).shape;
  std::int64_t B = q[0], Q = q[1], H = q[2], K = ids[2];
  auto expectShape = [&](ArgumentRole role, std::vector<std::int64_t> wanted, const char *meaning) {
    const Argument &arg = manifest.argument(role);
    if (arg.shape != wanted)
      fail(fieldOf(arg) + ".shape",
           formatShape(arg.shape) + " does not match " + meaning + " = " + formatShape(wanted));
  };
  expectShape(ArgumentRole::Queries, {B, Q, H, pool.qkDim}, "[B,Q,H,qk_dim] of the kv pool");
  expectShape(ArgumentRole::RowIds, {B, Q, K}, "[B,Q,K] of the queries");
  expectShape(ArgumentRole::Slots, {B, Q, K}, "[B,Q,K] of row_ids");
  expectShape(ArgumentRole::HistoryStart, {B}, "[B] of the queries");
  expectShape(ArgumentRole::HistoryLen, {B}, "[B] of the queries");
  expectShape(ArgumentRole::Output, {B, Q, H, pool.vDim},
              "[B,Q,H,v_dim] of the queries and kv pool");
  // A sliding window: one ring [B,R,layers,row_bytes] and its token counts.
  int rings = 0, counts = 0;
  for (const Argument &arg : manifest.arguments) {
    if (arg.role == ArgumentRole::WindowRing) {
      ++rings;
      if (arg.shape[0] != B || arg.shape[2] != pool.layers || arg.shape[3] != pool.rowBytes)
        fail(fieldOf(arg) + ".shape", formatShape(arg.shape) +
                                          " does not match [B,R,layers,row_bytes] "
                                          "of the queries and kv pool");
    }
    if (arg.role == ArgumentRole::WindowTokens) {
      ++counts;
      if (arg.shape[0] != B)
        fail(fieldOf(arg) + ".shape",
             formatShape(arg.shape) + " does not match [B] of the queries");
    }
  }
  if (rings > 1 || counts > 1 || rings != counts)
    fail("arguments", "a sliding window needs one window_ring and one "
                      "window_tokens argument");
  // Bound the element counts so that every size product fits comfortably
  // (what the tiers and tables built from them take is checked against
  // the host's memory when the step is loaded).
  const std::int64_t limit = std::int64_t(1) << 40;
  auto elements = [](std::initializer_list<std::int64_t> dims) {
    return tryProduct(dims).value_or(std::numeric_limits<std::int64_t>::max());
  };
  if (elements({B, Q, H, pool.qkDim}) > limit || elements({B, Q, H, pool.vDim}) > limit ||
      elements({B, Q, K}) > limit)
    fail("arguments", "shapes are too large (more than 2^40 elements)");
}

LaunchParam Parser::parseParam(const json &value, const std::string &field,
                               const Manifest &manifest) const {
  requireObject(value, field);
  if (!value.contains("source"))
    fail(field, "missing key 'source'");
  std::string sourceText = getString(value, "source", field);
  LaunchParam param;
  std::optional<ParamSource> source = abi::parse<ParamSource>(sourceText);
  if (!source)
    fail(field + ".source",
         "unknown source '" + sourceText + "' (known: " + abi::knownNames<ParamSource>() + ")");
  param.source = *source;

  if (param.source == ParamSource::Scratch) {
    // A static buffer inside the staging arena.
    checkKeys(value, field, {"source", "offset", "dtype", "shape"});
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
    std::optional<std::int64_t> end = bytes ? tryAdd(param.offset, *bytes) : std::nullopt;
    if (param.offset < 0 || param.offset % 16 != 0 || !end || *end > manifest.arenaBytes)
      fail(field + ".offset", std::to_string(param.offset) + " (+" +
                                  (bytes ? std::to_string(*bytes) : std::string("2^63 or more")) +
                                  " bytes) does not lie 16-byte aligned inside the " +
                                  std::to_string(manifest.arenaBytes) + "-byte staging arena");
    return param;
  }

  if (param.source == ParamSource::Status) {
    checkKeys(value, field, {"source", "dtype", "shape"});
    param.dtype = getDType(value, field);
    param.shape = getIntArray(value, "shape", field);
    if (param.dtype != DType::I32 || param.shape != std::vector<std::int64_t>{1})
      fail(field, std::string("the status word must be i32 [1], not ") + abi::name(param.dtype) +
                      " " + formatShape(param.shape));
    return param;
  }

  checkKeys(value, field, {"source", "index", "dtype", "shape"});
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

void Parser::parseAttentionAttributes(const json &value, const std::string &field,
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

Launch Parser::parseLaunch(const json &value, std::size_t position, const Manifest &manifest) {
  std::string field = "launches[" + std::to_string(position) + "]";
  Launch launch;
  std::string op = getString(value, "op", field);
  std::optional<abi::LaunchKind> kind = abi::parse<abi::LaunchKind>(op);
  if (!kind)
    fail(field + ".op",
         "unknown op '" + op + "' (known: " + abi::knownNames<abi::LaunchKind>() + ")");
  launch.kind = *kind;
  // Attention launches carry their scale and layer, row copies their
  // direction.
  if (launch.isAttention() && value.contains("window_size"))
    checkKeys(value, field,
              {"kernel", "ptx", "op", "softmax_scale", "layer", "window_size", "grid", "block",
               "dynamic_shared_bytes", "params"});
  else if (launch.isAttention())
    checkKeys(value, field,
              {"kernel", "ptx", "op", "softmax_scale", "layer", "grid", "block",
               "dynamic_shared_bytes", "params"});
  else if (launch.kind == abi::LaunchKind::CopyRows)
    checkKeys(
        value, field,
        {"kernel", "ptx", "op", "direction", "grid", "block", "dynamic_shared_bytes", "params"});
  else
    checkKeys(value, field,
              {"kernel", "ptx", "op", "grid", "block", "dynamic_shared_bytes", "params"});
  if (launch.kind == abi::LaunchKind::CopyRows) {
    std::string direction = getString(value, "direction", field);
    launch.direction = abi::parse<abi::CopyDirection>(direction);
    if (!launch.direction)
      fail(field + ".direction", "unknown direction '" + direction +
                                     "' (known: " + abi::knownNames<abi::CopyDirection>() + ")");
  }
  launch.kernel = getString(value, "kernel", field);
  if (!isPtxIdentifier(launch.kernel))
    fail(field + ".kernel", "'" + launch.kernel + "' is not a PTX identifier");
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
    try {
      checkPtxFile(launch.ptxPath);
    } catch (const Error &error) {
      fail(field + ".ptx", error.what());
    }
  }
  return launch;
}

Manifest Parser::parse(const std::string &text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception &error) {
    // Syntax errors, and numbers that do not fit a double (out_of_range).
    throw Error("manifest " + source_ + ": invalid JSON: " + error.what());
  }
  // Every access goes through the checked helpers; a JSON library exception
  // that escapes them is still reported with the manifest's name.
  try {
    return parseRoot(root);
  } catch (const json::exception &error) {
    throw Error("manifest " + source_ + ": malformed value: " + error.what());
  }
}

Manifest Parser::parseRoot(const json &root) {
  requireObject(root, "top level");
  // Check the format and version before anything else: a different version
  // may legitimately have different keys.
  if (!root.contains("format"))
    fail("top level", "missing key 'format'");
  std::string format = getString(root, "format", "top level");
  if (format != kManifestFormat)
    fail("format", "unknown format '" + format + "' (expected '" + kManifestFormat + "')");
  if (!root.contains("version"))
    fail("top level", "missing key 'version'");
  std::int64_t version = getInt(root, "version", "top level");
  if (version != kManifestVersion)
    fail("version", "unsupported version " + std::to_string(version) +
                        " (this runtime reads version " + std::to_string(kManifestVersion) + ")");
  if (root.contains("residency"))
    checkKeys(root, "top level",
              {"format", "version", "arena_bytes", "target", "step", "arguments", "launches",
               "residency"});
  else
    checkKeys(root, "top level",
              {"format", "version", "arena_bytes", "target", "step", "arguments", "launches"});

  Manifest manifest;
  manifest.path = source_;
  manifest.directory = directory_;
  manifest.version = static_cast<int>(version);

  const json &target = member(root, "target", "top level");
  checkKeys(target, "target", {"chip", "features"});
  manifest.chip = getString(target, "chip", "target");
  if (!isChipName(manifest.chip))
    fail("target.chip", "'" + manifest.chip + "' is not a chip name like sm_90a");
  manifest.features = getString(target, "features", "target");
  manifest.step = getString(root, "step", "top level");
  manifest.arenaBytes = getInt(root, "arena_bytes", "top level");
  if (manifest.arenaBytes < 0 || manifest.arenaBytes > (std::int64_t(1) << 40))
    fail("top level.arena_bytes", std::to_string(manifest.arenaBytes) + " is outside [0, 2^40]");
  if (manifest.step.empty())
    fail("step", "must not be empty");

  const json &arguments = member(root, "arguments", "top level");
  if (!arguments.is_array() || arguments.empty())
    fail("arguments", "must be a non-empty array");
  // Whether attention launches follow decides which arguments must exist.
  if (member(root, "launches", "top level").is_array())
    for (const json &launch : member(root, "launches", "top level"))
      if (launch.is_object() && launch.contains("op") && launch.at("op").is_string()) {
        std::optional<abi::LaunchKind> kind =
            abi::parse<abi::LaunchKind>(launch.at("op").get<std::string>());
        attention_ = attention_ || (kind && abi::isAttention(*kind));
      }
  for (std::size_t i = 0; i < arguments.size(); ++i)
    manifest.arguments.push_back(parseArgument(arguments[i], i));
  checkArgumentShapes(manifest);

  const json &launches = member(root, "launches", "top level");
  if (!launches.is_array() || launches.empty())
    fail("launches", "must be a non-empty array");
  for (std::size_t i = 0; i < launches.size(); ++i)
    manifest.launches.push_back(parseLaunch(launches[i], i, manifest));

  if (root.contains("residency")) {
    const json &specs = member(root, "residency", "top level");
    if (!specs.is_array())
      fail("residency", "must be an array");
    for (std::size_t i = 0; i < specs.size(); ++i) {
      std::string field = "residency[" + std::to_string(i) + "]";
      checkKeys(specs[i], field,
                {"pool", "newest", "floor", "policy", "replacement", "max_promotions"});
      ResidencySpec spec;
      std::int64_t pool = getInt(specs[i], "pool", field);
      if (pool < 0 || pool >= static_cast<std::int64_t>(manifest.arguments.size()) ||
          !manifest.arguments[static_cast<std::size_t>(pool)].isPool)
        fail(field + ".pool", "is " + std::to_string(pool) + ", not a kv_pool argument");
      spec.pool = static_cast<int>(pool);
      auto count = [&](const char *key, std::int64_t low) {
        std::int64_t value = getInt(specs[i], key, field);
        if (value < low || value > std::numeric_limits<std::int32_t>::max())
          fail(field + "." + key,
               "is " + std::to_string(value) + ", outside [" + std::to_string(low) + ", 2^31)");
        return static_cast<std::int32_t>(value);
      };
      spec.newest = count("newest", 1);
      spec.floor = count("floor", 0);
      spec.maxPromotions = count("max_promotions", -1);
      std::string policy = getString(specs[i], "policy", field);
      std::optional<abi::ResidencyPolicy> parsedPolicy = abi::parse<abi::ResidencyPolicy>(policy);
      if (!parsedPolicy)
        fail(field + ".policy", "'" + policy + "' is not adaptive or fixed");
      spec.policy = *parsedPolicy;
      std::string replacement = getString(specs[i], "replacement", field);
      std::optional<abi::Replacement> parsedReplacement = abi::parse<abi::Replacement>(replacement);
      if (!parsedReplacement)
        fail(field + ".replacement", "'" + replacement + "' is not clock, lru or lru2");
      spec.replacement = *parsedReplacement;
      manifest.residency.push_back(spec);
    }
  }

  // Some launch of an attention step must write the output.
  if (!attention_)
    return manifest;
  int outputIndex = manifest.argument(ArgumentRole::Output).index;
  bool written = false;
  for (const Launch &launch : manifest.launches)
    for (const LaunchParam &param : launch.params)
      written =
          written || (param.source == ParamSource::Argument && param.argumentIndex == outputIndex);
  if (!written)
    fail("launches", "no launch takes the output argument");
  // The problem the step computes, checked whole now (as every step would
  // check it later): GQA heads that divide, a window ring that holds the
  // window, launches that agree.
  const ProblemShape shape = problemShapeFromManifest(manifest);
  try {
    checkProblemShape(shape);
  } catch (const Error &error) {
    fail("arguments", error.what());
  }
  return manifest;
}

} // namespace

Manifest Manifest::parse(const std::string &jsonText, const std::string &directory,
                         const std::string &sourceName, const ManifestLoadOptions &options) {
  return Parser(sourceName, directory, options).parse(jsonText);
}

Manifest Manifest::load(const std::string &stepDirectory, const ManifestLoadOptions &options) {
  std::error_code ec;
  if (!fs::is_directory(stepDirectory, ec))
    throw Error("step directory " + stepDirectory + " does not exist");
  std::string path = (fs::path(stepDirectory) / kManifestFileName).string();
  if (!fileExists(path))
    throw Error("step directory " + stepDirectory + " has no " + kManifestFileName);
  return parse(readRegularFile(path, kMaxManifestBytes, "manifest"), stepDirectory, path, options);
}

} // namespace dhs::runtime
