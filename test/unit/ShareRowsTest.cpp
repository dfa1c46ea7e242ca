//===- ShareRowsTest.cpp - dhs.share_rows on the CPU and the GPU ----------===//
//
// The shared-prefix order of dhs.share_rows (the op's description), checked
// against a reference written here from the rule (std::set / std::map, no
// code shared with the runtime) on random selections: per request an
// overlap of 0%, 50%, 85% or 100% (a common set of rows plus rows private
// to each position, shuffled), repeats within a list, -1 (and other
// negative ids) anywhere, all -1; none, 1 in 128 or 1 in 4 of a request's
// slots -1 (on the host); Q in {1, 2, 5, 8}, K in {64, 256, 2048} (and a
// ragged 700), tiles of 64 and 16, min_missing 0 (always share) and 8 or
// 24 (tiles held back where fewer prefix rows are on the host, the order
// the same).
//
//   - the CPU backend's share_rows launch (CpuLaunches) for every (Q, K),
//     B drawn in 4..16 (the launch of a compiled step, its shapes set);
//   - the generated kernel (test/unit/steps/share_rows*_step.mlir compiled
//     at build time for nine shapes) on a GPU; it skips without one.
//
// Besides equality with the reference, every output list must be a
// permutation of its input (row, slot) pairs, and its first tiles x tile
// entries the same rows in every position of the request.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/cpu/CpuLaunches.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <random>
#include <set>

using namespace dhs::runtime;

