//===- SharedPrefixTest.cpp - Bad shared prefixes reported (BadSharedRows) -===//
//
// dhs.sparse_attention with `shared(%tiles)`: the first 64 x tiles[b] row
// ids of every query position of request b are the same, and the
// tensor-core kernel ("sharing" mode, a cluster of the Q position CTAs)
// gathers those rows once. Given a count above K / 64 (or a negative one) or
// a position whose prefix differs, the kernel sets BadSharedRows in the
// status word and the CPU backend (CpuLaunches) throws InputError with its
// message. The step (test/unit/steps/shared_prefix_step.mlir: B = 2, Q = 5,
// H = 64, K = 256, FP8 MLA rows) reads the counts from a scratch buffer of
// the staging arena that nothing in the step writes (as an argument they
// would be refused when the manifest is loaded); the test writes the arena
// itself and runs the manifest's launch directly:
//
//   - the compiled step: two sparse_attention launches, the counts in the
//     arena: each position alone where fewer than half of the requests
//     have a count, else a cluster of 5 CTAs per request;
//   - on the CPU: valid counts run, and match the fp64 reference; bad counts
//     and a differing prefix throw BadSharedRows's message;
//   - on a GPU (skipped without one): valid counts give status 0 and the CPU
//     backend's output, and the output without sharing (the unclustered
//     kernel) to the bit, whichever kernel computes the step; bad counts and a
//     differing prefix set BadSharedRows; a difference past the shared tiles
//     is not reported.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/core/RowFormat.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cpu/CpuLaunches.h"
#include "runtime/testing/ProblemGenerator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

using namespace dhs::runtime;

namespace {

constexpr std::int64_t kRequests = 2, kPositions = 5, kHeads = 64, kSelected = 256;
constexpr std::int64_t kHbmSlots = 1024, kHistory = 1000;
constexpr std::int64_t kSharedRows = 128; // two tiles of 64
constexpr const char *kStep = "shared_prefix";

/// The step's inputs: random queries and FP8 rows (ProblemGenerator), and
/// selections whose first 128 entries are the same 128 distinct rows in every
/// position of a request, then 128 rows of the position's own (distinct
/// within the list, some -1), about half of the distinct rows resident.
SparseAttentionProblem sharedProblem(const Manifest &manifest, std::uint64_t seed) {
  ProblemShape shape = dhs::test::smallShape(kRequests, kPositions, kHeads, kSelected);
  const RowFormatInfo &fp8 = rowFormatInfo(RowFormat::MlaFp8);
  shape.format = RowFormat::MlaFp8;
  shape.rowBytes = fp8.rowBytes;
  shape.qkDim = fp8.qkDim;
  shape.vDim = fp8.vDim;
  shape.layers = 1;
  shape.rowElems = fp8.rowBytes / 2;
  shape.hbmSlots = kHbmSlots;
  shape.softmaxScale = manifest.launches.at(0).softmaxScale;
  GeneratorOptions options;
  options.seed = seed;
  options.historyRows = kHistory;
  SparseAttentionProblem p = generateProblem(shape, options);
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kHistory));
  std::iota(ids.begin(), ids.end(), 0);
  for (std::int64_t b = 0; b < kRequests; ++b) {
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<std::int32_t> others(ids.begin() + kSharedRows, ids.end());
    for (std::int64_t q = 0; q < kPositions; ++q) {
      std::shuffle(others.begin(), others.end(), rng);
      for (std::int64_t k = 0; k < kSelected; ++k) {
        std::int32_t row = k < kSharedRows ? ids[static_cast<std::size_t>(k)]
                                           : others[static_cast<std::size_t>(k - kSharedRows)];
        if (k >= kSharedRows && rng() % 16 == 0)
          row = -1;
        p.rowIds[p.selectionIndex(b, q, k)] = row;
      }
    }
  }
  applyResidency(p, 0.5, seed + 1);
  p.validate();
  const ProblemStats stats = p.stats();
  REQUIRE(stats.residentReads > 0);
  REQUIRE(stats.hostReads > 0);
  REQUIRE(stats.unusedSelections > 0);
  return p;
}

