//===- WriteBackTest.cpp - A step's misses carried to its promotions ------===//
//
// test/unit/steps/write_back_{resolve,decisions}_step.mlir, compiled at
// build time: dhs.resolve gives each missing selection its entry in the
// pool's write-back ring (its index in the step log's misses, while the
// ring has room); the decision step carries the entries through the union,
// the sort and the plan, and dhs.place_rows copies a promoted row from its
// ring entry instead of the host store. On a GPU the entries must name the
// log's misses exactly, and every promoted slot must hold its ring entry's
// bytes (which this test makes differ from the host row's, as the
// attentions' copies would not) or, past the ring, the host row's.
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include "runtime/cuda/CudaResources.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>

using namespace dhs::runtime;
using namespace dhs::runtime::cuda_detail;
using Control = abi::PromotionPlanLayout;

namespace {

/// B requests one after another in a host store (up to `gap` rows apart)
/// with 1000-4000 rows each, and K random selections each (1 in 16 absent,
/// repeats allowed).
struct Requests {
  std::vector<std::int32_t> length, rows;
  std::vector<std::int64_t> start;
  std::size_t hostRows = 0;
};

Requests randomRequests(std::mt19937_64 &rng, std::size_t B, std::size_t K, std::size_t gap) {
  Requests r;
  r.length.resize(B);
  r.start.resize(B);
  r.rows.resize(B * K);
  for (std::size_t b = 0; b < B; ++b) {
    r.length[b] = 1000 + static_cast<std::int32_t>(rng() % 3000);
    r.start[b] = static_cast<std::int64_t>(r.hostRows);
    r.hostRows += static_cast<std::size_t>(r.length[b]) + (gap ? rng() % gap : 0);
  }
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t k = 0; k < K; ++k)
      r.rows[b * K + k] = rng() % 16 == 0 ? -1 : static_cast<std::int32_t>(rng() % r.length[b]);
  return r;
}

} // namespace