namespace {

/// Selections [B, Q, K] (rows and slots) and what share_rows makes of them.
struct Lists {
  std::int64_t requests = 0, positions = 0, selected = 0;
  std::vector<std::int32_t> rows, slots;
  std::size_t size() const { return static_cast<std::size_t>(requests * positions * selected); }
  std::size_t at(std::int64_t b, std::int64_t q, std::int64_t k) const {
    return static_cast<std::size_t>((b * positions + q) * selected + k);
  }
};
struct Shared {
  std::vector<std::int32_t> rows, slots, tiles;
};

/// The rule, written from the op's description.
Shared reference(const Lists &in, std::int64_t tile, std::int64_t minMissing) {
  Shared out;
  out.rows.resize(in.size());
  out.slots.resize(in.size());
  for (std::int64_t b = 0; b < in.requests; ++b) {
    // Each position's rows, and the first k of each.
    std::vector<std::map<std::int32_t, std::int64_t>> firstK(
        static_cast<std::size_t>(in.positions));
    for (std::int64_t q = 0; q < in.positions; ++q)
      for (std::int64_t k = in.selected - 1; k >= 0; --k)
        firstK[static_cast<std::size_t>(q)][in.rows[in.at(b, q, k)]] = k;
    std::vector<std::int32_t> common;
    std::set<std::int32_t> seen;
    for (std::int64_t k = 0; k < in.selected; ++k) {
      const std::int32_t row = in.rows[in.at(b, 0, k)];
      if (row < 0 || !seen.insert(row).second)
        continue;
      bool everywhere = true;
      for (const auto &positionRows : firstK)
        everywhere = everywhere && positionRows.count(row) == 1;
      if (everywhere)
        common.push_back(row);
    }
    const std::int64_t tiles = static_cast<std::int64_t>(common.size()) / tile;
    common.resize(static_cast<std::size_t>(tiles * tile));
    // Shared only with min_missing of the prefix on the host in position 0.
    std::int64_t missing = 0;
    for (std::int32_t row : common)
      missing += in.slots[in.at(b, 0, firstK[0].at(row))] < 0;
    out.tiles.push_back(missing >= minMissing ? static_cast<std::int32_t>(tiles) : 0);
    for (std::int64_t q = 0; q < in.positions; ++q) {
      std::set<std::int64_t> used;
      std::int64_t next = 0;
      auto put = [&](std::int64_t k) {
        out.rows[in.at(b, q, next)] = in.rows[in.at(b, q, k)];
        out.slots[in.at(b, q, next)] = in.slots[in.at(b, q, k)];
        ++next;
      };
      for (std::int32_t row : common) {
        const std::int64_t k = firstK[static_cast<std::size_t>(q)].at(row);
        used.insert(k);
        put(k);
      }
      for (std::int64_t k = 0; k < in.selected; ++k)
        if (!used.count(k))
          put(k);
    }
  }
  return out;
}

/// What a request's lists look like.
enum class Kind { Overlap0, Overlap50, Overlap85, Overlap100, AllNone, Messy, Count };

/// Random selections, each request of a kind (request 0 overlapping 100%,
/// the others cycling through all kinds, so every kind appears when
/// B >= 6), counted in `kinds`. Lists that overlap 0%, 50% or 85% have a
/// few repeats and -1 too; messy lists many, and other negative ids.
Lists randomLists(std::mt19937_64 &rng, std::int64_t requests, std::int64_t positions,
                  std::int64_t selected, int kinds[]) {
  Lists in{requests, positions, selected, {}, {}};
  in.rows.resize(in.size());
  in.slots.resize(in.size());
  const int kindCount = static_cast<int>(Kind::Count);
  const int firstKind = static_cast<int>(rng() % kindCount);
  std::uniform_int_distribution<std::int32_t> anyId(0, std::numeric_limits<std::int32_t>::max());
  for (std::int64_t b = 0; b < requests; ++b) {
    const auto kind = b == 0 ? Kind::Overlap100 : static_cast<Kind>((firstKind + b) % kindCount);
    ++kinds[static_cast<int>(kind)];
    double overlap = 0.0;
    switch (kind) {
    case Kind::Overlap50:
      overlap = 0.5;
      break;
    case Kind::Overlap85:
      overlap = 0.85;
      break;
    case Kind::Overlap100:
    case Kind::Messy:
      overlap = 1.0;
      break;
    default:
      break;
    }
    // On the host (slot -1): none, 1 in 128 or 1 in 4 of the request's
    // entries (min_missing shares the first rarely, the last mostly).
    const std::uint64_t missingOneIn = std::array<std::uint64_t, 3>{0, 128, 4}[rng() % 3];
    // Distinct common rows (any non-negative id), then private ones.
    const auto commonCount = static_cast<std::int64_t>(overlap * static_cast<double>(selected));
    std::set<std::int32_t> taken;
    std::vector<std::int32_t> common;
    while (static_cast<std::int64_t>(common.size()) < commonCount) {
      const std::int32_t id = anyId(rng);
      if (taken.insert(id).second)
        common.push_back(id);
    }
    for (std::int64_t q = 0; q < positions; ++q) {
      std::vector<std::int32_t> list = common;
      while (static_cast<std::int64_t>(list.size()) < selected) {
        const std::int32_t id = anyId(rng);
        if (taken.insert(id).second)
          list.push_back(id);
      }
      std::shuffle(list.begin(), list.end(), rng);
      for (std::int64_t k = 0; k < selected; ++k) {
        std::int32_t &row = list[static_cast<std::size_t>(k)];
        const std::uint64_t dice = rng() % 100;
        if (kind == Kind::AllNone)
          row = -1;
        else if (kind == Kind::Overlap100)
          continue;
        else if (kind == Kind::Messy && dice < 10) // repeats of an earlier entry
          row = list[static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(k + 1))];
        else if (kind == Kind::Messy && dice < 20)
          row = -1;
        else if (kind == Kind::Messy && dice < 22)
          row = dice == 20 ? std::numeric_limits<std::int32_t>::min() : -7;
        else if (dice < 3) // a few repeats and -1 in every kind
          row = list[static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(k + 1))];
        else if (dice < 6)
          row = -1;
      }
      for (std::int64_t k = 0; k < selected; ++k) {
        in.rows[in.at(b, q, k)] = list[static_cast<std::size_t>(k)];
        // Distinct slots (and -1: on the host) tell the entries apart.
        const bool missing = missingOneIn > 0 && rng() % missingOneIn == 0;
        in.slots[in.at(b, q, k)] = missing ? -1 : static_cast<std::int32_t>(in.at(b, q, k) * 3 + 1);
      }
    }
  }
  return in;
}

/// What checkShared saw: requests that share at least one tile, and those
/// with whole common tiles that min_missing held back.
struct SharedCounts {
  std::int64_t sharing = 0, heldBack = 0;
};

