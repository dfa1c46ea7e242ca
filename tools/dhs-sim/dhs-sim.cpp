//===- dhs-sim.cpp - Replay selection traces through residency policies ---===//
//
// dhs-sim [options]
//
// Feeds one selection trace to residency controllers of two policies at once
// (adaptive optional residency, and a fixed HiSparse-style hot buffer per
// request), with the same HBM slot pool, and reports per step: admitted
// requests, selected rows, rows fetched from the host (% of selected), HBM
// bytes used, and the optional budget. No attention math, no GPU.
//
// Traces: the DRR generator (docs/runtime.md, "dhs-sim") in a
// load-step scenario (a few requests, then many arrivals, later departures),
// or a trace file (format in tools/dhs-sim/SelectionTrace.h). Before the scenario
// it prints the generator's calibration check: the miss rate of a 4096-slot
// LRU buffer per request at K = 2048 (target ~14%).
//
// Exit status: 0, or 1 on an error or a failed --check, 2 on bad usage.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Error.h"
#include "runtime/residency/Residency.h"
#include "tools/CommandLine.h"
#include "tools/dhs-sim/Options.h"
#include "tools/dhs-sim/SelectionTrace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace dhs::runtime;
using namespace dhs::tools;
using namespace dhs::tools::sim;

namespace {

//===----------------------------------------------------------------------===//
// Calibration: the miss rate of an LRU buffer per request.
//===----------------------------------------------------------------------===//

struct Calibration {
  std::int32_t buffer;
  double miss;
  double overlap;
};

/// One request, context 32K growing by one per step, 1200 steps, a fixed
/// LRU buffer of `buffer` slots and nothing else resident (no protected
/// window): misses averaged after step 300, as in the published calibration
/// of the DRR model (docs/runtime.md, "dhs-sim").
Calibration calibrate(const DrrParams &params, std::int32_t buffer, std::uint64_t seed) {
  const std::int64_t context = 32768, steps = 1200, skip = 300;
  ResidencyController c(ResidencyConfig::fixedBudget(1, buffer, context + steps, 0, 0, buffer));
  std::vector<RowCopy> copies;
  const std::int32_t r = c.admit(context, context + steps, copies);
  DrrGenerator drr(params, seed);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(params.topk));
  std::int64_t selected = 0, fetched = 0;
  double overlap = 0.0;
  for (std::int64_t t = 0; t < steps; ++t) {
    const std::vector<std::int32_t> &rows = drr.next(c.historyLen(r));
    c.beginStep();
    c.resolve(0, &r, 1, rows.data(), 1, static_cast<std::int64_t>(rows.size()), slots.data());
    c.endStep(copies);
    copies.clear();
    if (t >= skip) {
      selected += c.lastStep().selected;
      fetched += c.lastStep().fetched;
      overlap += drr.lastOverlap();
    }
    c.append(r, copies);
    copies.clear();
  }
  return {buffer, static_cast<double>(fetched) / static_cast<double>(selected),
          overlap / static_cast<double>(steps - skip)};
}

//===----------------------------------------------------------------------===//
// The simulation: one trace, two policies.
//===----------------------------------------------------------------------===//

/// One step of one policy.
struct StepRecord {
  std::int64_t step = 0;
  std::int32_t admitted = 0;
  std::int64_t selected = 0, fetched = 0, promoted = 0, evicted = 0;
  std::int64_t usedSlots = 0;    // all simulated groups
  std::int64_t budget = 0;       // optional budget, slots per group
  std::int64_t optionalUsed = 0; // all simulated groups
  std::int64_t refused = 0;      // admissions refused so far
};

/// A policy under simulation.
struct Policy {
  std::string name;
  ResidencyController controller;
  std::map<std::uint64_t, std::int32_t> index; // admitted requests
  std::int64_t refused = 0;
  std::vector<StepRecord> records;

  Policy(std::string n, const ResidencyConfig &config) : name(std::move(n)), controller(config) {}
};

class Simulation {
public:
  Simulation(std::vector<ResidencyConfig> configs, std::vector<std::string> names) {
    for (std::size_t i = 0; i < configs.size(); ++i)
      policies_.push_back(std::make_unique<Policy>(names[i], configs[i]));
    groups_ = configs.front().groups;
  }

  std::vector<std::unique_ptr<Policy>> &policies() { return policies_; }