/// `p` with every position's selections (rows and slots) its request's
/// position 0's, where each -1 is made a row of the history that the list
/// does not hold (read from the host store): all four tiles may be shared
/// (as dhs.share_rows would share them: rows >= 0, each once).
SparseAttentionProblem sameLists(SparseAttentionProblem p) {
  for (std::int64_t b = 0; b < kRequests; ++b) {
    std::set<std::int32_t> listed;
    for (std::int64_t k = 0; k < kSelected; ++k)
      listed.insert(p.rowIds[p.selectionIndex(b, 0, k)]);
    std::int32_t next = 0;
    for (std::int64_t k = 0; k < kSelected; ++k) {
      const std::size_t at = p.selectionIndex(b, 0, k);
      if (p.rowIds[at] != -1)
        continue;
      while (listed.count(next))
        ++next;
      p.rowIds[at] = next++;
      p.slots[at] = -1;
    }
    for (std::int64_t q = 1; q < kPositions; ++q)
      for (std::int64_t k = 0; k < kSelected; ++k) {
        p.rowIds[p.selectionIndex(b, q, k)] = p.rowIds[p.selectionIndex(b, 0, k)];
        p.slots[p.selectionIndex(b, q, k)] = p.slots[p.selectionIndex(b, 0, k)];
      }
  }
  p.validate();
  return p;
}

/// The position and selection whose row id differsAt() changes: position 3
/// of request 1, in its second shared tile.
constexpr std::int64_t kBadRequest = 1, kBadPosition = 3, kBadSelection = 100;

/// `p`'s row ids with one of kBadPosition's first 128 (kBadSelection) made a
/// row of the request's history that its list does not hold; its slot is
/// set to -1 (the host store).
std::vector<std::int32_t> differsAt(SparseAttentionProblem &p) {
  std::set<std::int32_t> listed;
  for (std::int64_t k = 0; k < kSelected; ++k)
    listed.insert(p.rowIds[p.selectionIndex(kBadRequest, kBadPosition, k)]);
  std::int32_t other = 0;
  while (listed.count(other))
    ++other;
  REQUIRE(other < p.historyLen[kBadRequest]);
  const std::size_t at = p.selectionIndex(kBadRequest, kBadPosition, kBadSelection);
  REQUIRE(p.rowIds[at] == p.rowIds[p.selectionIndex(kBadRequest, 0, kBadSelection)]);
  p.rowIds[at] = other;
  p.slots[at] = -1;
  p.validate();
  return p.rowIds;
}

template <typename T> std::uint8_t *bytesOf(std::vector<T> &values) {
  return reinterpret_cast<std::uint8_t *>(values.data());
}

/// The attention launches' tile counts: a scratch buffer of the arena.
const LaunchParam &tilesParam(const Manifest &manifest) {
  for (const LaunchParam &param : manifest.launches.at(1).params)
    if (param.role == abi::ParamRole::SharedTiles) {
      REQUIRE(param.source == ParamSource::Scratch);
      REQUIRE(param.shape == std::vector<std::int64_t>{kRequests});
      REQUIRE(param.offset + 4 * kRequests <= manifest.arenaBytes);
      return param;
    }
  FAIL("the shared-prefix step's launch takes no shared_tiles");
  throw std::logic_error("unreachable");
}

/// The step's launches on the CPU backend over `p`'s inputs with shared tile
/// counts `tiles`: the output (what the launch throws goes through).
std::vector<bf16_t> runCpu(const Manifest &manifest, const SparseAttentionProblem &p,
                           const std::vector<std::int32_t> &tiles) {
  SparseAttentionProblem in = p;
  std::vector<bf16_t> output(static_cast<std::size_t>(p.shape.outputCount()), kBf16Poison);
  std::vector<std::uint8_t> arena(static_cast<std::size_t>(manifest.arenaBytes), 0);
  std::memcpy(arena.data() + tilesParam(manifest).offset, tiles.data(), 4 * tiles.size());
  CpuStepMemory memory;
  memory.arena = arena.data();
  memory.arguments.assign(manifest.arguments.size(), nullptr);
  memory.pools.resize(manifest.arguments.size());
  for (const Argument &argument : manifest.arguments) {
    const auto index = static_cast<std::size_t>(argument.index);
    std::uint8_t *&at = memory.arguments.at(index);
    switch (argument.role) {
    case ArgumentRole::Queries:
      at = bytesOf(in.queries);
      break;
    case ArgumentRole::RowIds:
      at = bytesOf(in.rowIds);
      break;
    case ArgumentRole::Slots:
      at = bytesOf(in.slots);
      break;
    case ArgumentRole::HistoryStart:
      at = bytesOf(in.historyStart);
      break;
    case ArgumentRole::HistoryLen:
      at = bytesOf(in.historyLen);
      break;
    case ArgumentRole::Output:
      at = bytesOf(output);
      break;
    case ArgumentRole::KvPool:
      memory.pools.at(index) = {bytesOf(in.hbmPool), bytesOf(in.hostStore), in.shape.hbmSlots,
                                in.shape.hostRows, in.shape.rowBytes};
      break;
    default:
      FAIL("an argument " << abi::name(argument.role) << " in the shared-prefix step");
    }
  }
  CpuLaunches(2).run(manifest, 0, manifest.launches.size(), memory);
  CHECK(memory.status == 0);
  return output;
}