/// Checks `got` against the reference and the order's invariants.
SharedCounts checkShared(const Lists &in, std::int64_t tile, std::int64_t minMissing,
                         const Shared &got) {
  const Shared expected = reference(in, tile, minMissing);
  // The order never depends on min_missing: the lists of the rule that
  // always shares.
  const Shared ordered = reference(in, tile, 0);
  REQUIRE(got.tiles.size() == static_cast<std::size_t>(in.requests));
  SharedCounts counts;
  for (std::int64_t b = 0; b < in.requests; ++b) {
    INFO("request " << b << " of " << in.requests << ", Q = " << in.positions << ", K = "
                    << in.selected << ", tile = " << tile << ", min_missing = " << minMissing);
    CHECK(got.tiles[b] == expected.tiles[b]);
    counts.heldBack += expected.tiles[b] == 0 && ordered.tiles[b] > 0;
    const std::int64_t prefix = std::int64_t{got.tiles[b]} * tile;
    REQUIRE(prefix >= 0);
    REQUIRE(prefix <= in.selected);
    counts.sharing += prefix > 0;
    for (std::int64_t q = 0; q < in.positions; ++q) {
      INFO("position " << q);
      const std::size_t begin = in.at(b, q, 0), end = begin + static_cast<std::size_t>(in.selected);
      auto slice = [&](const std::vector<std::int32_t> &v) {
        return std::vector<std::int32_t>(v.begin() + begin, v.begin() + end);
      };
      CHECK(slice(got.rows) == slice(expected.rows));
      CHECK(slice(got.slots) == slice(expected.slots));
      CHECK(slice(expected.rows) == slice(ordered.rows));
      // A permutation of the input's (row, slot) pairs.
      std::vector<std::pair<std::int32_t, std::int32_t>> before, after;
      for (std::size_t i = begin; i < end; ++i) {
        before.emplace_back(in.rows[i], in.slots[i]);
        after.emplace_back(got.rows[i], got.slots[i]);
      }
      std::sort(before.begin(), before.end());
      std::sort(after.begin(), after.end());
      CHECK(before == after);
      // The prefix: the same distinct non-negative rows as position 0's.
      std::set<std::int32_t> distinct;
      for (std::int64_t i = 0; i < prefix; ++i) {
        const std::int32_t row = got.rows[in.at(b, q, i)];
        CHECK(row >= 0);
        distinct.insert(row);
        CHECK(row == got.rows[in.at(b, 0, i)]);
      }
      CHECK(static_cast<std::int64_t>(distinct.size()) == prefix);
    }
  }
  return counts;
}

/// Runs `in` through the CPU backend's share_rows launch: the launch of
/// `compiled` (its roles) with the shapes of `in`, `tile` and `minMissing`.
Shared runCpu(const Manifest &compiled, const Lists &in, std::int64_t tile,
              std::int64_t minMissing) {
  Manifest manifest = compiled;
  REQUIRE(manifest.launches.size() == 1);
  Launch &launch = manifest.launches[0];
  launch.tile = tile;
  launch.minMissing = minMissing;
  Shared out{std::vector<std::int32_t>(in.size(), 0x7777),
             std::vector<std::int32_t>(in.size(), 0x7777),
             std::vector<std::int32_t>(static_cast<std::size_t>(in.requests), 0x7777)};
  std::vector<std::int32_t> rows = in.rows, slots = in.slots;
  CpuStepMemory memory;
  memory.arguments.resize(manifest.arguments.size());
  for (LaunchParam &param : launch.params) {
    REQUIRE(param.source == ParamSource::Argument);
    std::vector<std::int32_t> *buffer = nullptr;
    switch (param.role) {
    case abi::ParamRole::RowIds:
      buffer = &rows;
      break;
    case abi::ParamRole::Slots:
      buffer = &slots;
      break;
    case abi::ParamRole::SharedRows:
      buffer = &out.rows;
      break;
    case abi::ParamRole::SharedSlots:
      buffer = &out.slots;
      break;
    case abi::ParamRole::SharedTiles:
      buffer = &out.tiles;
      break;
    default:
      FAIL("a share_rows launch with a " << abi::name(param.role) << " parameter");
    }
    param.shape = param.role == abi::ParamRole::SharedTiles
                      ? std::vector<std::int64_t>{in.requests}
                      : std::vector<std::int64_t>{in.requests, in.positions, in.selected};
    memory.arguments.at(static_cast<std::size_t>(param.argumentIndex)) =
        reinterpret_cast<std::uint8_t *>(buffer->data());
  }
  CpuLaunches(1).run(manifest, 0, 1, memory);
  CHECK(memory.status == 0);
  return out;
}

