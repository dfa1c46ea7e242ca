//===- ManifestParser.cpp - The manifest, its arguments and residency -----===//

#include "runtime/core/ManifestParser.h"

#include "runtime/core/BoundedFile.h"
#include "runtime/core/Checked.h"
#include "runtime/core/RowFormat.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/core/StepPlan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

namespace dhs::runtime::manifest_detail {

namespace fs = std::filesystem;

Manifest ManifestParser::parse(const std::string &text) {
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

Manifest ManifestParser::parseRoot(const json &root) {
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

  if (!attention_)
    return manifest;
  // The launches form layers of groups (StepPlan.h), and every output is
  // some layer's.
  const StepPlan plan = planStep(manifest);
  const auto outputs = std::count_if(manifest.arguments.begin(), manifest.arguments.end(),
                                     [](const Argument &a) { return a.role == ArgumentRole::Output; });
  if (static_cast<std::size_t>(outputs) != plan.layers.size())
    fail("launches", "no launch takes the output argument of " +
                         std::to_string(outputs - static_cast<std::int64_t>(plan.layers.size())) +
                         " of the " + std::to_string(outputs) + " layers");
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

Argument ManifestParser::parseArgument(const json &value, std::size_t position) {
  std::string field = "arguments[" + std::to_string(position) + "]";
  Argument arg;
  arg.role = getEnum<ArgumentRole>(value, "role", "role", field);
  arg.isPool = arg.role == ArgumentRole::KvPool;
  // (The format compared as a string reference: comparing the json value
  // with "gqa" builds a temporary json in a noexcept operator, and a failed
  // allocation there ended the process.)
  const json *formatName = arg.isPool && value.contains("format") ? &value.at("format") : nullptr;
  if (formatName && formatName->is_string() && formatName->get_ref<const std::string &>() == "gqa")
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
    fail(field + ".kind", "role '" + std::string(abi::name(arg.role)) + "' needs kind '" +
                              expectedKind + "', not '" + kind + "'");

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
    // Every buffer's size in bytes must be computable: at most 2^40
    // elements (the largest step's arguments have about 2^27).
    std::optional<std::int64_t> elements = std::int64_t(1);
    for (std::int64_t dim : arg.shape)
      elements = elements ? tryMul(*elements, dim) : std::nullopt;
    if (!elements || *elements > (std::int64_t(1) << 40))
      fail(field + ".shape", formatShape(arg.shape) + " has more than 2^40 elements");
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

/// "arguments[i] (role)": an argument in the parser's messages.
static std::string fieldOf(const Argument &arg) {
  return "arguments[" + std::to_string(arg.index) + "] (" + abi::name(arg.role) + ")";
}

void ManifestParser::checkArgumentShapes(Manifest &manifest) const {
  // Every argument of a role has its element type and rank (Roles.def), in
  // every kind of step: the backends size their copies by them.
  for (const Argument &arg : manifest.arguments) {
    if (arg.isPool)
      continue;
    const abi::ArgumentType type = abi::argumentType(arg.role);
    if (arg.dtype != type.dtype)
      fail(fieldOf(arg) + ".dtype",
           std::string("is ") + abi::name(arg.dtype) + ", expected " + abi::name(type.dtype));
    if (static_cast<int>(arg.shape.size()) != type.rank)
      fail(fieldOf(arg) + ".shape", formatShape(arg.shape) + " has rank " +
                                        std::to_string(arg.shape.size()) + ", expected " +
                                        std::to_string(type.rank));
  }
  if (!attention_) {
    checkRoleRelations(manifest);
    return;
  }
  // An attention step: history bounds once; per layer group a pool, its
  // selections and slots; per layer queries and an output (a whole-model
  // step has several; StepPlan.h says which belong together).
  auto countOf = [&](ArgumentRole role) {
    return std::count_if(manifest.arguments.begin(), manifest.arguments.end(),
                         [&](const Argument &arg) { return arg.role == role; });
  };
  for (ArgumentRole role : kAllRoles)
    if (countOf(role) == 0)
      fail("arguments", std::string("no argument with role '") + abi::name(role) + "'");
  for (ArgumentRole role : {ArgumentRole::HistoryStart, ArgumentRole::HistoryLen,
                            ArgumentRole::WindowTokens})
    if (countOf(role) > 1)
      fail("arguments", std::string("role '") + abi::name(role) + "' appears " +
                            std::to_string(countOf(role)) + " times");
  const auto pools = countOf(ArgumentRole::KvPool);
  for (ArgumentRole role : {ArgumentRole::RowIds, ArgumentRole::Slots})
    if (countOf(role) != pools)
      fail("arguments", std::string("role '") + abi::name(role) + "' appears " +
                            std::to_string(countOf(role)) + " times for " + std::to_string(pools) +
                            " kv_pool arguments: each layer group has one pool, row_ids and "
                            "slots");
  if (countOf(ArgumentRole::Output) != countOf(ArgumentRole::Queries))
    fail("arguments", "role 'output' appears " + std::to_string(countOf(ArgumentRole::Output)) +
                          " times for " + std::to_string(countOf(ArgumentRole::Queries)) +
                          " queries: each layer has its queries and its output");
  const KvPoolInfo &pool = manifest.argument(ArgumentRole::KvPool).pool;

  // Every pool has the first one's row format and tier sizes (a step has one
  // row format).
  for (const Argument &arg : manifest.arguments) {
    if (arg.isPool) {
      const KvPoolInfo &p = arg.pool;
      if (p.format != pool.format || p.rowBytes != pool.rowBytes || p.hbmSlots != pool.hbmSlots ||
          p.hostRows != pool.hostRows || p.gqa.kvHeads != pool.gqa.kvHeads ||
          p.gqa.headDim != pool.gqa.headDim || p.gqa.element != pool.gqa.element)
        fail(fieldOf(arg), "has another row format or other tier sizes than the step's first "
                           "pool: a step's pools share them");
    }
  }

  // queries [B,Q,H,qk_dim] fixes B, Q, H; row_ids [B,Q,K] fixes K.
  const std::vector<std::int64_t> &q = manifest.argument(ArgumentRole::Queries).shape;
  const std::vector<std::int64_t> &ids = manifest.argument(ArgumentRole::RowIds).shape;
  std::int64_t B = q[0], Q = q[1], H = q[2], K = ids[2];
  auto expectShape = [&](ArgumentRole role, std::vector<std::int64_t> wanted, const char *meaning) {
    for (const Argument &arg : manifest.arguments)
      if (arg.role == role && arg.shape != wanted)
        fail(fieldOf(arg) + ".shape",
             formatShape(arg.shape) + " does not match " + meaning + " = " + formatShape(wanted));
  };
  expectShape(ArgumentRole::Queries, {B, Q, H, pool.qkDim}, "[B,Q,H,qk_dim] of the kv pool");
  expectShape(ArgumentRole::RowIds, {B, Q, K}, "[B,Q,K] of the queries");
  expectShape(ArgumentRole::Slots, {B, Q, K}, "[B,Q,K] of row_ids");
  expectShape(ArgumentRole::WriteBack, {B, Q, K}, "[B,Q,K] of row_ids");
  expectShape(ArgumentRole::HistoryStart, {B}, "[B] of the queries");
  expectShape(ArgumentRole::HistoryLen, {B}, "[B] of the queries");
  expectShape(ArgumentRole::Output, {B, Q, H, pool.vDim},
              "[B,Q,H,v_dim] of the queries and kv pool");
  // A sliding window: rings [B,R,layers,row_bytes] of one R, and their
  // token counts once.
  int rings = 0, counts = 0;
  std::int64_t ringTokens = -1;
  for (const Argument &arg : manifest.arguments) {
    if (arg.role == ArgumentRole::WindowRing) {
      ++rings;
      if (arg.shape[0] != B || arg.shape[3] != pool.rowBytes ||
          (ringTokens >= 0 && arg.shape[1] != ringTokens))
        fail(fieldOf(arg) + ".shape", formatShape(arg.shape) +
                                          " does not match [B,R,layers,row_bytes] "
                                          "of the queries and kv pool");
      ringTokens = arg.shape[1];
    }
    if (arg.role == ArgumentRole::WindowTokens) {
      ++counts;
      if (arg.shape[0] != B)
        fail(fieldOf(arg) + ".shape",
             formatShape(arg.shape) + " does not match [B] of the queries");
    }
  }
  if ((rings > 0) != (counts > 0))
    fail("arguments", "a sliding window needs window_ring and window_tokens arguments");
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

void ManifestParser::checkRoleRelations(const Manifest &manifest) const {
  using R = ArgumentRole;
  // One argument a role (a draft-ring step's rows and positions, several of
  // each, are checked when it is loaded: DraftRingStep.h).
  std::map<R, const Argument *> byRole;
  for (const Argument &arg : manifest.arguments) {
    if (arg.isPool || arg.role == R::Rows || arg.role == R::Positions)
      continue;
    if (!byRole.emplace(arg.role, &arg).second)
      fail(fieldOf(arg), std::string("a second argument of role '") + abi::name(arg.role) +
                             "': a step without attention has one of each");
  }
  auto find = [&](R role) -> const Argument * {
    auto it = byRole.find(role);
    return it == byRole.end() ? nullptr : it->second;
  };
  auto expect = [&](R role, const std::vector<std::int64_t> &wanted, const std::string &meaning) {
    const Argument *arg = find(role);
    if (arg && arg->shape != wanted)
      fail(fieldOf(*arg) + ".shape",
           formatShape(arg->shape) + " does not match " + meaning + " = " + formatShape(wanted));
  };
  // (Every role's rank is its type's, checked before: the indices below
  // exist.)
  // Selections [B,Q,K]: their slots, write-back entries, staging positions
  // and shared order have their shape; bounds and tile counts one per
  // request; a union room for every selection of a request.
  if (const Argument *ids = find(R::RowIds)) {
    const std::vector<std::int64_t> &s = ids->shape;
    for (R role : {R::Slots, R::WriteBack, R::Remap, R::SharedRows, R::SharedSlots})
      expect(role, s, "[B,Q,K] of row_ids");
    for (R role : {R::HistoryStart, R::HistoryLen, R::SharedTiles})
      expect(role, {s[0]}, "[B] of row_ids");
    if (const Argument *missing = find(R::Missing))
      if (missing->shape[0] != s[0] || missing->shape[1] < s[1] * s[2])
        fail(fieldOf(*missing) + ".shape",
             formatShape(missing->shape) + " has no room for the union of row_ids " +
                 formatShape(s) + ": [B,N] with N >= Q x K = " + std::to_string(s[1] * s[2]));
  }
  // A union of missing rows [B,N], sorted into the fetched rows; their ring
  // entries alongside; the history starts of their requests.
  const Argument *fetched = find(R::FetchedRows);
  if (const Argument *listed = fetched ? fetched : find(R::Missing)) {
    const std::string of = std::string("[B,N] of ") + abi::name(listed->role);
    for (R role : {R::Missing, R::FetchedRows, R::MissingSources, R::FetchedSources})
      expect(role, listed->shape, of);
    expect(R::HistoryStart, {listed->shape[0]}, std::string("[B] of ") + abi::name(listed->role));
  }
  // The device residency state: slot tables of one size, the control words.
  if (const Argument *hot = find(R::HotRows))
    for (R role : {R::ClockCleared, R::FreeStack})
      expect(role, hot->shape, "[slots] of hot_rows");
  expect(R::PromotionControl, {static_cast<std::int64_t>(abi::PromotionPlanLayout::kWords)},
         "the control words");
  // Appends [N, entry words].
  const Argument *appends = find(R::AgeList);
  if (appends)
    expect(R::AgeList,
           {appends->shape[0], static_cast<std::int64_t>(abi::AgeRowsLayout::kEntryWords)},
           "[N, entry words] of the appends");
  // A place list: rows, slots and sources of one length; as long as a plan
  // of the fetched rows or a replay of the appends writes it.
  if (const Argument *rows = find(R::PlaceRows)) {
    for (R role : {R::PlaceSlots, R::PlaceSources})
      expect(role, rows->shape, "[N] of place_rows");
    if (fetched)
      expect(R::PlaceRows,
             {static_cast<std::int64_t>(abi::PromotionPlanLayout::entries(
                 static_cast<std::size_t>(fetched->shape[0] * fetched->shape[1])))},
             "2 x the fetched rows [B,N] (promotions, then releases)");
    if (appends)
      expect(R::PlaceRows,
             {static_cast<std::int64_t>(
                 abi::AgeRowsLayout::entries(static_cast<std::size_t>(appends->shape[0])))},
             "2 x the appends (new rows, then releases)");
  }
  // An accept step: drafts [B, gamma], the target's probabilities
  // [B, gamma + 1, V], the drafter's [B, gamma, V], a seed, count and token
  // per request, one step counter.
  if (const Argument *drafts = find(R::DraftTokens)) {
    const std::int64_t B = drafts->shape[0], gamma = drafts->shape[1];
    for (R role : {R::Seeds, R::Accepted, R::NextToken})
      expect(role, {B}, "[B] of draft_tokens");
    if (const Argument *target = find(R::TargetProbs)) {
      const std::int64_t V = target->shape[2];
      expect(R::TargetProbs, {B, gamma + 1, V}, "[B, gamma + 1, V] of draft_tokens");
      expect(R::DraftProbs, {B, gamma, V}, "[B, gamma, V] of draft_tokens and target_probs");
    }
  }
  expect(R::StepCounter, {1}, "one counter");
}

} // namespace dhs::runtime::manifest_detail