/// The compiled step, checked: two sparse_attention launches taking the
/// tile counts from the arena, the unclustered one (steps where fewer than
/// half of the requests have a count) first; nothing after saying that the
/// test is skipped.
std::optional<Manifest> sharedStepOrSkip() {
  std::optional<Manifest> manifest = dhs::test::compiledStepOrSkip(kStep);
  if (!manifest)
    return manifest;
  REQUIRE(manifest->launches.size() == 2);
  REQUIRE(manifest->launches[0].kind == abi::LaunchKind::SparseAttention);
  REQUIRE(manifest->launches[1].kind == abi::LaunchKind::SparseAttention);
  REQUIRE(manifest->launches[0].unsharedRequests);
  REQUIRE_FALSE(manifest->launches[1].unsharedRequests);
  const LaunchParam &tiles = tilesParam(*manifest);
  const auto sameTiles = [&](const LaunchParam &param) {
    return param.role == abi::ParamRole::SharedTiles && param.offset == tiles.offset;
  };
  REQUIRE(std::any_of(manifest->launches[0].params.begin(), manifest->launches[0].params.end(),
                      sameTiles));
  return manifest;
}

/// The text of a launch's PTX file.
std::string ptxOf(const Launch &launch) {
  std::ifstream file(launch.ptxPath);
  REQUIRE(file);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

/// The message of InputErrors for a bad shared prefix.
const std::string &badSharedRows() {
  static const std::string message = describeStatus(abi::kStatusBadSharedRows);
  return message;
}

} // namespace

TEST_CASE("the shared-prefix step runs the five positions of a request as a cluster", "[share]") {
  const std::optional<Manifest> manifest = sharedStepOrSkip();
  if (!manifest)
    return;
  // A CTA per (request, position) in both: the tensor-core kernel, not split
  // over K; the requests that share in clusters of their five positions,
  // the others alone.
  for (const Launch &launch : manifest->launches) {
    INFO(launch.kernel);
    CHECK(launch.grid ==
          std::array<unsigned, 3>{static_cast<unsigned>(kRequests * kPositions), 1, 1});
    CHECK(launch.block[0] == 384);
    CHECK((ptxOf(launch).find(".reqnctapercluster 5, 1, 1") != std::string::npos) ==
          !launch.unsharedRequests);
  }
  CHECK(manifest->argument(ArgumentRole::KvPool).pool.rowBytes == 656);
}