/// The compiled steps: name, B, Q, K, tile, min_missing.
struct CompiledShape {
  const char *name;
  std::int64_t requests, positions, selected, tile, minMissing;
};
constexpr CompiledShape kCompiled[] = {
    {"share_rows_q1", 4, 1, 2048, 64, 0},        {"share_rows_q2", 9, 2, 256, 64, 0},
    {"share_rows_q5", 13, 5, 2048, 64, 0},       {"share_rows_q8", 16, 8, 2048, 64, 0},
    {"share_rows_q8_k64", 6, 8, 64, 64, 0},      {"share_rows_t16_q5", 7, 5, 256, 16, 0},
    {"share_rows_t16_ragged", 5, 3, 700, 16, 0}, {"share_rows_m24_q5", 13, 5, 2048, 64, 24},
    {"share_rows_m24_q2", 9, 2, 256, 64, 24}};

} // namespace

TEST_CASE("share_rows on the CPU: a worked example", "[share]") {
  const std::optional<Manifest> manifest =
      dhs::test::kernelStepOrSkip("share_rows_q2", {abi::LaunchKind::ShareRows});
  if (!manifest)
    return;
  CHECK(manifest->launches[0].tile == 64);
  // Position 0 lists 5, 3, 9, 7 (and a -1, a repeated 3); position 1 lists
  // 7, 3, 5 (twice), 2. Common, in position 0's order: 5, 3, 7; tiles of 2:
  // one tile, 5 and 3. Position 1's 5 is its first one (k = 2).
  Lists in{1,
           2,
           6,
           {5, 3, -1, 3, 9, 7, /**/ 7, 3, 5, 5, -1, 2},
           {10, 11, 12, 13, 14, 15, /**/ 20, 21, 22, 23, 24, 25}};
  const Shared got = runCpu(*manifest, in, 2, 0);
  CHECK(got.tiles == std::vector<std::int32_t>{1});
  CHECK(got.rows == std::vector<std::int32_t>{5, 3, -1, 3, 9, 7, /**/ 5, 3, 7, 5, -1, 2});
  CHECK(got.slots ==
        std::vector<std::int32_t>{10, 11, 12, 13, 14, 15, /**/ 22, 21, 20, 23, 24, 25});
  // Tiles of 4: not one whole tile; the lists stay as they are.
  const Shared none = runCpu(*manifest, in, 4, 0);
  CHECK(none.tiles == std::vector<std::int32_t>{0});
  CHECK(none.rows == in.rows);
  CHECK(none.slots == in.slots);
  // One position: its distinct rows >= 0 (5, 3, 9, 7) are common.
  Lists one{1, 1, 6, {5, 3, -1, 3, 9, 7}, {10, 11, 12, 13, 14, 15}};
  const Shared alone = runCpu(*manifest, one, 4, 0);
  CHECK(alone.tiles == std::vector<std::int32_t>{1});
  CHECK(alone.rows == std::vector<std::int32_t>{5, 3, 9, 7, -1, 3});
  CHECK(alone.slots == std::vector<std::int32_t>{10, 11, 14, 15, 12, 13});
  // min_missing: the prefix 5, 3 of the first example has 11's row 3 on
  // the host (-1) in position 0; one row is enough, two are not, and the
  // lists stay the same either way.
  Lists host = in;
  host.slots[1] = -1;
  const Shared enough = runCpu(*manifest, host, 2, 1);
  CHECK(enough.tiles == std::vector<std::int32_t>{1});
  const Shared tooFew = runCpu(*manifest, host, 2, 2);
  CHECK(tooFew.tiles == std::vector<std::int32_t>{0});
  CHECK(tooFew.rows == enough.rows);
  CHECK(tooFew.slots == enough.slots);
  CHECK(tooFew.rows == got.rows);
}

TEST_CASE("share_rows on the CPU matches the rule on random selections", "[share]") {
  const std::optional<Manifest> manifest =
      dhs::test::kernelStepOrSkip("share_rows_q2", {abi::LaunchKind::ShareRows});
  if (!manifest)
    return;
  DHS_SEEDED_RNG(rng, 3000);
  int kinds[static_cast<int>(Kind::Count)] = {};
  std::int64_t heldBack = 0;
  for (std::int64_t positions : {1, 2, 5, 8})
    for (std::int64_t selected : {64, 256, 2048})
      for (std::int64_t tile : {64, 16}) {
        const auto requests = static_cast<std::int64_t>(4 + rng() % 13);
        const Lists in = randomLists(rng, requests, positions, selected, kinds);
        // Requests whose lists overlap (50% or more) share whole tiles.
        CHECK(checkShared(in, tile, 0, runCpu(*manifest, in, tile, 0)).sharing > 0);
        // With min_missing = 8, fewer (those with rows on the host).
        heldBack += checkShared(in, tile, 8, runCpu(*manifest, in, tile, 8)).heldBack;
      }
  for (int kind = 0; kind < static_cast<int>(Kind::Count); ++kind)
    CHECK(kinds[kind] > 0);
  CHECK(heldBack > 0);
}

