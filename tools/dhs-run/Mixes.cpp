//===- Mixes.cpp - dhs-run's residency mixes ------------------------------===//

#include "tools/dhs-run/Mixes.h"

#include "runtime/core/Error.h"
#include "runtime/core/SparseAttentionProblem.h"
#include "runtime/testing/ProblemGenerator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

namespace dhs::tools {

using namespace runtime;

void injectError(SparseAttentionProblem &p, Injection kind) {
  const ProblemShape &s = p.shape;
  // The first valid selection satisfying `want`, searching from the last
  // request backwards so that the message names a nonzero request.
  auto find = [&](auto want) -> std::optional<std::size_t> {
    for (std::int64_t b = s.batch - 1; b >= 0; --b)
      for (std::int64_t q = 0; q < s.queries; ++q)
        for (std::int64_t k = s.topk / 2; k < s.topk + s.topk / 2; ++k) {
          std::size_t i = p.selectionIndex(b, q, k % s.topk);
          if (p.rowIds[i] != -1 && want(b, i))
            return i;
        }
    return std::nullopt;
  };
  auto requestOf = [&](std::size_t i) {
    return static_cast<std::int64_t>(i) / (s.queries * s.topk);
  };
  switch (kind) {
  case Injection::None:
    return;
  case Injection::RowId:
  case Injection::BadId: {
    auto i = find([](std::int64_t, std::size_t) { return true; });
    if (!i)
      throw Error("cannot inject an error: no selection is valid");
    p.rowIds[*i] = kind == Injection::BadId ? -2 : p.historyLen[requestOf(*i)];
    return;
  }
  case Injection::Slot: {
    auto i = find([](std::int64_t, std::size_t) { return true; });
    if (!i)
      throw Error("cannot inject an error: no selection is valid");
    p.slots[*i] = static_cast<std::int32_t>(s.hbmSlots);
    return;
  }
  case Injection::HostRow: {
    auto i = find([&](std::int64_t, std::size_t j) { return p.slots[j] == -1; });
    if (!i)
      throw Error("cannot inject a host-row error: no selection reads the host "
                  "store (residency 1?)");
    // Move the request's history so that this row lands just past the store.
    p.historyStart[requestOf(*i)] = s.hostRows - p.rowIds[*i];
    return;
  }
  }
}

namespace {

double medianOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

RuntimeConfig sessionConfig(const SparseAttentionProblem &problem, BackendKind backend) {
  const ProblemShape &shape = problem.shape;
  RuntimeConfig config;
  config.layers = static_cast<std::int32_t>(shape.layers);
  config.layersPerGroup = config.layers;
  config.hbmSlots = static_cast<std::int32_t>(shape.hbmSlots);
  config.hostRows = shape.hostRows;
  config.maxRequests = static_cast<std::int32_t>(shape.batch);
  // Nothing resident but what the warm-up step makes so (a step's
  // dhs.residency spec overrides this).
  config.newestWindow = 0;
  config.hotFloor = 0;
  config.policy = ResidencyPolicy::Adaptive;
  config.replacement = Replacement::Clock;
  config.maxPromotionsPerStep = -1;
  config.backend = backend;
  config.cpuThreads = 0;
  return config;
}

} // namespace

RuntimeMixes::RuntimeMixes(const Options &options, const std::vector<Manifest> &manifests,
                           const SparseAttentionProblem &problem, BackendKind backend)
    : options_(options), generated_(problem), runtime_(sessionConfig(problem, backend)) {
  runtime_.loadStepManifests(manifests);
  const ProblemShape &s = problem.shape;
  layers_ = static_cast<std::int32_t>(s.layers);
  for (const Manifest &m : manifests)
    checkedLayers_.push_back(static_cast<std::int32_t>(problemShapeFromManifest(m).layer));
  std::sort(checkedLayers_.begin(), checkedLayers_.end());
  for (std::int64_t b = 0; b < s.batch; ++b)
    ids_.push_back(static_cast<std::uint64_t>(b));
  // Every layer attends with the problem's queries.
  for (std::int32_t l = 0; l < layers_; ++l)
    queries_.insert(queries_.end(), problem.queries.begin(), problem.queries.end());
  output_.assign(static_cast<std::size_t>(layers_ * s.outputCount()), 0);
}

void RuntimeMixes::admitRequests() {
  const SparseAttentionProblem &p = generated_;
  const ProblemShape &s = p.shape;
  const std::size_t rowBytes = static_cast<std::size_t>(s.rowBytes);
  const std::size_t tokenBytes = static_cast<std::size_t>(s.rowElems) * sizeof(bf16_t);
  const auto *store = reinterpret_cast<const std::uint8_t *>(p.hostStoreData());
  std::vector<std::uint8_t> rows;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    // The prefill [L][history][row_bytes], from the request's host rows.
    const std::int64_t len = p.historyLen[static_cast<std::size_t>(b)];
    const std::int64_t start = p.historyStart[static_cast<std::size_t>(b)];
    rows.assign(static_cast<std::size_t>(layers_ * len) * rowBytes, 0);
    for (std::int32_t l = 0; l < layers_; ++l)
      for (std::int64_t r = 0; r < len; ++r)
        std::memcpy(rows.data() + static_cast<std::size_t>(l * len + r) * rowBytes,
                    store + static_cast<std::size_t>(start + r) * tokenBytes +
                        static_cast<std::size_t>(l) * rowBytes,
                    rowBytes);
    runtime_.admit(ids_[static_cast<std::size_t>(b)], len, len, rows.data());
    if (s.windowSize <= 0)
      continue;
    // The window ring's raw tokens [count][L][row_bytes]: the newest R.
    const std::int64_t tokens = p.windowTokens[static_cast<std::size_t>(b)];
    const std::int64_t first = std::max<std::int64_t>(0, tokens - s.windowRing);
    if (tokens == first)
      continue;
    const auto *ring = reinterpret_cast<const std::uint8_t *>(p.windowRing.data()) +
                       static_cast<std::size_t>(b * s.windowRing) * tokenBytes;
    rows.assign(static_cast<std::size_t>(tokens - first) * tokenBytes, 0);
    for (std::int64_t t = first; t < tokens; ++t)
      std::memcpy(rows.data() + static_cast<std::size_t>(t - first) * tokenBytes,
                  ring + static_cast<std::size_t>(t % s.windowRing) * tokenBytes, tokenBytes);
    runtime_.writeWindow(ids_[static_cast<std::size_t>(b)], first, tokens - first, rows.data());
  }
}