TEST_CASE("the write-back ring carries a step's misses from resolve to place_rows",
          "[cuda][gpu][place][resolve]") {
  std::optional<Manifest> resolveStep =
      dhs::test::kernelStepOrSkip("write_back_resolve", {abi::LaunchKind::Resolve});
  std::optional<Manifest> decisionStep = dhs::test::kernelStepOrSkip(
      "write_back_decisions", {abi::LaunchKind::UnionMissing, abi::LaunchKind::SortRows,
                               abi::LaunchKind::PlanPromotions, abi::LaunchKind::PlaceRows});
  if (!resolveStep || !decisionStep || !dhs::test::gpuOrSkip())
    return;
  DHS_SEEDED_RNG(rng, 1500);
  const std::size_t B = 4, K = 256, slots = 2048, token = 656, N = B * K;

  // Nothing is resident: every valid selection misses.
  const auto &[length, rows, start, hostRows] = randomRequests(rng, B, K, 50);
  // The host store's bytes, random.
  // (Copied into mapped memory once a run's context is current.)
  std::vector<std::uint8_t> hostData(hostRows * token);
  for (auto &byte : hostData)
    byte = static_cast<std::uint8_t>(rng());
  const std::uint8_t *hostBytes = hostData.data();
  const std::size_t valid = static_cast<std::size_t>(
      std::count_if(rows.begin(), rows.end(), [](std::int32_t id) { return id >= 0; }));

  for (std::size_t ring : {std::size_t(0), std::size_t(600), N}) {
    INFO("a ring of " << ring << " entries");
    // 1. Resolve: the slots (all -1), the log and the ring entries.
    dhs::test::KernelRun resolve(*resolveStep);
    resolve.buffers.arguments.push_back(0); // the pool
    resolve.argument(rows, "rows");
    resolve.argument(start, "history_start");
    resolve.argument(length, "history_len");
    const CUdeviceptr slotsBuffer = resolve.argument(std::vector<std::int32_t>(N, 7), "slots");
    const CUdeviceptr entriesBuffer =
        resolve.argument(std::vector<std::int32_t>(N, 12345), "write_back");
    const std::uint32_t step = 50;
    const std::size_t words = StepLogLayout::words(N);
    std::vector<std::int32_t> log(words, 0);
    log[StepLogLayout::kStep] = static_cast<std::int32_t>(step);
    resolve.buffers.map = resolve.upload(std::vector<std::int32_t>(hostRows, -1), "map");
    resolve.buffers.hostRows = static_cast<std::int64_t>(hostRows);
    resolve.buffers.hbmSlots = static_cast<std::int64_t>(slots);
    resolve.buffers.recency = resolve.filled(2 * slots, 0, "recency");
    resolve.buffers.log = resolve.upload(log, "log");
    resolve.buffers.logWords = static_cast<std::int64_t>(words);
    // (The ring's memory is not read by resolve: its size is.)
    resolve.buffers.writeBack = ring ? resolve.allocate(ring * token, "ring") : 0;
    resolve.buffers.writeBackRows = static_cast<std::int64_t>(ring);
    resolve.launch("resolve");
    REQUIRE(resolve.status() == 0u);
    const auto resolved = resolve.download<std::int32_t>(slotsBuffer, N, "slots");
    const auto entries = resolve.download<std::int32_t>(entriesBuffer, N, "write_back");
    const auto logged = resolve.download<std::int32_t>(resolve.buffers.log, words, "log");
    REQUIRE(static_cast<std::size_t>(logged[StepLogLayout::kMisses]) == valid);

    // The entries: the misses' indices in the log, those below the ring's
    // size, each once; -1 for absent selections and misses past the ring.
    std::size_t entryErrors = 0, kept = 0;
    std::set<std::int32_t> seen;
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t i = b * K + k;
        CHECK(resolved[i] == -1);
        const std::int32_t w = entries[i];
        if (rows[i] < 0 || w < 0) {
          entryErrors += w != -1;
          continue;
        }
        ++kept;
        const std::size_t at = StepLogLayout::kHeader + N + 2 * static_cast<std::size_t>(w);
        entryErrors += static_cast<std::size_t>(w) >= ring || !seen.insert(w).second ||
                       logged[at] != static_cast<std::int32_t>(b) || logged[at + 1] != rows[i];
      }
    CHECK(entryErrors == 0);
    CHECK(kept == std::min(ring, valid));

    // 2. The attentions' copies, as they would write them: ring entry w
    // holds its row's bytes. Here they are made to differ from the host
    // row's (each byte + 1), so the test sees which copy place_rows took.
    std::vector<std::uint8_t> ringBytes(std::max<std::size_t>(ring, 1) * token, 0);
    for (std::size_t i = 0; i < N; ++i)
      if (entries[i] >= 0) {
        const std::size_t hostRow = static_cast<std::size_t>(start[i / K] + rows[i]);
        for (std::size_t c = 0; c < token; ++c)
          ringBytes[static_cast<std::size_t>(entries[i]) * token + c] =
              static_cast<std::uint8_t>(hostBytes[hostRow * token + c] + 1);
      }

    // 3. The decisions: every distinct missing row promoted into a free slot.
    dhs::test::KernelRun decide(*decisionStep);
    decide.buffers.arguments.push_back(0); // the pool
    decide.argument(rows, "rows");
    decide.argument(resolved, "slots");
    decide.argument(start, "history_start");
    decide.argument(entries, "write_back");
    decide.argument(std::vector<std::int32_t>(N, 5), "union");
    decide.argument(std::vector<std::int32_t>(N, 5), "remap");
    decide.argument(std::vector<std::int32_t>(N, 5), "missing_sources");
    decide.argument(std::vector<std::int32_t>(N, 5), "fetched");
    decide.argument(std::vector<std::int32_t>(N, 5), "fetched_sources");
    decide.argument(std::vector<std::int64_t>(slots, -1), "hot");
    decide.argument(std::vector<std::int32_t>(slots, -1), "cleared");
    std::vector<std::int32_t> freeStack(slots);
    for (std::size_t s = 0; s < slots; ++s)
      freeStack[s] = static_cast<std::int32_t>(s);
    std::shuffle(freeStack.begin(), freeStack.end(), rng);
    decide.argument(freeStack, "free");
    std::vector<std::int32_t> control(Control::kWords, 0);
    control[Control::kFreeCount] = static_cast<std::int32_t>(slots);
    control[Control::kFreeBudget] = static_cast<std::int32_t>(slots);
    const CUdeviceptr controlBuffer = decide.argument(control, "control");
    const CUdeviceptr planRows = decide.argument(std::vector<std::int64_t>(2 * N, 9), "plan_rows");
    const CUdeviceptr planSlots =
        decide.argument(std::vector<std::int32_t>(2 * N, 9), "plan_slots");
    const CUdeviceptr planSources =
        decide.argument(std::vector<std::int32_t>(2 * N, 9), "plan_sources");
    MappedHostBuffer host(hostRows * token, "host store");
    std::memcpy(host.host(), hostData.data(), hostData.size());
    decide.buffers.host = host.device();
    decide.buffers.hostRows = static_cast<std::int64_t>(hostRows);
    decide.buffers.hbm = decide.filled(slots * token / 4, 0xABABABABu, "hbm");
    decide.buffers.hbmSlots = static_cast<std::int64_t>(slots);
    decide.buffers.map = decide.upload(std::vector<std::int32_t>(hostRows, -1), "map");
    decide.buffers.recency = decide.filled(2 * slots, 0, "recency");
    decide.buffers.log = decide.upload(logged, "log");
    decide.buffers.logWords = static_cast<std::int64_t>(words);
    decide.buffers.writeBack = ring ? decide.upload(ringBytes, "ring") : 0;
    decide.buffers.writeBackRows = static_cast<std::int64_t>(ring);
    decide.launch("decisions");
    REQUIRE(decide.status() == 0u);
    const auto placedRows = decide.download<std::int64_t>(planRows, 2 * N, "plan rows");
    const auto placedSlots = decide.download<std::int32_t>(planSlots, 2 * N, "plan slots");
    const auto sources = decide.download<std::int32_t>(planSources, 2 * N, "plan sources");
    const auto hbm = decide.download<std::uint8_t>(decide.buffers.hbm, slots * token, "hbm");
    const auto controlAfter =
        decide.download<std::int32_t>(controlBuffer, Control::kWords, "control");

    // Each distinct missing row's ring entries (one per selection of it).
    std::map<std::int64_t, std::set<std::int32_t>> entriesOf;
    for (std::size_t i = 0; i < N; ++i)
      if (rows[i] >= 0)
        entriesOf[start[i / K] + rows[i]].insert(entries[i]);
    CHECK(static_cast<std::size_t>(controlAfter[Control::kPromoted]) == entriesOf.size());
    std::size_t promoted = 0, fromRing = 0, sourceErrors = 0, byteErrors = 0;
    for (std::size_t i = 0; i < 2 * N; ++i) {
      if (i >= N || placedRows[i] < 0) {
        sourceErrors += sources[i] != -1;
        continue;
      }
      ++promoted;
      const std::int64_t hostRow = placedRows[i];
      const std::int32_t source = sources[i];
      auto found = entriesOf.find(hostRow);
      REQUIRE(found != entriesOf.end());
      // The source is the entry of one of the row's selections (the one the
      // union lists it by): -1 only when one of them has none (a row
      // selected twice may have missed past the ring once).
      const bool everyOneHasAnEntry = *found->second.begin() >= 0;
      sourceErrors += source < 0 ? everyOneHasAnEntry : !found->second.count(source);
      fromRing += source >= 0;
      const std::uint8_t *expected = source >= 0
                                         ? &ringBytes[static_cast<std::size_t>(source) * token]
                                         : &hostBytes[static_cast<std::size_t>(hostRow) * token];
      byteErrors +=
          std::memcmp(&hbm[static_cast<std::size_t>(placedSlots[i]) * token], expected, token) != 0;
    }
    CHECK(promoted == entriesOf.size());
    CHECK(sourceErrors == 0);
    CHECK(byteErrors == 0);
    if (ring == 0)
      CHECK(fromRing == 0);
    if (ring == N)
      CHECK(fromRing == promoted);
    if (ring == 600) {
      CHECK(fromRing > 0);
      CHECK(fromRing < promoted);
    }
  }
}