TEST_CASE("the CPU backend checks a shared prefix as the kernel does", "[share]") {
  const std::optional<Manifest> manifest = sharedStepOrSkip();
  if (!manifest)
    return;
  DHS_SEEDED_RNG(rng, 3200);
  SparseAttentionProblem p = sharedProblem(*manifest, rng());
  const std::vector<double> reference = CpuAttention(CpuPrecision::Double, 2).runUnrounded(p);

  SECTION("(a) a valid prefix: the output, the same as without sharing") {
    const std::vector<bf16_t> shared = runCpu(*manifest, p, {2, 1});
    const Comparison c = compareOutputs(shared, reference);
    CHECK(c.nonFinite == 0);
    CHECK(c.referenceNorm > 1.0);
    CHECK(c.relativeError < 1e-2);
    CHECK(countBitDifferences(runCpu(*manifest, p, {0, 0}), shared) == 0);
    // All 256 entries shared (4 tiles) is within K / 64 but the private rows
    // differ.
    CHECK_THROWS_WITH(runCpu(*manifest, p, {0, 4}),
                      Catch::Contains(badSharedRows()) && Catch::Contains("request 1, position 1"));
  }
  SECTION("(b) more tiles than K / 64, or fewer than 0") {
    CHECK_THROWS_AS(runCpu(*manifest, p, {5, 0}), InputError);
    CHECK_THROWS_WITH(runCpu(*manifest, p, {5, 0}),
                      Catch::Contains(badSharedRows()) &&
                          Catch::Contains("request 0 shares 5 tiles of 64 of its 256"));
    CHECK_THROWS_WITH(runCpu(*manifest, p, {0, -1}),
                      Catch::Contains(badSharedRows()) && Catch::Contains("request 1 shares -1"));
    // The same where every position's lists are the same: the count alone.
    const SparseAttentionProblem same = sameLists(p);
    const Comparison all = compareOutputs(runCpu(*manifest, same, {4, 4}),
                                          CpuAttention(CpuPrecision::Double, 2).runUnrounded(same));
    CHECK(all.nonFinite == 0);
    CHECK(all.relativeError < 1e-2);
    CHECK_THROWS_WITH(runCpu(*manifest, same, {4, 5}),
                      Catch::Contains(badSharedRows()) && Catch::Contains("request 1 shares 5"));
  }
  SECTION("(c) a position whose prefix differs") {
    differsAt(p);
    CHECK_THROWS_AS(runCpu(*manifest, p, {2, 2}), InputError);
    CHECK_THROWS_WITH(runCpu(*manifest, p, {2, 2}),
                      Catch::Contains(badSharedRows()) &&
                          Catch::Contains("request 1, position 3, selection 100 differs"));
    // Past request 1's one shared tile the lists may differ.
    const Comparison past = compareOutputs(runCpu(*manifest, p, {2, 1}),
                                           CpuAttention(CpuPrecision::Double, 2).runUnrounded(p));
    CHECK(past.nonFinite == 0);
    CHECK(past.relativeError < 1e-2);
  }
}

namespace {

/// The step loaded on device 0 with `p`'s inputs uploaded; runs it with
/// given tile counts and row ids.
class GpuSharedStep {
public:
  GpuSharedStep(const Manifest &manifest, const SparseAttentionProblem &p)
      : run(manifest), outputCount(static_cast<std::size_t>(p.shape.outputCount())) {
    for (const Argument &argument : manifest.arguments) {
      REQUIRE(static_cast<std::size_t>(argument.index) == run.buffers.arguments.size());
      switch (argument.role) {
      case ArgumentRole::Queries:
        run.argument(p.queries, "queries");
        break;
      case ArgumentRole::RowIds:
        rows = run.argument(p.rowIds, "rows");
        break;
      case ArgumentRole::Slots:
        slots = run.argument(p.slots, "slots");
        break;
      case ArgumentRole::HistoryStart:
        run.argument(p.historyStart, "history start");
        break;
      case ArgumentRole::HistoryLen:
        run.argument(p.historyLen, "history length");
        break;
      case ArgumentRole::Output:
        output = run.argument(std::vector<bf16_t>(outputCount, kBf16Poison), "output");
        break;
      case ArgumentRole::KvPool:
        run.buffers.arguments.push_back(0); // its tiers are passed apart
        break;
      default:
        FAIL("an argument " << abi::name(argument.role) << " in the shared-prefix step");
      }
    }
    run.buffers.hbm = run.upload(p.hbmPool, "HBM tier");
    run.buffers.hbmSlots = p.shape.hbmSlots;
    run.buffers.host = run.upload(p.hostStore, "host tier");
    run.buffers.hostRows = p.shape.hostRows;
    run.buffers.arena = run.filled(static_cast<std::size_t>(manifest.arenaBytes) / 4, 0, "arena");
    tiles = run.buffers.arena + static_cast<CUdeviceptr>(tilesParam(manifest).offset);
  }

  /// Runs with tile counts `counts` over the selections (`rowIds`, `slotIds`),
  /// the output poisoned first; the status word.
  std::uint32_t launch(const std::vector<std::int32_t> &counts,
                       const std::vector<std::int32_t> &rowIds,
                       const std::vector<std::int32_t> &slotIds) {
    run.write(tiles, counts, "tiles");
    run.write(rows, rowIds, "rows");
    run.write(slots, slotIds, "slots");
    run.write(output, std::vector<bf16_t>(outputCount, kBf16Poison), "output");
    run.write(run.buffers.status, std::vector<std::uint32_t>{0}, "status");
    run.launch("sparse_attention");
    return run.status();
  }
  /// The output of the last run.
  std::vector<bf16_t> result() const { return run.download<bf16_t>(output, outputCount, "output"); }

private:
  dhs::test::KernelRun run;
  std::size_t outputCount;
  CUdeviceptr rows = 0, slots = 0, tiles = 0, output = 0;
};

} // namespace

