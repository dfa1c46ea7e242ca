//===- FaultInjectionTest.cpp - Failures where machines fail --------------===//
//
// The fault matrix (RELIABILITY.md): a host allocation (pinned on CUDA), a
// device allocation (HBM), nvJitLink, a kernel launch, a row copy into HBM,
// a copy that silently corrupts a row, and a request finished by another
// thread between calls. Each must give a clear error (or, for a copy, be
// repaired before anything reads the row), leave the other requests' KV
// and outputs exact, and leave the runtime serving. Every case runs on the
// CPU backend; the same cases run on CUDA where a GPU is usable (the naive
// test step's PTX) and say they are skipped otherwise.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "runtime/Runtime.h"
#include "runtime/capi/dhs_runtime.h"
#include "runtime/capi/dhs_runtime.hpp"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cuda/JitLink.h"

#include <catch2/catch.hpp>

#include <exception>
#include <map>
#include <mutex>
#include <thread>

using namespace dhs::runtime;

namespace {

/// A session on the naive step (B=4, Q=1, H=16, K=256, mla_bf16, 2048
/// slots) with 2 layers in 2 groups and draft rings, plus what the engine
/// wrote, for the oracle.
class Session {
public:
  explicit Session(BackendKind backend, bool checks = true, unsigned cpuThreads = 1)
      : backend_(backend),
        config_(dhs::test::testConfig(2, 1, backend, /*draftWindow=*/2, /*floor=*/32)) {
    config_.checkInvariants = checks;
    config_.cpuThreads = cpuThreads;
    config_.fullCheckInterval = 4;
    rt = std::make_unique<Runtime>(config_);
  }

  static std::string step() { return dhs::test::stepsDir() + "/naive"; }
  void load() { rt->loadStep(step()); }

  void admit(std::uint64_t id, std::int64_t len) {
    std::vector<bf16_t> prefill(static_cast<std::size_t>(2 * len * 576));
    dhs::test::fillRandom(rng_, prefill.data(), prefill.size());
    rt->admit(id, len, 1024, prefill.data());
    auto &layers = rows_[id];
    layers.assign(2, {});
    for (int l = 0; l < 2; ++l)
      layers[static_cast<std::size_t>(l)].assign(prefill.begin() + l * len * 576,
                                                 prefill.begin() + (l + 1) * len * 576);
  }

  void append(std::uint64_t id) {
    std::vector<bf16_t> token(2 * 576);
    dhs::test::fillRandom(rng_, token.data(), token.size());
    rt->append(id, token.data());
    for (int l = 0; l < 2; ++l) {
      auto &layer = rows_.at(id)[static_cast<std::size_t>(l)];
      layer.insert(layer.end(), token.begin() + l * 576, token.begin() + (l + 1) * 576);
    }
  }

  void forget(std::uint64_t id) { rows_.erase(id); }

  /// Loads the step, admits request 1 with `len1` rows and request 2 with
  /// `len2`, and runs one step over both.
  void startTwo(std::int64_t len1, std::int64_t len2) {
    load();
    admit(1, len1);
    admit(2, len2);
    stepAndCheck({1, 2});
  }

