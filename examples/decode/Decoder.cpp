//===- Decoder.cpp - dhs-decode's decode loops over the C API -------------===//

#include "examples/decode/Decoder.h"

#include "examples/decode/Drafter.h"
#include "examples/decode/Forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>

namespace dhs::decode {

namespace {

constexpr int QK = ModelConfig::kQkDim;

/// splitmix64 finalizer: the prompts' and the sampler's random numbers.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A plain decode step's attention: the runtime's step in parts.
class StepPort : public AttentionPort {
public:
  explicit StepPort(dhs_runtime *rt) : rt_(rt) {}
  void select(int group, const std::int32_t *rowIds) override {
    check(dhs_step_select(rt_, group, rowIds, DHS_MEMORY_HOST), "dhs_step_select");
  }
  void writeRows(int, const std::uint16_t *) override {} // appended after the step
  void attend(int layer, const std::uint16_t *queries, std::uint16_t *output) override {
    check(dhs_step_attend(rt_, layer, queries, output, DHS_MEMORY_HOST), "dhs_step_attend");
  }

private:
  dhs_runtime *rt_;
};

} // namespace

void check(dhs_status status, const char *what) {
  if (status != DHS_OK)
    throw DecodeError(std::string(what) + " failed: " + dhs_status_name(status) + ": " +
                      dhs_last_error());
}

namespace {

/// Residency's names, in its order.
constexpr const char *kResidencyNames[] = {"all", "part", "none"};

} // namespace

Residency parseResidency(const std::string &text) {
  for (std::size_t i = 0; i < std::size(kResidencyNames); ++i)
    if (text == kResidencyNames[i])
      return static_cast<Residency>(i);
  throw DecodeError("--residency must be all, part or none, not '" + text + "'");
}

const char *residencyName(Residency residency) {
  return kResidencyNames[static_cast<std::size_t>(residency)];
}

void softmax(const float *logits, int vocab, float *probs) {
  const float best = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i)
    sum += std::exp(static_cast<double>(logits[i] - best));
  for (int i = 0; i < vocab; ++i)
    probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[i] - best)) / sum);
}

int sampleToken(const float *logits, int vocab, std::uint64_t seed, std::uint64_t request,
                std::int64_t position) {
  std::vector<float> p(vocab);
  softmax(logits, vocab, p.data());
  const std::uint64_t bits = mix(seed ^ mix(request ^ mix(static_cast<std::uint64_t>(position))));
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  double cumulative = 0.0;
  for (int i = 0; i < vocab; ++i) {
    cumulative += p[i];
    if (u < cumulative)
      return i;
  }
  return argmax(p.data(), vocab);
}

std::vector<Prefill> makePrefills(const Model &model, const DecodeOptions &options) {
  const ModelConfig &c = model.config();
  if (options.prompt < 2)
    throw DecodeError("--prompt must be at least 2 tokens");
  std::vector<Prefill> prefills(options.requests);
  // A runtime for the prompts' top-k selections only.
  dhs_runtime_config config;
  dhs_runtime_config_init(&config);
  dhs_runtime *rt = nullptr;
  check(dhs_runtime_create(&config, &rt), "dhs_runtime_create");
  std::unique_ptr<dhs_runtime, void (*)(dhs_runtime *)> owner(rt, dhs_runtime_destroy);
  const TopK topk(rt, options.steps + "/topk", c);
  for (int b = 0; b < options.requests; ++b) {
    Prefill &p = prefills[b];
    std::uint64_t state = mix(options.seed * 1000003ull + static_cast<std::uint64_t>(b));
    for (int i = 0; i < options.prompt; ++i) {
      state = mix(state);
      p.prompt.push_back(static_cast<int>(state % static_cast<std::uint64_t>(c.vocab)));
    }
    // The model over positions 0 .. prompt-2 on the host, as one block
    // (position q attends to positions before it, as in a verify block).
    const std::int64_t n = options.prompt - 1;
    const std::vector<std::vector<float>> none(c.groups());
    std::vector<Lane> lanes{{p.prompt.data(), static_cast<int>(n), 0, &none}};
    HostPort port(model, lanes, static_cast<int>(n));
    BlockResult r = forwardBlock(model, lanes, static_cast<int>(n), port, &topk);
    p.rows = std::move(r.rows); // [layers][1][n][576]
    for (int g = 0; g < c.groups(); ++g)
      p.keys.emplace_back(r.keys.begin() + static_cast<std::size_t>(g) * n * c.indexDim,
                          r.keys.begin() + static_cast<std::size_t>(g + 1) * n * c.indexDim);
    p.draftStart = draftPrefill(model, p.prompt, n, options.draftWindow, p.draftRows);
  }
  return prefills;
}