TEST_CASE("the tensor-core kernel reports a bad shared prefix (BadSharedRows)",
          "[cuda][gpu][share]") {
  const std::optional<Manifest> manifest = sharedStepOrSkip();
  if (!manifest || !dhs::test::gpuOrSkip())
    return;
  DHS_SEEDED_RNG(rng, 3300);
  SparseAttentionProblem p = sharedProblem(*manifest, rng());
  GpuSharedStep gpu(*manifest, p);
  const std::uint32_t bad = abi::kStatusBadSharedRows;

  // (a) A valid prefix (request 1 shares one of its two common tiles).
  REQUIRE(gpu.launch({2, 1}, p.rowIds, p.slots) == 0);
  const std::vector<bf16_t> shared = gpu.result();
  const std::vector<bf16_t> cpu = runCpu(*manifest, p, {2, 1});
  const Comparison againstCpu = compareOutputs(shared, cpu);
  CHECK(againstCpu.nonFinite == 0);
  CHECK(againstCpu.referenceNorm > 1.0);
  CHECK(againstCpu.relativeError < 1e-2);
  // Without sharing every CTA gathers its own rows, in the same tiles: the
  // same arithmetic, so the same bits (dhs.share_rows's min_missing holds
  // a request's tiles back by residency: its output must not change).
  // (No request with a count: the unclustered kernel computes the step.)
  REQUIRE(gpu.launch({0, 0}, p.rowIds, p.slots) == 0);
  const std::vector<bf16_t> alone = gpu.result();
  const Comparison againstPrivate = compareOutputs(shared, alone);
  CHECK(againstPrivate.nonFinite == 0);
  CHECK(againstPrivate.relativeError < 4e-3);
  CHECK(countBitDifferences(alone, shared) == 0);
  // One of the two requests shares (half: the clustered kernel computes
  // the step, request 1 alone in its cluster): the same bits again.
  REQUIRE(gpu.launch({2, 0}, p.rowIds, p.slots) == 0);
  CHECK(countBitDifferences(gpu.result(), shared) == 0);
  // Every tile shared where the first two are: the private rows differ.
  CHECK(gpu.launch({4, 2}, p.rowIds, p.slots) == bad);

  // (b) More tiles than K / 64 = 4 (request 0), a negative count (request 1).
  // The kernel clamps the count to 4, so where the positions' private rows
  // differ the id check reports too.
  std::uint32_t status = gpu.launch({5, 0}, p.rowIds, p.slots);
  CHECK((status & bad) != 0);
  CHECK(status == bad);
  status = gpu.launch({0, -1}, p.rowIds, p.slots);
  CHECK((status & bad) != 0);
  CHECK(status == bad);
  // With every position's lists the same only the count check can report.
  const SparseAttentionProblem same = sameLists(p);
  REQUIRE(gpu.launch({4, 4}, same.rowIds, same.slots) == 0);
  const Comparison allShared = compareOutputs(gpu.result(), runCpu(*manifest, same, {4, 4}));
  CHECK(allShared.nonFinite == 0);
  CHECK(allShared.relativeError < 1e-2);
  status = gpu.launch({5, 4}, same.rowIds, same.slots);
  CHECK((status & bad) != 0);
  CHECK(status == bad);
  status = gpu.launch({4, -1}, same.rowIds, same.slots);
  CHECK((status & bad) != 0);
  CHECK(status == bad);

  // (c) Position 3 of request 1 selects another row in its second tile.
  const std::vector<std::int32_t> differing = differsAt(p);
  status = gpu.launch({2, 2}, differing, p.slots);
  CHECK((status & bad) != 0);
  CHECK(status == bad);
  // With one tile shared in request 1 the difference is past the prefix.
  CHECK(gpu.launch({2, 1}, differing, p.slots) == 0);
  const Comparison differingCpu = compareOutputs(gpu.result(), runCpu(*manifest, p, {2, 1}));
  CHECK(differingCpu.nonFinite == 0);
  CHECK(differingCpu.relativeError < 1e-2);
}