  /// One step over `ids`; outputs compared with the oracle (bit for bit on
  /// the CPU, within bf16 tolerance on CUDA). Throws what the step throws.
  void stepAndCheck(const std::vector<std::uint64_t> &ids) {
    const ProblemShape &s = rt->shape();
    const std::int64_t lanes = static_cast<std::int64_t>(ids.size());
    const std::int64_t perLane = s.queries * s.topk;
    std::vector<std::int32_t> sel(static_cast<std::size_t>(2 * lanes * perLane));
    for (int g = 0; g < 2; ++g)
      for (std::int64_t b = 0; b < lanes; ++b) {
        const std::int64_t len = length(ids[static_cast<std::size_t>(b)]);
        for (std::int64_t i = 0; i < perLane; ++i)
          sel[static_cast<std::size_t>((g * lanes + b) * perLane + i)] =
              rng_() % 6 == 0 ? -1
                              : static_cast<std::int32_t>(rng_() % static_cast<std::uint64_t>(len));
      }
    const std::int64_t qPerLayer = lanes * s.queries * s.heads * s.qkDim;
    const std::int64_t oPerLayer = lanes * s.queries * s.heads * s.vDim;
    std::vector<bf16_t> q(static_cast<std::size_t>(2 * qPerLayer)),
        out(static_cast<std::size_t>(2 * oPerLayer), kBf16Poison);
    dhs::test::fillRandom(rng_, q.data(), q.size());
    rt->step(ids.data(), lanes, sel.data(), q.data(), out.data());
    for (int l = 0; l < 2; ++l) {
      std::vector<bf16_t> expected = dhs::test::oracleLayer(
          s, lanes, sel.data() + l * lanes * perLane, q.data() + l * qPerLayer,
          [&](std::int64_t b, std::int32_t r) {
            return rows_.at(ids[static_cast<std::size_t>(b)])[static_cast<std::size_t>(l)].data() +
                   static_cast<std::size_t>(r) * 576;
          });
      std::vector<bf16_t> actual(out.begin() + l * oPerLayer, out.begin() + (l + 1) * oPerLayer);
      if (backend_ == BackendKind::Cpu) {
        REQUIRE(actual == expected);
      } else {
        Comparison c = compareOutputs(actual, expected);
        REQUIRE(c.nonFinite == 0);
        REQUIRE(c.relativeError < 1e-2);
      }
    }
  }

  /// Every row of every request is what was written, and resident slots
  /// hold their rows.
  void checkAll() {
    rt->checkInvariants();
    for (const auto &[id, layers] : rows_)
      for (int l = 0; l < 2; ++l)
        for (std::int64_t r = 0; r < length(id); ++r) {
          std::vector<std::uint8_t> row = rt->hostRow(id, l, r);
          REQUIRE(std::memcmp(row.data(),
                              layers[static_cast<std::size_t>(l)].data() +
                                  static_cast<std::size_t>(r) * 576,
                              1152) == 0);
        }
  }

  std::int64_t length(std::uint64_t id) const {
    return static_cast<std::int64_t>(rows_.at(id)[0].size()) / 576;
  }

  std::unique_ptr<Runtime> rt;

private:
  BackendKind backend_;
  RuntimeConfig config_;
  std::mt19937_64 rng_{dhs::test::freshSeed() + 1300};
  std::map<std::uint64_t, std::vector<std::vector<bf16_t>>> rows_;
};

/// True when `backend` can run here (CUDA needs a GPU; it says it skips).
bool usable(BackendKind backend) {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: built with DHS_FAULT_INJECTION=OFF");
    return false;
  }
  return backend == BackendKind::Cpu || dhs::test::gpuOrSkip();
}

const char *nameOf(BackendKind backend) { return backend == BackendKind::Cpu ? "cpu" : "cuda"; }

/// Disarms everything when a case ends, however it ends.
struct Disarm {
  ~Disarm() { faults::disarmAll(); }
};

void hostAllocationAtLoad(BackendKind backend) {
  Disarm disarm;
  Session s(backend);
  faults::arm(Fault::HostAlloc);
  CHECK_THROWS_MATCHES(s.load(), CapacityError,
                       Catch::Matchers::Predicate<CapacityError>([](const CapacityError &e) {
                         return std::string(e.what()).find("(injected fault)") != std::string::npos;
                       }));
  CHECK(faults::failed(Fault::HostAlloc) == 1);
  CHECK_FALSE(s.rt->stepLoaded());
  // The runtime loads the step once memory is there, and serves.
  s.load();
  s.admit(1, 300);
  s.stepAndCheck({1});
  s.checkAll();
}