TEST_CASE("the generated share_rows kernel writes the rule's order", "[cuda][gpu][share]") {
  for (const CompiledShape &shape : kCompiled) {
    DYNAMIC_SECTION(shape.name) {
      DHS_GPU_KERNEL_STEP(manifest, shape.name, abi::LaunchKind::ShareRows);
      REQUIRE(manifest.arguments.size() == 5);
      REQUIRE(manifest.arguments[0].shape ==
              std::vector<std::int64_t>{shape.requests, shape.positions, shape.selected});
      REQUIRE(manifest.launches[0].tile == shape.tile);
      REQUIRE(manifest.launches[0].minMissing == shape.minMissing);
      DHS_SEEDED_RNG(rng, 3100);
      int kinds[static_cast<int>(Kind::Count)] = {};
      std::int64_t sharing = 0, heldBack = 0;
      for (int repeat = 0; repeat < 4; ++repeat) {
        INFO("repeat " << repeat);
        const Lists in = randomLists(rng, shape.requests, shape.positions, shape.selected, kinds);
        dhs::test::KernelRun run(manifest);
        run.argument(in.rows, "rows");
        run.argument(in.slots, "slots");
        const CUdeviceptr rows =
            run.argument(std::vector<std::int32_t>(in.size(), 0x7777), "shared_rows");
        const CUdeviceptr slots =
            run.argument(std::vector<std::int32_t>(in.size(), 0x7777), "shared_slots");
        const CUdeviceptr tiles = run.argument(
            std::vector<std::int32_t>(static_cast<std::size_t>(in.requests), 0x7777), "tiles");
        run.launch("share_rows");
        CHECK(run.status() == 0);
        const Shared got{
            run.download<std::int32_t>(rows, in.size(), "shared_rows"),
            run.download<std::int32_t>(slots, in.size(), "shared_slots"),
            run.download<std::int32_t>(tiles, static_cast<std::size_t>(in.requests), "tiles")};
        const SharedCounts counts = checkShared(in, shape.tile, shape.minMissing, got);
        // (With min_missing every request of a draw may be held back.)
        if (shape.minMissing == 0)
          CHECK(counts.sharing > 0);
        sharing += counts.sharing;
        heldBack += counts.heldBack;
        // The CPU backend agrees with the kernel.
        const Shared cpu = runCpu(manifest, in, shape.tile, shape.minMissing);
        CHECK(cpu.rows == got.rows);
        CHECK(cpu.slots == got.slots);
        CHECK(cpu.tiles == got.tiles);
      }
      // Some of the 4 x B requests shared, and min_missing held some back.
      CHECK(sharing > 0);
      if (shape.minMissing > 0)
        CHECK(heldBack > 0);
    }
  }
}

TEST_CASE("the share_rows steps compile to a CTA per request within shared memory", "[share]") {
  for (const CompiledShape &shape : kCompiled) {
    INFO(shape.name);
    const std::optional<Manifest> manifest =
        dhs::test::kernelStepOrSkip(shape.name, {abi::LaunchKind::ShareRows});
    if (!manifest)
      return;
    const Launch &launch = manifest->launches[0];
    CHECK(launch.grid == std::array<unsigned, 3>{static_cast<unsigned>(shape.requests), 1, 1});
    CHECK(launch.block[0] % 32 == 0);
    CHECK(launch.block[0] <= 1024);
    CHECK(launch.tile == shape.tile);
    CHECK(launch.minMissing == shape.minMissing);
    // A hash table of at least 2 K slots (a 4-byte row id and Q 2-byte first
    // occurrences each) and a taken byte per selection.
    CHECK(launch.dynamicSharedBytes >=
          2 * shape.selected * (4 + 2 * shape.positions) + shape.positions * shape.selected);
    CHECK(launch.dynamicSharedBytes <= 227 * 1024);
    std::vector<ArgumentRole> roles;
    for (const Argument &argument : manifest->arguments)
      roles.push_back(argument.role);
    CHECK(roles == std::vector<ArgumentRole>{ArgumentRole::RowIds, ArgumentRole::Slots,
                                             ArgumentRole::SharedRows, ArgumentRole::SharedSlots,
                                             ArgumentRole::SharedTiles});
  }
}