  void admit(std::uint64_t id, std::int64_t historyLen, std::int64_t maxContext) {
    if (!known_.insert(id).second)
      throw Error("request " + std::to_string(id) + " arrives twice");
    for (auto &p : policies_) {
      if (p->index.count(id))
        throw Error("request " + std::to_string(id) + " admitted twice");
      std::vector<RowCopy> copies;
      try {
        p->index[id] = p->controller.admit(historyLen, maxContext, copies);
      } catch (const CapacityError &) {
        ++p->refused;
      }
    }
  }

  void select(std::uint64_t id, std::int64_t group, std::int64_t query,
              const std::vector<std::int32_t> &rows) {
    requireKnown(id, "a selection");
    if (group >= groups_)
      throw Error("a selection for group " + std::to_string(group) + ", but " +
                  std::to_string(groups_) + " groups are simulated (--groups)");
    auto &slot = pending_[id];
    slot.resize(static_cast<std::size_t>(groups_));
    auto &queries = slot[static_cast<std::size_t>(group)];
    if (static_cast<std::int64_t>(queries.size()) <= query)
      queries.resize(static_cast<std::size_t>(query + 1));
    queries[static_cast<std::size_t>(query)] = rows;
    maxQueries_ = std::max(maxQueries_, query + 1);
    maxRows_ = std::max(maxRows_, static_cast<std::int64_t>(rows.size()));
  }

  void step() {
    for (auto &p : policies_) {
      std::vector<std::int32_t> batch;
      std::vector<std::uint64_t> ids;
      for (auto &[id, groups] : pending_) {
        auto it = p->index.find(id);
        if (it == p->index.end())
          continue; // refused by this policy
        batch.push_back(it->second);
        ids.push_back(id);
      }
      const std::int64_t Q = std::max<std::int64_t>(1, maxQueries_);
      const std::int64_t K = std::max<std::int64_t>(1, maxRows_);
      std::vector<std::int32_t> rows(batch.size() * static_cast<std::size_t>(Q * K));
      std::vector<std::int32_t> slots(rows.size());
      p->controller.beginStep();
      for (std::int32_t g = 0; g < groups_; ++g) {
        std::fill(rows.begin(), rows.end(), -1);
        for (std::size_t b = 0; b < ids.size(); ++b) {
          const auto &groups = pending_[ids[b]];
          if (groups[static_cast<std::size_t>(g)].empty())
            continue;
          const auto &queries = groups[static_cast<std::size_t>(g)];
          for (std::size_t q = 0; q < queries.size(); ++q)
            std::copy(queries[q].begin(), queries[q].end(),
                      rows.begin() + static_cast<std::ptrdiff_t>((b * Q + q) * K));
        }
        try {
          p->controller.resolve(g, batch.data(), static_cast<std::int64_t>(batch.size()),
                                rows.data(), Q, K, slots.data());
        } catch (const InputError &error) {
          // Lanes are the batch order of this step's requests.
          std::string message = error.what();
          throw Error("step " + std::to_string(step_) + ", group " + std::to_string(g) + ": " +
                      message + " (lanes: requests" +
                      [&] {
                        std::string list;
                        for (std::uint64_t id : ids)
                          list += " " + std::to_string(id);
                        return list;
                      }() +
                      ")");
        }
      }
      std::vector<RowCopy> copies;
      p->controller.endStep(copies);
      StepRecord record;
      record.step = step_;
      record.admitted = p->controller.liveCount();
      const ResidencyStepStats &s = p->controller.lastStep();
      record.selected = s.selected;
      record.fetched = s.fetched;
      record.promoted = s.promoted;
      record.evicted = s.evicted;
      for (std::int32_t g = 0; g < groups_; ++g) {
        GroupOccupancy o = p->controller.occupancy(g);
        record.usedSlots += o.used;
        record.optionalUsed += o.optionalUsed;
      }
      record.budget = p->controller.optionalBudget();
      record.refused = p->refused;
      p->records.push_back(record);
    }
    pending_.clear();
    maxQueries_ = maxRows_ = 0;
    ++step_;
  }

  void append(std::uint64_t id, std::int64_t count) {
    requireKnown(id, "an append");
    for (auto &p : policies_) {
      auto it = p->index.find(id);
      if (it == p->index.end())
        continue;
      std::vector<RowCopy> copies;
      for (std::int64_t i = 0; i < count; ++i)
        p->controller.append(it->second, copies);
    }
  }