/// The admission of `id` failed: it is not admitted, and the admitted
/// requests and the tiers' use are as `before`.
void checkRefused(Session &s, const RuntimeStats &before, std::uint64_t id) {
  s.forget(id);
  CHECK_FALSE(s.rt->admitted(id));
  const RuntimeStats after = s.rt->stats();
  CHECK(after.admittedRequests == before.admittedRequests);
  CHECK(after.hbmBytesUsed == before.hbmBytesUsed);
  CHECK(after.hostBytesUsed == before.hostBytesUsed);
}

void deviceAllocationAtAdmission(BackendKind backend) {
  Disarm disarm;
  Session s(backend);
  s.startTwo(500, 200);
  const RuntimeStats before = s.rt->stats();
  // The draft rings of request 3 do not fit in HBM: admission refused,
  // nothing changed.
  faults::arm(Fault::DeviceAlloc);
  CHECK_THROWS_WITH(s.admit(3, 100), Catch::Contains("(injected fault)"));
  checkRefused(s, before, 3);
  s.stepAndCheck({2, 1});
  s.admit(3, 100); // once memory is free again
  s.stepAndCheck({3, 1, 2});
  s.checkAll();
}

/// A failed step left no trace (no step, selection or promotion counted, no
/// step open), and the runtime keeps serving: appends to `request` and exact
/// steps, then every check.
void checkAbandonedAndServing(Session &s, const RuntimeStats &before, std::uint64_t request) {
  const RuntimeStats after = s.rt->stats();
  CHECK(after.steps == before.steps);
  CHECK(after.totals.promoted == before.totals.promoted);
  CHECK(after.totals.selected == before.totals.selected);
  CHECK_FALSE(s.rt->inStep());
  for (int i = 0; i < 3; ++i) {
    s.append(request);
    s.stepAndCheck({2, 1});
  }
  s.checkAll();
}

void failedLaunch(BackendKind backend) {
  Disarm disarm;
  Session s(backend);
  s.startTwo(600, 400);
  const RuntimeStats before = s.rt->stats();
  // The second layer's launch fails: the step fails whole, nothing is
  // promoted or counted, and the next steps run exactly.
  faults::arm(Fault::Launch, /*skip=*/1);
  CHECK_THROWS_WITH(s.stepAndCheck({1, 2}), Catch::Contains("(injected fault)"));
  CHECK(faults::failed(Fault::Launch) == 1);
  checkAbandonedAndServing(s, before, /*request=*/1);
}

/// A layer's launch fails in a step made part by part: the step is
/// abandoned (some of the layer's launches may be queued, so it cannot run
/// the layer again), and the runtime keeps serving.
void failedLaunchInParts(BackendKind backend) {
  Disarm disarm;
  Session s(backend);
  s.startTwo(600, 400);
  const RuntimeStats before = s.rt->stats();
  const ProblemShape &shape = s.rt->shape();
  const std::uint64_t ids[2] = {1, 2};
  std::vector<std::int32_t> none(static_cast<std::size_t>(2 * shape.queries * shape.topk), -1);
  std::vector<bf16_t> q(static_cast<std::size_t>(2 * shape.queries * shape.heads * shape.qkDim)),
      out(static_cast<std::size_t>(2 * shape.queries * shape.heads * shape.vDim));
  std::mt19937_64 rng(dhs::test::freshSeed() + 1310);
  dhs::test::fillRandom(rng, q.data(), q.size());
  s.rt->beginStep(ids, 2);
  s.rt->selectGroup(0, none.data());
  s.rt->selectGroup(1, none.data());
  faults::arm(Fault::Launch);
  CHECK_THROWS_WITH(s.rt->attendLayer(0, q.data(), out.data()),
                    Catch::Contains("(injected fault)"));
  CHECK(faults::failed(Fault::Launch) == 1);
  CHECK_FALSE(s.rt->inStep());
  CHECK_THROWS_AS(s.rt->attendLayer(1, q.data(), out.data()), StateError);
  checkAbandonedAndServing(s, before, /*request=*/1);
}