Session::Session(const Model &model, const std::vector<Prefill> &prefills,
                 const DecodeOptions &options, int Q) {
  const ModelConfig &c = model.config();
  const int R = options.requests;
  const std::int64_t maxContext = options.prompt + options.tokens + 2 * kMaxGamma + 2;
  dhs_runtime_config config;
  dhs_runtime_config_init(&config);
  config.layers = c.layers;
  config.layers_per_group = c.layersPerGroup;
  config.host_rows = R * maxContext;
  config.max_requests = R;
  config.backend = options.backend;
  config.check_invariants = options.checkInvariants ? 1 : 0;
  config.full_check_interval = 16;
  config.draft_window = options.speculate ? options.draftWindow + kMaxGamma : 0;
  switch (options.residency) {
  case Residency::All: // every row is among the newest, resident from admission on
    config.newest_window = static_cast<std::int32_t>(maxContext);
    config.hot_floor = 0;
    config.hbm_slots = static_cast<std::int32_t>(R * (maxContext + Q));
    break;
  case Residency::Part: // protected sets and about a quarter of the history
    config.newest_window = 16;
    config.hot_floor = 16;
    config.hbm_slots = R * (16 + 16 + Q) + R * options.prompt / 4;
    break;
  case Residency::None: // the newest token (and a verify block's pending rows)
    config.newest_window = 1;
    config.hot_floor = 0;
    config.hbm_slots = R * (1 + Q);
    config.max_promotions_per_step = 0;
    break;
  }
  check(dhs_runtime_create(&config, &rt), "dhs_runtime_create");
  try {
    std::vector<std::string> dirs;
    // The attention and draft-ring steps of the row format (fp8's in fp8/);
    // the accept and top-k steps serve both.
    const std::string formatSteps = options.steps + (c.fp8 ? "/fp8" : "");
    for (int l = 0; l < c.layersPerGroup; ++l)
      dirs.push_back(formatSteps + "/q" + std::to_string(Q) + "/layer" + std::to_string(l));
    std::vector<const char *> names;
    for (const std::string &d : dirs)
      names.push_back(d.c_str());
    check(dhs_runtime_load_steps(rt, names.data(), names.size()), "dhs_runtime_load_steps");
    if (options.speculate) {
      check(dhs_runtime_load_draft_step(rt, (formatSteps + "/draft_ring").c_str()),
            "dhs_runtime_load_draft_step");
      // The acceptance kernels (run on CUDA; the CPU runs the rules itself).
      for (const char *rule : {"accept", "accept_sampling"})
        check(dhs_runtime_load_accept_step(
                  rt, (options.steps + "/q" + std::to_string(Q) + "/" + rule).c_str()),
              "dhs_runtime_load_accept_step");
    }
    topk = std::make_unique<TopK>(rt, options.steps + "/topk", c);
    check(dhs_runtime_get_shape(rt, &shape), "dhs_runtime_get_shape");
    if (shape.queries != Q || shape.topk != c.topk || shape.heads != c.heads ||
        shape.row_bytes != c.rowBytes() || shape.batch < R)
      throw DecodeError("the steps in " + formatSteps + " do not fit the model (Q " +
                        std::to_string(shape.queries) + ", K " + std::to_string(shape.topk) +
                        ", H " + std::to_string(shape.heads) + ", B " +
                        std::to_string(shape.batch) + ")");
    for (int b = 0; b < R; ++b) {
      const Prefill &p = prefills[b];
      ids.push_back(1000 + static_cast<std::uint64_t>(b));
      const std::int64_t n = options.prompt - 1;
      const std::vector<std::uint8_t> packed =
          packRows(c, p.rows.data(), static_cast<std::size_t>(c.layers * n));
      check(dhs_request_admit(rt, ids[b], n, maxContext, packed.data()), "dhs_request_admit");
      tokens.push_back(p.prompt);
      keys.push_back(p.keys);
      history.push_back(n);
    }
  } catch (...) {
    dhs_runtime_destroy(rt);
    throw;
  }
}

