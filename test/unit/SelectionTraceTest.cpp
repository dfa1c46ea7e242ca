//===- SelectionTraceTest.cpp - DRR generator and trace files -------------===//

#include "TestUtil.h"

#include "runtime/core/Error.h"
#include "runtime/residency/Residency.h"
#include "tools/dhs-sim/SelectionTrace.h"

#include <catch2/catch.hpp>

#include <set>
#include <sstream>

using namespace dhs::runtime;
using namespace dhs::tools::sim;
using dhs::test::freshSeed;

TEST_CASE("DRR selections: size, range, anchors, determinism", "[trace]") {
  const std::uint64_t seed = freshSeed() + 300;
  INFO("DHS_TEST_SEED=" << seed - 300);
  DrrParams params;
  params.topk = 256;
  params.sinks = 4;
  params.window = 16;
  DrrGenerator a(params, seed), b(params, seed), other(params, seed + 1);
  bool differs = false;
  for (std::int64_t len : {100, 300, 301, 302, 1000, 1000, 5000}) {
    const std::vector<std::int32_t> rows = a.next(len);
    CHECK(b.next(len) == rows);
    differs = differs || other.next(len) != rows;
    const std::set<std::int32_t> distinct(rows.begin(), rows.end());
    REQUIRE(rows.size() == static_cast<std::size_t>(std::min<std::int64_t>(256, len)));
    REQUIRE(distinct.size() == rows.size());
    CHECK(*distinct.begin() >= 0);
    CHECK(*distinct.rbegin() < len);
    for (std::int32_t sink = 0; sink < 4; ++sink)
      CHECK(distinct.count(sink));
    for (std::int64_t newest = len - 16; newest < len; ++newest)
      CHECK(distinct.count(static_cast<std::int32_t>(newest)));
  }
  CHECK(differs);
  CHECK_THROWS_WITH(a.next(10), Catch::Contains("the context shrank"));
  params.f = 1.5;
  CHECK_THROWS_WITH(DrrGenerator(params, 1), Catch::Contains("f must lie in [0, 1]"));
  params = DrrParams();
  params.window = 4000;
  CHECK_THROWS_WITH(params.validate(), Catch::Contains("must lie in [0, topk 2048]"));
}

TEST_CASE("DRR statistics: overlap a + (1 - a)(1 - f), calibrated LRU misses", "[trace]") {
  const std::uint64_t seed = freshSeed() + 310;
  INFO("DHS_TEST_SEED=" << seed - 310);
  DrrParams params; // K = 2048, f = 0.57, q = 0.96, gamma = 1.8
  const double a = (16.0 + 64.0) / 2048.0;
  const double expected = a + (1 - a) * (1 - params.f);
  // An LRU buffer of 4096 slots (nothing else resident) over 600 steps.
  const std::int64_t context = 32768;
  ResidencyController c(ResidencyConfig::fixedBudget(1, 4096, context + 600, 0, 0, 4096));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(context, context + 600, copies);
  DrrGenerator drr(params, seed);
  std::vector<std::int32_t> slots(2048);
  double overlap = 0;
  std::int64_t selected = 0, fetched = 0;
  for (int t = 0; t < 600; ++t) {
    const std::vector<std::int32_t> &rows = drr.next(c.historyLen(r));
    c.beginStep();
    c.resolve(0, &r, 1, rows.data(), 1, 2048, slots.data());
    c.endStep(copies);
    c.append(r, copies);
    if (t >= 200) {
      overlap += drr.lastOverlap();
      selected += c.lastStep().selected;
      fetched += c.lastStep().fetched;
    }
  }
  overlap /= 400;
  const double miss = static_cast<double>(fetched) / static_cast<double>(selected);
  INFO("overlap " << overlap << " (expected " << expected << "), miss " << miss);
  CHECK(std::abs(overlap - expected) < 0.02);
  CHECK(miss > 0.10);
  CHECK(miss < 0.18);
}

TEST_CASE("trace files round-trip and report bad lines", "[trace]") {
  std::vector<TraceEvent> events(6);
  events[0].kind = TraceEvent::Admit;
  events[0].id = 7;
  events[0].a = 100;
  events[0].b = 200;
  events[1].kind = TraceEvent::Select;
  events[1].id = 7;
  events[1].a = 1;
  events[1].b = 0;
  events[1].rows = {5, -1, 99};
  events[2].kind = TraceEvent::Step;
  events[3].kind = TraceEvent::Append;
  events[3].id = 7;
  events[3].a = 3;
  events[4].kind = TraceEvent::Append;
  events[4].id = 7;
  events[4].a = 1;
  events[5].kind = TraceEvent::Finish;
  events[5].id = 7;
  std::ostringstream out;
  TraceWriter writer(out);
  for (const TraceEvent &e : events)
    writer.write(e);
  CHECK(out.str() == "dhs-trace 1\nadmit 7 100 200\nselect 7 1 0 5 -1 99\nstep\nappend 7 3\n"
                     "append 7\nfinish 7\n");
  std::istringstream in("dhs-trace 1\n# comment\n\n" + out.str().substr(12));
  TraceReader reader(in, "t.trace");
  TraceEvent e;
  for (const TraceEvent &want : events) {
    REQUIRE(reader.next(e));
    CHECK(e.kind == want.kind);
    CHECK(e.id == want.id);
    CHECK(e.a == want.a);
    CHECK(e.b == want.b);
    CHECK(e.rows == want.rows);
  }
  CHECK_FALSE(reader.next(e));

  auto error = [](const std::string &text) {
    std::istringstream bad(text);
    try {
      TraceReader r(bad, "bad.trace");
      TraceEvent ev;
      while (r.next(ev)) {
      }
    } catch (const Error &err) {
      return std::string(err.what());
    }
    return std::string();
  };
  CHECK_THAT(error("nope\n"), Catch::Contains("bad.trace:1: not a dhs trace"));
  CHECK_THAT(error("dhs-trace 1\nstep\nfly 3\n"),
             Catch::Contains("bad.trace:3: unknown event 'fly'"));
  CHECK_THAT(error("dhs-trace 1\nadmit 1 10\n"), Catch::Contains(":2: missing maximum context"));
  CHECK_THAT(error("dhs-trace 1\nadmit 1 10 5\n"), Catch::Contains("length <= max"));
  CHECK_THAT(error("dhs-trace 1\nselect 1 0 0 4 x\n"), Catch::Contains("bad row id 'x'"));
  CHECK_THAT(error("dhs-trace 1\nselect 1 0 0 -2\n"), Catch::Contains("bad row id '-2'"));
  CHECK_THAT(error("dhs-trace 1\nappend 1 0\n"), Catch::Contains("the count must be positive"));
  CHECK_THAT(error("dhs-trace 1\nstep now\n"), Catch::Contains("unexpected 'now'"));
  CHECK_THAT(error("dhs-trace 1\nfinish -4\n"), Catch::Contains("negative request id"));
}