  void finish(std::uint64_t id) {
    requireKnown(id, "a finish");
    known_.erase(id);
    for (auto &p : policies_) {
      auto it = p->index.find(id);
      if (it == p->index.end())
        continue;
      p->controller.finish(it->second);
      p->index.erase(it);
    }
  }

  std::int64_t stepCount() const { return step_; }

private:
  void requireKnown(std::uint64_t id, const char *what) const {
    if (!known_.count(id))
      throw Error(std::string(what) + " for request " + std::to_string(id) +
                  ", which has not arrived (or has left)");
  }

  std::set<std::uint64_t> known_; // arrived, admitted or refused
  std::vector<std::unique_ptr<Policy>> policies_;
  std::int32_t groups_ = 1;
  std::map<std::uint64_t, std::vector<std::vector<std::vector<std::int32_t>>>> pending_;
  std::int64_t maxQueries_ = 0, maxRows_ = 0;
  std::int64_t step_ = 0;
};

/// Applies one trace event.
void apply(Simulation &sim, const TraceEvent &event) {
  switch (event.kind) {
  case TraceEvent::Admit:
    sim.admit(event.id, event.a, event.b);
    break;
  case TraceEvent::Select:
    sim.select(event.id, event.a, event.b, event.rows);
    break;
  case TraceEvent::Step:
    sim.step();
    break;
  case TraceEvent::Append:
    sim.append(event.id, event.a);
    break;
  case TraceEvent::Finish:
    sim.finish(event.id);
    break;
  }
}

/// The load-step scenario as trace events, one step at a time.
class LoadStep {
public:
  explicit LoadStep(const Options &o) : o_(o) {}

  /// Max context a request needs.
  std::int64_t maxContext() const { return o_.context + o_.steps + 1; }

  /// Events of step t (arrivals, selections, the step, appends, departures).
  void events(std::int64_t t, std::vector<TraceEvent> &out) {
    out.clear();
    // Arrivals: the low-load requests at step 0, the rest spread over the ramp.
    const std::int32_t newcomers = o_.high - o_.low;
    auto arrivalsBy = [&](std::int64_t step) -> std::int64_t {
      if (step < o_.arriveAt)
        return 0;
      return std::min<std::int64_t>(newcomers, (step - o_.arriveAt + 1) * newcomers / o_.ramp);
    };
    auto departuresBy = [&](std::int64_t step) -> std::int64_t {
      if (step < o_.departAt)
        return 0;
      return std::min<std::int64_t>(newcomers, (step - o_.departAt + 1) * newcomers / o_.ramp);
    };
    if (t == 0)
      for (std::int32_t i = 0; i < o_.low; ++i)
        arrive(out);
    for (std::int64_t n = arrivalsBy(t) - arrivalsBy(t - 1); n > 0; --n)
      arrive(out);
    for (std::int64_t n = departuresBy(t) - departuresBy(t - 1); n > 0; --n) {
      // The newcomers leave, oldest first.
      auto it =
          std::find_if(live_.begin(), live_.end(), [&](const Request &r) { return r.id >= 1000; });
      TraceEvent e;
      e.kind = TraceEvent::Finish;
      e.id = it->id;
      out.push_back(e);
      live_.erase(it);
    }
    // Selections: Q chained DRR steps per request and group.
    for (Request &r : live_)
      for (std::int32_t g = 0; g < o_.groups; ++g)
        for (std::int32_t q = 0; q < o_.queries; ++q) {
          TraceEvent e;
          e.kind = TraceEvent::Select;
          e.id = r.id;
          e.a = g;
          e.b = q;
          e.rows = r.drr[static_cast<std::size_t>(g)]->next(r.len);
          out.push_back(std::move(e));
        }
    out.push_back(TraceEvent{});
    // One decode token per request.
    for (Request &r : live_) {
      TraceEvent e;
      e.kind = TraceEvent::Append;
      e.id = r.id;
      e.a = 1;
      out.push_back(e);
      ++r.len;
    }
  }

private:
  struct Request {
    std::uint64_t id;
    std::int64_t len;
    std::vector<std::unique_ptr<DrrGenerator>> drr; // per group
  };