/// A CPU attention worker thread fails (its scratch allocation): the error
/// reaches the caller as a CapacityError instead of terminating the process,
/// the step is abandoned whole, and the runtime keeps serving.
void failedAttentionWorker() {
  Disarm disarm;
  Session s(BackendKind::Cpu, /*checks=*/true, /*cpuThreads=*/4);
  s.startTwo(600, 400);
  const RuntimeStats before = s.rt->stats();
  // The first layer's (request, query) pairs (the step's batch of 4: 2
  // lanes and 2 of padding) run on 4 workers; the second to reach its
  // scratch fails.
  faults::arm(Fault::HostAlloc, /*skip=*/1);
  CHECK_THROWS_MATCHES(s.stepAndCheck({1, 2}), CapacityError,
                       Catch::Matchers::Predicate<CapacityError>([](const CapacityError &e) {
                         const std::string what = e.what();
                         return what.find(
                                    "out of host memory for layer 0's attention on the CPU") !=
                                    std::string::npos &&
                                what.find("(injected fault)") != std::string::npos;
                       }));
  CHECK(faults::failed(Fault::HostAlloc) == 1);
  CHECK(faults::reached(Fault::HostAlloc) >= 2);
  CHECK(faults::reached(Fault::HostAlloc) <= 4);
  checkAbandonedAndServing(s, before, /*request=*/2);
}

void failedCopies(BackendKind backend) {
  Disarm disarm;
  Session s(backend);
  s.startTwo(700, 300);
  // A transient failure: the append's copy into HBM is retried before the
  // next step reads the row.
  faults::arm(Fault::Copy);
  s.append(1);
  CHECK(faults::failed(Fault::Copy) == 1);
  s.stepAndCheck({1, 2});
  s.checkAll();
  // Promotions whose copy fails: the step's outputs are complete; the
  // copies are retried before the next step.
  faults::arm(Fault::Copy);
  s.stepAndCheck({2, 1});
  CHECK(faults::failed(Fault::Copy) == 2);
  s.stepAndCheck({1, 2});
  s.checkAll();
  // A lasting failure: appends and admissions go on (the host store has
  // the rows), steps and checks fail with a device error naming the
  // copies, and all is well once copies work again.
  faults::arm(Fault::Copy, 0, 1000);
  s.append(2);
  s.admit(3, 50);
  CHECK_THROWS_AS(s.stepAndCheck({1, 2, 3}), DeviceError);
  CHECK_THROWS_WITH(s.stepAndCheck({1}),
                    Catch::Contains("row copies into HBM failed and still fail when retried") &&
                        Catch::Contains("(injected fault)"));
  CHECK_THROWS_AS(s.rt->checkInvariants(), DeviceError);
  faults::disarmAll();
  s.stepAndCheck({3, 2, 1});
  s.append(3);
  s.stepAndCheck({1, 3});
  s.checkAll();
  s.rt->finish(2);
  s.forget(2);
  s.stepAndCheck({1, 3});
  s.checkAll();
}

/// The wait for the work submitted before an admission or an append fails
/// (where a kernel's asynchronous error surfaces on CUDA): the call fails
/// with a device error before any change, and the runtime keeps serving.
void failedWait(BackendKind backend) {
  Disarm disarm;
  Session s(backend);
  s.startTwo(500, 300);
  const RuntimeStats before = s.rt->stats();
  faults::arm(Fault::Wait);
  CHECK_THROWS_AS(s.admit(3, 200), DeviceError);
  CHECK(faults::failed(Fault::Wait) == 1);
  checkRefused(s, before, 3);
  // An append of one token to request 1: its length and rows unchanged.
  faults::arm(Fault::Wait);
  std::vector<bf16_t> token(2 * 576, 0x3f80);
  CHECK_THROWS_WITH(s.rt->append(1, token.data()), Catch::Contains("(injected fault)"));
  CHECK(s.rt->historyLen(1) == s.length(1));
  s.checkAll();
  // The same calls succeed once the device's work does.
  s.admit(3, 200);
  s.append(1);
  s.stepAndCheck({1, 2, 3});
  s.checkAll();
}