Session::~Session() { dhs_runtime_destroy(rt); }

DecodeResult decode(const Model &model, const std::vector<Prefill> &prefills,
                    const DecodeOptions &options) {
  if (options.requests < 1 || static_cast<std::size_t>(options.requests) > prefills.size())
    throw DecodeError("--requests must be 1.." + std::to_string(prefills.size()));
  if (options.tokens < 1)
    throw DecodeError("--tokens must be at least 1");
  if (options.speculate)
    return decodeSpeculative(model, prefills, options);
  const ModelConfig &c = model.config();
  const int R = options.requests, V = c.vocab, D = c.indexDim;
  Session s(model, prefills, options, 1);
  DecodeResult result;
  result.streams.resize(R);
  std::vector<std::uint16_t> rows(static_cast<std::size_t>(c.layers) * QK);
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < options.tokens; ++step) {
    std::vector<Lane> lanes;
    for (int b = 0; b < R; ++b)
      lanes.push_back({&s.tokens[b].back(), 1, s.history[b], &s.keys[b]});
    check(dhs_step_begin(s.rt, s.ids.data(), R), "dhs_step_begin");
    StepPort port(s.rt);
    BlockResult r;
    try {
      r = forwardBlock(model, lanes, 1, port, s.topk.get());
      check(dhs_step_end(s.rt), "dhs_step_end");
    } catch (...) {
      dhs_step_abort(s.rt);
      throw;
    }
    for (int b = 0; b < R; ++b) {
      // The input token's KV becomes history; its logits give the next token.
      for (int l = 0; l < c.layers; ++l)
        std::memcpy(&rows[static_cast<std::size_t>(l) * QK], r.row(l, R, 1, b, 0),
                    QK * sizeof(std::uint16_t));
      check(dhs_request_append(s.rt, s.ids[b], packRows(c, rows.data(), c.layers).data()),
            "dhs_request_append");
      for (int g = 0; g < c.groups(); ++g) {
        const float *key = &r.keys[(static_cast<std::size_t>(g) * R + b) * D];
        s.keys[b][g].insert(s.keys[b][g].end(), key, key + D);
      }
      ++s.history[b];
      const float *logits = &r.logits[static_cast<std::size_t>(b) * V];
      const int next = options.sampling
                           ? sampleToken(logits, V, options.seed, s.ids[b], s.history[b])
                           : argmax(logits, V);
      s.tokens[b].push_back(next);
      result.streams[b].push_back(next);
    }
    ++result.steps;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char backend[256];
  check(dhs_runtime_describe(s.rt, backend, sizeof backend), "dhs_runtime_describe");
  result.backend = backend;
  check(dhs_runtime_get_stats(s.rt, &result.stats), "dhs_runtime_get_stats");
  if (options.checkInvariants)
    check(dhs_runtime_check(s.rt), "dhs_runtime_check");
  return result;
}

} // namespace dhs::decode