  void arrive(std::vector<TraceEvent> &out) {
    Request r;
    r.id = live_.size() < static_cast<std::size_t>(o_.low) && nextLow_ < 1000 ? nextLow_++
                                                                              : nextHigh_++;
    r.len = o_.context;
    for (std::int32_t g = 0; g < o_.groups; ++g)
      r.drr.push_back(std::make_unique<DrrGenerator>(o_.drr, o_.seed * 0x9E3779B97F4A7C15ull +
                                                                 r.id * 1315423911ull + g));
    TraceEvent e;
    e.kind = TraceEvent::Admit;
    e.id = r.id;
    e.a = r.len;
    e.b = maxContext();
    out.push_back(e);
    live_.push_back(std::move(r));
  }

  const Options &o_;
  std::deque<Request> live_;
  std::uint64_t nextLow_ = 0, nextHigh_ = 1000;
};

//===----------------------------------------------------------------------===//
// Reporting
//===----------------------------------------------------------------------===//

double pct(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

/// Means over steps [begin, end) of one policy.
struct PhaseSummary {
  double fetchPct = 0, hbmGiB = 0, budget = 0, admitted = 0;
  std::int64_t steps = 0;
};

PhaseSummary summarize(const Policy &p, std::int64_t begin, std::int64_t end, double slotGiB) {
  PhaseSummary s;
  std::int64_t selected = 0, fetched = 0;
  for (const StepRecord &r : p.records) {
    if (r.step < begin || r.step >= end)
      continue;
    selected += r.selected;
    fetched += r.fetched;
    s.hbmGiB += static_cast<double>(r.usedSlots) * slotGiB;
    s.budget += static_cast<double>(r.budget);
    s.admitted += r.admitted;
    ++s.steps;
  }
  s.fetchPct = pct(fetched, selected);
  if (s.steps) {
    s.hbmGiB /= static_cast<double>(s.steps);
    s.budget /= static_cast<double>(s.steps);
    s.admitted /= static_cast<double>(s.steps);
  }
  return s;
}

/// Opens a trace file; throws Error when it cannot be read.
std::ifstream openTrace(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw Error("cannot read " + path);
  return in;
}

int run(const Options &o) {
  std::printf("dhs-sim: DRR f=%.2f q=%.2f gamma=%.2f r=%.2f sinks=%d window=%d lambda=%.0f%s, "
              "K=%d, Q=%d, seed %llu\n",
              o.drr.f, o.drr.q, o.drr.gamma, o.drr.r, o.drr.sinks, o.drr.window, o.drr.lambda,
              o.drr.contextScaling ? " (context scaling)" : "", o.drr.topk, o.queries,
              static_cast<unsigned long long>(o.seed));
  if (o.calibration || o.calibrationOnly) {
    std::printf("\ncalibration (docs/runtime.md): one request, context 32768, 1200 steps,\n"
                "a fixed LRU buffer of B slots and nothing else resident, misses after step 300\n");
    std::printf("  %8s %8s %10s\n", "B", "miss", "overlap");
    bool ok = true;
    for (std::int32_t b : {o.drr.topk, 2 * o.drr.topk, 4 * o.drr.topk}) {
      Calibration c = calibrate(o.drr, b, o.seed + 17);
      std::printf("  %8d %7.1f%% %10.3f\n", c.buffer, 100.0 * c.miss, c.overlap);
      if (b == 4096 && o.drr.topk == 2048)
        ok = c.miss > 0.11 && c.miss < 0.17;
    }
    if (o.drr.topk == 2048)
      std::printf("  check: B=4096 at K=2048 misses ~14%% (paper 14.2%%): %s\n",
                  ok ? "PASS" : "FAIL (outside 11-17%)");
    if (o.calibrationOnly)
      return ok ? 0 : 1;
  }

  // Memory: the same slot pool for both policies.
  const std::int64_t fixedReserve = static_cast<std::int64_t>(o.newest) + o.draft + o.fixedBuffer;
  std::int64_t slots = o.hbmSlots >= 0 ? o.hbmSlots : o.high * fixedReserve;
  if (slots > std::numeric_limits<std::int32_t>::max())
    throw UsageError("too many HBM slots");
  const std::int64_t maxContext = o.context + o.steps + 1;
  std::int32_t maxRequests = std::max(o.high, 1) + 64;
  std::int64_t hostRows = maxContext * (maxRequests + 1);
  if (!o.trace.empty()) {
    // A first pass sizes the host store and the request table: every
    // admitted request's range at once, at most.
    std::ifstream in = openTrace(o.trace);
    TraceReader reader(in, o.trace);
    TraceEvent event;
    hostRows = 1;
    std::int64_t admits = 0;
    while (reader.next(event))
      if (event.kind == TraceEvent::Admit) {
        hostRows += event.b;
        ++admits;
      }
    maxRequests = static_cast<std::int32_t>(std::min<std::int64_t>(admits + 1, 1 << 20));
  }
  ResidencyConfig adaptive = ResidencyConfig::adaptive(o.groups, static_cast<std::int32_t>(slots),
                                                       hostRows, o.newest, o.draft, o.floor);
  adaptive.replacement = o.adaptiveReplacement;
  adaptive.maxRequests = maxRequests;
  ResidencyConfig fixed = ResidencyConfig::fixedBudget(o.groups, static_cast<std::int32_t>(slots),
                                                       hostRows, o.newest, o.draft, o.fixedBuffer);
  fixed.replacement = o.fixedReplacement;
  fixed.maxRequests = maxRequests;
  // Bytes: every layer of the model holds the simulated groups' occupancy.
  const double slotBytes = static_cast<double>(o.layers) * static_cast<double>(o.rowBytes) /
                           static_cast<double>(o.groups);
  const double slotGiB = slotBytes / (1024.0 * 1024.0 * 1024.0);
  std::printf("\nmemory: %lld slots per group (%.2f GiB for %d layers x %lld-byte rows); "
              "adaptive reserves %lld per request (newest %d + draft %d + floor %d), "
              "fixed %lld (newest %d + draft %d + buffer %d)\n",
              static_cast<long long>(slots), static_cast<double>(slots) * o.groups * slotGiB,
              o.layers, static_cast<long long>(o.rowBytes),
              static_cast<long long>(adaptive.reservedSlots()), o.newest, o.draft, o.floor,
              static_cast<long long>(fixedReserve), o.newest, o.draft, o.fixedBuffer);
  std::printf("policies: adaptive (%s), fixed (%s); %d group(s) simulated\n",
              abi::name(adaptive.replacement), abi::name(fixed.replacement), o.groups);

  Simulation sim({adaptive, fixed}, {abi::name(adaptive.policy), abi::name(fixed.policy)});
  std::unique_ptr<std::ofstream> traceOut;
  std::unique_ptr<TraceWriter> writer;
  if (!o.writeTrace.empty()) {
    traceOut = std::make_unique<std::ofstream>(o.writeTrace);
    if (!*traceOut)
      throw Error("cannot write " + o.writeTrace);
    writer = std::make_unique<TraceWriter>(*traceOut);
  }

  std::printf("\n%6s %5s | %9s %8s %8s %9s | %9s %8s %8s\n", "step", "reqs", "selected", "adapt%",
              "HBM GiB", "budget", "fixed%", "HBM GiB", "refused");
  auto printStep = [&](std::int64_t t) {
    const StepRecord &a = sim.policies()[0]->records.back();
    const StepRecord &f = sim.policies()[1]->records.back();
    std::printf("%6lld %5d | %9lld %7.2f%% %8.2f %9lld | %8.2f%% %8.2f %4lld/%-3lld\n",
                static_cast<long long>(t), a.admitted, static_cast<long long>(a.selected),
                pct(a.fetched, a.selected), static_cast<double>(a.usedSlots) * slotGiB,
                static_cast<long long>(a.budget), pct(f.fetched, f.selected),
                static_cast<double>(f.usedSlots) * slotGiB, static_cast<long long>(a.refused),
                static_cast<long long>(f.refused));
  };

  if (!o.trace.empty()) {
    std::ifstream in = openTrace(o.trace);
    TraceReader reader(in, o.trace);
    TraceEvent event;
    while (reader.next(event)) {
      if (writer)
        writer->write(event);
      try {
        apply(sim, event);
      } catch (const Error &error) {
        throw Error(o.trace + ":" + std::to_string(reader.line()) + ": " + error.what());
      }
      if (event.kind == TraceEvent::Step && (sim.stepCount() - 1) % o.every == 0)
        printStep(sim.stepCount() - 1);
    }
  } else {
    LoadStep scenario(o);
    std::vector<TraceEvent> events;
    for (std::int64_t t = 0; t < o.steps; ++t) {
      scenario.events(t, events);
      for (const TraceEvent &event : events) {
        if (writer)
          writer->write(event);
        apply(sim, event);
      }
      const bool edge = t == o.arriveAt || t == o.arriveAt + o.ramp || t == o.departAt ||
                        t == o.departAt + o.ramp;
      if (t % o.every == 0 || edge || t + 1 == o.steps)
        printStep(t);
    }
  }

  if (!o.csv.empty()) {
    std::ofstream csv(o.csv);
    if (!csv)
      throw Error("cannot write " + o.csv);
    csv << "step";
    for (auto &p : sim.policies())
      for (const char *column :
           {"admitted", "selected", "fetched", "fetch_pct", "promoted", "evicted", "hbm_slots_used",
            "hbm_gib", "optional_budget", "optional_used", "refused"})
        csv << ',' << p->name << '_' << column;
    csv << '\n';
    for (std::size_t i = 0; i < sim.policies()[0]->records.size(); ++i) {
      csv << sim.policies()[0]->records[i].step;
      for (auto &p : sim.policies()) {
        const StepRecord &r = p->records[i];
        csv << ',' << r.admitted << ',' << r.selected << ',' << r.fetched << ','
            << pct(r.fetched, r.selected) << ',' << r.promoted << ',' << r.evicted << ','
            << r.usedSlots << ',' << static_cast<double>(r.usedSlots) * slotGiB << ',' << r.budget
            << ',' << r.optionalUsed << ',' << r.refused;
      }
      csv << '\n';
    }
  }

  // Phase summaries (load step only; a trace gets one summary).
  struct Phase {
    const char *name;
    std::int64_t begin, end;
  };
  std::vector<Phase> phases;
  if (o.trace.empty()) {
    phases.push_back({"low load", std::min(o.warmup, o.arriveAt), o.arriveAt});
    phases.push_back(
        {"high load", std::min(o.arriveAt + o.ramp + o.warmup, o.departAt), o.departAt});
    phases.push_back({"low again", std::min(o.departAt + o.ramp + o.warmup, o.steps), o.steps});
  } else {
    phases.push_back({"whole trace", 0, sim.stepCount()});
  }
  std::printf("\nsummary (means over each phase, its first %lld steps left out):\n",
              static_cast<long long>(o.trace.empty() ? o.warmup : 0));
  std::printf("  %-12s %11s %6s | %9s %9s %10s | %9s %9s\n", "phase", "steps", "reqs", "adapt%",
              "HBM GiB", "budget", "fixed%", "HBM GiB");
  std::vector<std::pair<PhaseSummary, PhaseSummary>> results;
  for (const Phase &phase : phases) {
    PhaseSummary a = summarize(*sim.policies()[0], phase.begin, phase.end, slotGiB);
    PhaseSummary f = summarize(*sim.policies()[1], phase.begin, phase.end, slotGiB);
    results.emplace_back(a, f);
    std::printf("  %-12s %5lld-%-5lld %6.1f | %8.2f%% %9.2f %10.0f | %8.2f%% %9.2f\n", phase.name,
                static_cast<long long>(phase.begin), static_cast<long long>(phase.end), a.admitted,
                a.fetchPct, a.hbmGiB, a.budget, f.fetchPct, f.hbmGiB);
  }
  std::printf("  HBM capacity %.2f GiB\n", static_cast<double>(slots) * o.groups * slotGiB);

  if (o.check) {
    bool ok = true;
    auto expect = [&](bool condition, const std::string &what) {
      std::printf("  check: %s: %s\n", what.c_str(), condition ? "PASS" : "FAIL");
      ok = ok && condition;
    };
    if (o.trace.empty()) {
      expect(results[0].first.fetchPct < 0.5 * results[0].second.fetchPct,
             "adaptive fetches less than half of fixed at low load");
      expect(results[2].first.fetchPct < 0.5 * results[2].second.fetchPct,
             "adaptive fetches less than half of fixed after the departures");
      expect(results[1].first.budget < results[0].first.budget,
             "the optional budget shrinks under load");
    }
    bool withinBudget = true;
    for (const StepRecord &r : sim.policies()[0]->records)
      withinBudget = withinBudget && r.optionalUsed <= r.budget * o.groups;
    expect(withinBudget, "adaptive optional rows within the budget at every step");
    expect(sim.policies()[0]->refused == 0 && sim.policies()[1]->refused == 0,
           "no admission refused");
    return ok ? 0 : 1;
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(parseOptions(argc, argv));
  } catch (const UsageError &error) {
    std::fprintf(stderr, "dhs-sim: %s\n", error.what());
    return 2;
  } catch (const std::exception &error) {
    std::fprintf(stderr, "dhs-sim: error: %s\n", error.what());
    return 1;
  }
}