void corruptedCopy(BackendKind backend) {
  Disarm disarm;
  // With checks on, the corrupted slot is found by the copy check at once.
  {
    Session s(backend);
    s.load();
    s.admit(1, 100);
    faults::arm(Fault::CorruptCopy);
    CHECK_THROWS_AS(s.append(1), InvariantError);
  }
  faults::disarmAll();
  // Without checks, by the full check the engine asks for.
  Session s(backend, /*checks=*/false);
  s.load();
  s.admit(1, 100);
  faults::arm(Fault::CorruptCopy);
  s.append(1);
  CHECK_THROWS_WITH(s.rt->checkInvariants(), Catch::Contains("invariant violated") &&
                                                 Catch::Contains("differs from its host copy"));
}

void finishedByAnotherThread(BackendKind backend) {
  Session s(backend);
  s.load();
  std::mutex engine; // the engine serializes its calls, as dhs_runtime.h asks
  {
    std::lock_guard<std::mutex> lock(engine);
    s.admit(1, 300);
    s.admit(2, 300);
    s.stepAndCheck({1, 2});
  }
  // What the other thread throws comes back here as this case's failure
  // (escaping the thread, it would abort the whole test binary). On CUDA
  // the thread starts without the runtime's context current.
  std::exception_ptr failure;
  std::thread other([&] {
    try {
      std::lock_guard<std::mutex> lock(engine);
      s.rt->finish(1);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  other.join();
  REQUIRE_NOTHROW(failure ? std::rethrow_exception(failure) : void());
  std::lock_guard<std::mutex> lock(engine);
  CHECK_THROWS_AS(s.stepAndCheck({1, 2}), UnknownRequestError);
  std::vector<bf16_t> token(2 * 576, 0x3f80);
  CHECK_THROWS_AS(s.rt->append(1, token.data()), UnknownRequestError);
  CHECK_THROWS_AS(s.rt->appendDraft(1, 0, 1, token.data()), UnknownRequestError);
  CHECK_THROWS_AS(s.rt->finish(1), UnknownRequestError);
  s.forget(1);
  // Request 2 is untouched and the runtime serves; the id can come back.
  s.stepAndCheck({2});
  s.admit(1, 20);
  s.stepAndCheck({1, 2});
  s.checkAll();
}

} // namespace

TEST_CASE("fault injection: armed faults fire once, counted, and disarm", "[faults]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  Disarm disarm;
  CHECK_FALSE(faults::anyArmed());
  faults::arm(Fault::Launch, 2, 1);
  CHECK(faults::anyArmed());
  CHECK_FALSE(DHS_FAULT(Launch));
  CHECK_FALSE(DHS_FAULT(Launch));
  CHECK(DHS_FAULT(Launch));
  CHECK_FALSE(DHS_FAULT(Launch));
  CHECK_FALSE(DHS_FAULT(Copy));
  CHECK(faults::reached(Fault::Launch) == 4);
  CHECK(faults::failed(Fault::Launch) == 1);
  faults::disarmAll();
  CHECK_FALSE(faults::anyArmed());
  CHECK(faults::reached(Fault::Launch) == 0);
  CHECK(std::string(faultName(Fault::DeviceAlloc)) == "device allocation");
}

TEST_CASE("fault matrix on the CPU backend", "[faults]") {
  if (!usable(BackendKind::Cpu))
    return;
  SECTION("host allocation at load") { hostAllocationAtLoad(BackendKind::Cpu); }
  SECTION("device allocation at admission") { deviceAllocationAtAdmission(BackendKind::Cpu); }
  SECTION("a failed launch") { failedLaunch(BackendKind::Cpu); }
  SECTION("a failed launch in a step made in parts") { failedLaunchInParts(BackendKind::Cpu); }
  SECTION("a failed attention worker thread") { failedAttentionWorker(); }
  SECTION("failed copies into HBM") { failedCopies(BackendKind::Cpu); }
  SECTION("a failed wait for submitted work") { failedWait(BackendKind::Cpu); }
  SECTION("a silently corrupted copy") { corruptedCopy(BackendKind::Cpu); }
  SECTION("a request finished by another thread") { finishedByAnotherThread(BackendKind::Cpu); }
}

TEST_CASE("fault matrix on CUDA", "[faults][cuda][gpu]") {
  if (!usable(BackendKind::Cuda))
    return;
  INFO(nameOf(BackendKind::Cuda));
  SECTION("pinned host allocation at load") { hostAllocationAtLoad(BackendKind::Cuda); }
  SECTION("HBM exhausted at admission") { deviceAllocationAtAdmission(BackendKind::Cuda); }
  SECTION("a failed launch") { failedLaunch(BackendKind::Cuda); }
  SECTION("a failed launch in a step made in parts") { failedLaunchInParts(BackendKind::Cuda); }
  SECTION("failed copies into HBM") { failedCopies(BackendKind::Cuda); }
  SECTION("a failed wait for submitted work") { failedWait(BackendKind::Cuda); }
  SECTION("a silently corrupted copy") { corruptedCopy(BackendKind::Cuda); }
  SECTION("a request finished by another thread") { finishedByAnotherThread(BackendKind::Cuda); }
  SECTION("nvJitLink fails while loading") {
    Disarm disarm;
    Session s(BackendKind::Cuda);
    faults::arm(Fault::JitLink);
    CHECK_THROWS_WITH(s.load(), Catch::Contains("(injected fault)"));
    CHECK_FALSE(s.rt->stepLoaded());
    s.load();
    s.admit(1, 100);
    s.stepAndCheck({1});
  }
}

TEST_CASE("fault injection: nvJitLink failures are errors naming the module", "[faults][jitlink]") {
  const JitLink &jitLink = JitLink::instance();
  if (!faults::kCompiledIn || !jitLink.available()) {
    WARN("SKIPPED: fault injection off or nvJitLink unavailable");
    return;
  }
  Disarm disarm;
  faults::arm(Fault::JitLink);
  CHECK_THROWS_WITH(jitLink.linkPtx(dhs::test::kTinyPtx, "sm_90a", "tiny.ptx"),
                    Catch::Contains("cannot link tiny.ptx for sm_90a") &&
                        Catch::Contains("(injected fault)"));
  // The next link works.
  CHECK(jitLink.linkPtx(dhs::test::kTinyPtx, "sm_90a", "tiny.ptx").cubin.size() > 64);
}

namespace {

/// The C API cases' runtime: two layers of the default step, checks on.
dhs_runtime_config capiConfig() {
  dhs_runtime_config c = dhs::api::defaultConfig();
  c.layers = 2;
  c.host_rows = 4096;
  c.check_invariants = 1;
  return c;
}

/// A step of request `id` selecting its row 0 in both layers, constant
/// queries.
struct RowZeroStep {
  std::uint64_t id;
  std::vector<std::int32_t> rows = [] {
    std::vector<std::int32_t> r(2 * 256, -1);
    r[0] = r[256] = 0;
    return r;
  }();
  std::vector<bf16_t> q = std::vector<bf16_t>(2 * 16 * 576, 0x3f80);
  std::vector<bf16_t> out = std::vector<bf16_t>(2 * 16 * 512);
  dhs_status run(dhs_runtime *rt) {
    return dhs_step_run(rt, &id, 1, rows.data(), q.data(), out.data(), DHS_MEMORY_HOST);
  }
};

} // namespace

TEST_CASE("a load that fails at its last allocation leaves no step loaded, and loads again",
          "[faults][capi]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  Disarm disarm;
  const dhs_runtime_config c = capiConfig();
  const std::string step = Session::step();
  // How many host allocation sites a load reaches (the step tables' last).
  std::uint64_t sites = 0;
  {
    dhs_runtime *counted = nullptr;
    REQUIRE(dhs_runtime_create(&c, &counted) == DHS_OK);
    faults::arm(Fault::HostAlloc, /*skip=*/1u << 30);
    REQUIRE(dhs_runtime_load_step(counted, step.c_str()) == DHS_OK);
    sites = faults::reached(Fault::HostAlloc);
    faults::disarmAll();
    dhs_runtime_destroy(counted);
  }
  REQUIRE(sites >= 1);
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  faults::arm(Fault::HostAlloc, static_cast<std::uint32_t>(sites - 1));
  CHECK(dhs_runtime_load_step(rt, step.c_str()) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK(faults::failed(Fault::HostAlloc) == 1);
  faults::disarmAll();
  // Before: the storage was in, the rings and tables not; the next call
  // that needed them crashed.
  CHECK(dhs_request_admit(rt, 5, 0, 100, nullptr) == DHS_ERROR_NOT_LOADED);
  REQUIRE(dhs_runtime_load_step(rt, step.c_str()) == DHS_OK);
  REQUIRE(dhs_request_admit(rt, 5, 0, 100, nullptr) == DHS_OK);
  std::vector<bf16_t> token(2 * 576, 0x3f80);
  REQUIRE(dhs_request_append(rt, 5, token.data()) == DHS_OK);
  RowZeroStep step5{5};
  CHECK(step5.run(rt) == DHS_OK);
  CHECK(dhs_runtime_check(rt) == DHS_OK);
  dhs_runtime_destroy(rt);
}

TEST_CASE("fault injection through the C API: statuses and a runtime that keeps serving",
          "[faults][capi]") {
  if (!faults::kCompiledIn) {
    WARN("SKIPPED: fault injection is not compiled in (DHS_FAULT_INJECTION)");
    return;
  }
  Disarm disarm;
  dhs_runtime_config c = capiConfig();
  c.draft_window = 2;
  dhs_runtime *rt = nullptr;
  REQUIRE(dhs_runtime_create(&c, &rt) == DHS_OK);
  const std::string step = Session::step();
  faults::arm(Fault::HostAlloc);
  CHECK(dhs_runtime_load_step(rt, step.c_str()) == DHS_ERROR_OUT_OF_MEMORY);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("(injected fault)"));
  REQUIRE(dhs_runtime_load_step(rt, step.c_str()) == DHS_OK);
  faults::arm(Fault::DeviceAlloc);
  CHECK(dhs_request_admit(rt, 5, 0, 100, nullptr) == DHS_ERROR_OUT_OF_MEMORY);
  REQUIRE(dhs_request_admit(rt, 5, 0, 100, nullptr) == DHS_OK);
  std::vector<bf16_t> token(2 * 576, 0x3f80);
  REQUIRE(dhs_request_append(rt, 5, token.data()) == DHS_OK);
  RowZeroStep step5{5};
  faults::arm(Fault::Launch);
  CHECK(step5.run(rt) == DHS_ERROR_DEVICE);
  CHECK_THAT(std::string(dhs_last_error()),
             Catch::Contains("dhs_step_run") && Catch::Contains("(injected fault)"));
  faults::arm(Fault::Copy, 0, 100);
  REQUIRE(dhs_request_append(rt, 5, token.data()) == DHS_OK);
  CHECK(step5.run(rt) == DHS_ERROR_DEVICE);
  CHECK(dhs_runtime_check(rt) == DHS_ERROR_DEVICE);
  faults::disarmAll();
  CHECK(step5.run(rt) == DHS_OK);
  CHECK(dhs_runtime_check(rt) == DHS_OK);
  faults::arm(Fault::CorruptCopy);
  CHECK(dhs_request_append(rt, 5, token.data()) == DHS_ERROR_INVARIANT);
  CHECK_THAT(std::string(dhs_last_error()), Catch::Contains("invariant violated"));
  dhs_runtime_destroy(rt);
}