void RuntimeMixes::step(const std::vector<std::int32_t> &rowIds, bool keep) {
  const ProblemShape &s = generated_.shape;
  if (keep) {
    runtime_.step(ids_.data(), s.batch, rowIds.data(), queries_.data(), output_.data());
    return;
  }
  runtime_.beginStep(ids_.data(), s.batch);
  try {
    runtime_.selectGroup(0, rowIds.data());
    for (std::int32_t l = 0; l < layers_; ++l)
      runtime_.attendLayer(l, queries_.data() + l * s.queryCount(),
                           output_.data() + l * s.outputCount());
  } catch (...) {
    runtime_.abortStep();
    throw;
  }
  runtime_.abortStep();
}

std::vector<bf16_t> RuntimeMixes::checkedOutput() const {
  const std::int64_t n = generated_.shape.outputCount();
  std::vector<bf16_t> out;
  for (std::int32_t l : checkedLayers_)
    out.insert(out.end(), output_.begin() + l * n, output_.begin() + (l + 1) * n);
  return out;
}

MixResult RuntimeMixes::run(double fraction, SparseAttentionProblem &problem) {
  const ProblemShape &s = problem.shape;
  MixResult mix;
  mix.residency = fraction;
  mix.throughRuntime = true;
  admitRequests();
  // The warm-up step selects the rows the mix makes resident (as
  // applyResidency picks them); the controller promotes them after it.
  if (fraction > 0.0) {
    const std::vector<std::int32_t> picked = residencySlots(problem, fraction, options_.seed);
    std::vector<std::int32_t> warm(problem.rowIds.size(), -1);
    for (std::size_t i = 0; i < warm.size(); ++i)
      if (picked[i] >= 0)
        warm[i] = problem.rowIds[i];
    step(warm, /*keep=*/true);
    mix.warmPromoted = runtime_.stats().lastStep.promoted;
  }
  // The residency as the kernels will read it: each selection's slot.
  const ResidencyController &controller = runtime_.controller();
  const std::int64_t perLane = s.queries * s.topk;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    const std::int32_t index = runtime_.requestIndex(ids_[static_cast<std::size_t>(b)]);
    for (std::int64_t i = 0; i < perLane; ++i) {
      const std::size_t e = static_cast<std::size_t>(b * perLane + i);
      problem.slots[e] =
          problem.rowIds[e] < 0 ? -1 : controller.slotOf(0, index, problem.rowIds[e]);
    }
  }
  injectError(problem, options_.inject);
  problem.validate();
  mix.stats = problem.stats();

  // Timed steps (GPU): abandoned, so that none promotes and each sees the
  // mix's residency; their outputs must equal the kept step's.
  std::optional<std::vector<bf16_t>> timedOutput;
  if (runtime_.device() && options_.repeat > 0) {
    for (int i = 0; i < options_.warmup + options_.repeat; ++i) {
      std::fill(output_.begin(), output_.end(), kBf16Poison);
      const auto start = std::chrono::steady_clock::now();
      step(problem.rowIds, /*keep=*/false);
      if (i >= options_.warmup)
        mix.timesMs.push_back(millisecondsSince(start));
      std::vector<bf16_t> out = checkedOutput();
      if (!timedOutput)
        timedOutput = std::move(out);
      else if (out != *timedOutput)
        mix.repeatsIdentical = false;
    }
  }
  // The kept step: checked, its statistics booked.
  const auto start = std::chrono::steady_clock::now();
  step(problem.rowIds, /*keep=*/true);
  const double keptMs = millisecondsSince(start);
  mix.output = checkedOutput();
  if (timedOutput && *timedOutput != mix.output)
    mix.repeatsIdentical = false;
  if (mix.timesMs.empty())
    mix.timesMs = {keptMs};
  mix.medianMs = medianOf(mix.timesMs);
  mix.timed = true;
  mix.runtimeStats = runtime_.stats().lastStep;
  mix.fetchedRows = runtime_.fetchedRows();
  mix.residentForm = runtime_.residentFormLayers() > 0;
  mix.formShare = runtime_.formShare(0);
  for (std::uint64_t id : ids_)
    runtime_.finish(id);
  return mix;
}

MixResult runOnKernels(CudaStep &step, const Options &options, double fraction,
                       SparseAttentionProblem &problem) {
  applyResidency(problem, fraction, options.seed);
  injectError(problem, options.inject);
  MixResult mix;
  mix.residency = fraction;
  mix.stats = problem.stats();
  CudaRunOptions runOptions;
  runOptions.repeat = options.repeat;
  runOptions.warmup = options.warmup;
  runOptions.validateInputs = false;
  runOptions.missingShare = options.formShare;
  CudaRunResult r = step.run(problem, runOptions);
  mix.output = std::move(r.output);
  mix.timesMs = r.timesMs;
  mix.medianMs = r.medianMs;
  mix.timed = !r.timesMs.empty();
  mix.repeatsIdentical = r.repeatsIdentical;
  mix.fetchedRows = r.fetchedRows;
  mix.residentForm = r.residentForm;
  mix.formShare = r.formShare;
  return mix;
}

} // namespace dhs::tools