TEST_CASE("the attention's host rows are written into their ring entries", "[cuda][gpu][resolve]") {
  // 16 heads (the CUDA-core kernel) and 64 (the tensor-core kernel) read
  // their missing rows and write them back; at 128 heads (two CTAs a query)
  // a fetch stages them once and writes them back; bf16 rows at 128 heads
  // in a layer group's pool (layer 0 of 4) are gathered by both CTAs of a
  // query, each every row, and written back by head block 0's.
  const auto [name, H, copier, rowBytes, layers] =
      GENERATE(table<const char *, std::size_t, abi::LaunchKind, std::size_t, std::size_t>(
          {{"write_back_attention", 16, abi::LaunchKind::SparseAttention, 656, 1},
           {"write_back_tensor_core", 64, abi::LaunchKind::SparseAttention, 656, 1},
           {"write_back_staged", 128, abi::LaunchKind::Fetch, 656, 1},
           {"write_back_group_bf16", 128, abi::LaunchKind::SparseAttention, 1152, 4}}));
  INFO(name);
  const std::optional<Manifest> compiled = dhs::test::compiledStepOrSkip(name);
  if (!compiled)
    return;
  const Manifest &manifest = *compiled;
  REQUIRE(manifest.launches.size() >= 2);
  CHECK(manifest.launches[0].kind == abi::LaunchKind::Resolve);
  CHECK(manifest.launches[1].kind == copier);
  if (layers > 1) {
    // (No cluster: head block 0 gathers every row, so its lookups cover
    // them all. In the 2-CTA cluster kernel of before, each CTA gathered
    // half of every tile, and with head block 0 alone looking up entries
    // 139-162 of 300 came out wrong on an H100: bench/NOTES.md,
    // thirty-seventh session.)
    std::ifstream ptx(manifest.launches[1].ptxPath);
    const std::string text((std::istreambuf_iterator<char>(ptx)), std::istreambuf_iterator<char>());
    CHECK(text.find(".reqnctapercluster") == std::string::npos);
  }
  if (!dhs::test::gpuOrSkip())
    return;
  DHS_SEEDED_RNG(rng, 1501);
  const std::size_t B = 4, K = 256, slots = 2048, token = layers * rowBytes, N = B * K;
  const auto &[length, rows, start, hostRows] = randomRequests(rng, B, K, 0);
  // Rows of finite values. FP8: random e4m3 bytes (no NaN codes), scales in
  // [0.5, 1), bf16 RoPE dims in [-1, 1); bf16: 576 dims in [-1, 1).
  // (Copied into mapped memory once a run's context is current.)
  std::vector<std::uint8_t> hostData(hostRows * token);
  std::uint8_t *hostBytes = hostData.data();
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto storeBf16 = [&](std::uint8_t *at) {
    float value = unit(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    std::uint16_t half = static_cast<std::uint16_t>(bits >> 16);
    std::memcpy(at, &half, 2);
  };
  for (std::size_t r = 0; r < hostRows * layers; ++r) {
    std::uint8_t *row = hostBytes + r * rowBytes;
    if (rowBytes != 656) {
      for (std::size_t d = 0; d < 576; ++d)
        storeBf16(row + 2 * d);
      continue;
    }
    for (std::size_t i = 0; i < 512; ++i) {
      std::uint8_t byte = static_cast<std::uint8_t>(rng());
      row[i] = (byte & 0x7f) == 0x7f ? 0x3c : byte;
    }
    for (std::size_t s = 0; s < 4; ++s) {
      float scale = 0.5f + 0.5f * std::abs(unit(rng));
      std::memcpy(row + 512 + 4 * s, &scale, 4);
    }
    for (std::size_t d = 0; d < 64; ++d)
      storeBf16(row + 528 + 2 * d);
  }
  // A third of the rows resident, in distinct slots holding their bytes.
  std::vector<std::int32_t> map(hostRows, -1);
  std::vector<std::uint8_t> hbmBytes(slots * token, 0);
  std::size_t used = 0;
  for (std::size_t r = 0; r < hostRows && used < slots; ++r)
    if (rng() % 3 == 0) {
      map[r] = static_cast<std::int32_t>(used);
      std::memcpy(&hbmBytes[used * token], hostBytes + r * token, token);
      ++used;
    }
  std::vector<std::uint16_t> queries(B * H * 576);
  for (auto &q : queries) {
    float value = unit(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    q = static_cast<std::uint16_t>(bits >> 16);
  }

  std::vector<std::uint16_t> outputs[2];
  for (std::size_t ring : {std::size_t(300), std::size_t(0)}) {
    INFO("a ring of " << ring << " entries");
    dhs::test::KernelRun run(manifest);
    run.argument(queries, "queries");
    run.argument(rows, "rows");
    run.argument(std::vector<std::int32_t>(N, 7), "slots");
    const CUdeviceptr entriesBuffer =
        run.argument(std::vector<std::int32_t>(N, 12345), "write_back");
    run.argument(start, "history_start");
    run.argument(length, "history_len");
    run.buffers.arguments.push_back(0); // the pool
    const CUdeviceptr outBuffer =
        run.argument(std::vector<std::uint16_t>(B * H * 512, 0xFFFF), "output");
    const std::size_t words = StepLogLayout::words(N);
    std::vector<std::int32_t> log(words, 0);
    log[StepLogLayout::kStep] = 9;
    MappedHostBuffer host(hostRows * token, "host store");
    std::memcpy(host.host(), hostData.data(), hostData.size());
    run.buffers.host = host.device();
    run.buffers.hostRows = static_cast<std::int64_t>(hostRows);
    run.buffers.hbm = run.upload(hbmBytes, "hbm");
    run.buffers.hbmSlots = static_cast<std::int64_t>(slots);
    run.buffers.map = run.upload(map, "map");
    run.buffers.recency = run.filled(2 * slots, 0, "recency");
    run.buffers.log = run.upload(log, "log");
    run.buffers.logWords = static_cast<std::int64_t>(words);
    run.buffers.writeBack = ring ? run.filled(ring * token / 4, 0xCDCDCDCDu, "ring") : 0;
    run.buffers.writeBackRows = static_cast<std::int64_t>(ring);
    if (manifest.arenaBytes > 0)
      run.buffers.arena = run.allocate(manifest.arenaBytes, "arena");
    run.launch("write-back step");
    REQUIRE(run.status() == 0u);
    const auto entries = run.download<std::int32_t>(entriesBuffer, N, "write_back");
    outputs[ring ? 0 : 1] = run.download<std::uint16_t>(outBuffer, B * H * 512, "output");
    if (!ring) {
      CHECK(std::all_of(entries.begin(), entries.end(), [](std::int32_t w) { return w == -1; }));
      continue;
    }
    const auto ringBytes = run.download<std::uint8_t>(run.buffers.writeBack, ring * token, "ring");
    // Every entry given out holds its row's bytes (layer 0's, at the token's
    // start); the entries are the first `ring` misses' (none left over).
    std::size_t misses = 0, kept = 0, byteErrors = 0;
    std::vector<bool> given(ring, false);
    for (std::size_t i = 0; i < N; ++i) {
      const std::int32_t id = rows[i];
      if (id < 0)
        continue;
      const std::size_t hostRow = static_cast<std::size_t>(start[i / K] + id);
      if (map[hostRow] >= 0) {
        CHECK(entries[i] == -1);
        continue;
      }
      ++misses;
      if (entries[i] < 0)
        continue;
      ++kept;
      REQUIRE(static_cast<std::size_t>(entries[i]) < ring);
      given[static_cast<std::size_t>(entries[i])] = true;
      byteErrors += std::memcmp(&ringBytes[static_cast<std::size_t>(entries[i]) * token],
                                hostBytes + hostRow * token, rowBytes) != 0;
    }
    CHECK(kept == std::min(ring, misses));
    CHECK(misses > ring);
    CHECK(byteErrors == 0);
    CHECK(std::count(given.begin(), given.end(), true) == static_cast<std::ptrdiff_t>(kept));
  }
  // Writing back changes no output bit.
  CHECK(outputs[0] == outputs[1]);
}
