//===- Speculative.cpp - dhs-decode's speculative loop --------------------===//
//
// Per round and request the drafter proposes gamma tokens from its draft
// ring; the target verifies the block [last accepted token, drafts] in one
// verify step: dhs_verify_begin, then layer by layer the indexer's
// selections per group (dhs_step_select), the layer's pending KV rows
// (dhs_verify_write_rows) and its attention (dhs_step_attend); the target's
// logits (greedy) or probabilities (sampling) go to dhs_verify_accept, which
// accepts a prefix of the drafts, returns the bonus or corrected token and
// commits the KV of the accepted positions to the history.
//
//===----------------------------------------------------------------------===//

#include "examples/decode/Decoder.h"
#include "examples/decode/Drafter.h"
#include "examples/decode/Forward.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace dhs::decode {

namespace {

/// A verify step's attention: selections and attention as in a step in
/// parts, each layer's pending rows written before its attention.
class VerifyPort : public AttentionPort {
public:
  VerifyPort(dhs_runtime *rt, const ModelConfig &config, std::size_t positions)
      : rt_(rt), config_(config), positions_(positions) {}
  void select(int group, const std::int32_t *rowIds) override {
    check(dhs_step_select(rt_, group, rowIds, DHS_MEMORY_HOST), "dhs_step_select (verify)");
  }
  void writeRows(int layer, const std::uint16_t *rows) override {
    check(dhs_verify_write_rows(rt_, layer, packRows(config_, rows, positions_).data()),
          "dhs_verify_write_rows");
  }
  void attend(int layer, const std::uint16_t *queries, std::uint16_t *output) override {
    check(dhs_step_attend(rt_, layer, queries, output, DHS_MEMORY_HOST),
          "dhs_step_attend (verify)");
  }

private:
  dhs_runtime *rt_;
  const ModelConfig &config_;
  std::size_t positions_; // batch x Q
};

/// Tries a verify step whose first lane selects a row past its block (its
/// position 0 may read rows below its history length, plus itself): select
/// must refuse it with DHS_ERROR_OUT_OF_RANGE, abandoning the step, after
/// which accept has no step (DHS_ERROR_STATE) and every history is as
/// before. Throws DecodeError otherwise.
void rejectBadVerify(Session &s, const std::vector<int> &lanesOf, int Q, int K) {
  const int batch = static_cast<int>(lanesOf.size());
  std::vector<std::uint64_t> ids;
  std::vector<std::int64_t> before;
  for (int b : lanesOf) {
    ids.push_back(s.ids[b]);
    std::int64_t length = 0;
    check(dhs_request_length(s.rt, s.ids[b], &length), "dhs_request_length");
    before.push_back(length);
  }
  const std::vector<std::int32_t> noDrafts(batch, 0);
  check(dhs_verify_begin(s.rt, ids.data(), batch, noDrafts.data(), nullptr, nullptr),
        "dhs_verify_begin (a bad step)");
  std::vector<std::int32_t> rows(static_cast<std::size_t>(batch) * Q * K, -1);
  rows[0] = static_cast<std::int32_t>(before[0] + 1);
  const dhs_status selected = dhs_step_select(s.rt, 0, rows.data(), DHS_MEMORY_HOST);
  if (selected != DHS_ERROR_OUT_OF_RANGE) {
    dhs_step_abort(s.rt);
    throw DecodeError(std::string("a verify step selecting a row past its block gave ") +
                      dhs_status_name(selected) + ", not DHS_ERROR_OUT_OF_RANGE");
  }
  std::vector<std::int32_t> accepted(batch), tokens(static_cast<std::size_t>(batch) * Q);
  std::vector<float> target(static_cast<std::size_t>(batch) * Q * 2, 0.5f);
  const dhs_status accept = dhs_verify_accept(s.rt, DHS_ACCEPT_GREEDY, 2, target.data(), nullptr, 0,
                                              accepted.data(), tokens.data());
  if (accept != DHS_ERROR_STATE)
    throw DecodeError(std::string("accept after a refused verify step gave ") +
                      dhs_status_name(accept) + ", not DHS_ERROR_STATE");
  for (int i = 0; i < batch; ++i) {
    std::int64_t length = 0;
    check(dhs_request_length(s.rt, ids[i], &length), "dhs_request_length");
    if (length != before[i])
      throw DecodeError("a refused verify step changed request " + std::to_string(ids[i]) +
                        "'s history from " + std::to_string(before[i]) + " to " +
                        std::to_string(length) + " rows");
  }
}

} // namespace

DecodeResult decodeSpeculative(const Model &model, const std::vector<Prefill> &prefills,
                               const DecodeOptions &options) {
  const ModelConfig &c = model.config();
  const int R = options.requests, V = c.vocab, D = c.indexDim, gamma = options.gamma;
  int Q = 0;
  for (int q : {3, 5, 9})
    if (!Q && q >= gamma + 1)
      Q = q;
  if (!Q || gamma < 1)
    throw DecodeError("--gamma must be 1.." + std::to_string(kMaxGamma));
  Session s(model, prefills, options, Q);
  Drafter drafter(model, s.rt, options.draftWindow);
  for (int b = 0; b < R; ++b)
    drafter.admit(s.ids[b], prefills[b].draftStart, prefills[b].draftRows);

  DecodeResult result;
  result.streams.resize(R);
  std::vector<std::int32_t> draftLens(R), draftTokens(static_cast<std::size_t>(R) * (Q - 1), 0);
  std::vector<std::int32_t> accepted(R), emitted(static_cast<std::size_t>(R) * Q);
  std::vector<float> draftProbs, target(static_cast<std::size_t>(R) * Q * V);
  std::vector<std::vector<int>> blocks(R);
  const auto start = std::chrono::steady_clock::now();
  auto done = [&](int b) { return static_cast<int>(result.streams[b].size()) >= options.tokens; };
  while (true) {
    // The requests still decoding form the batch.
    std::vector<int> lanesOf;
    for (int b = 0; b < R; ++b)
      if (!done(b))
        lanesOf.push_back(b);
    if (lanesOf.empty())
      break;
    const int batch = static_cast<int>(lanesOf.size());
    if (options.rejectOne && result.steps == 2 && !result.rejected) {
      rejectBadVerify(s, lanesOf, Q, c.topk);
      ++result.rejected;
    }
    std::vector<std::uint64_t> ids;
    std::vector<Lane> lanes;
    if (options.sampling)
      draftProbs.assign(static_cast<std::size_t>(batch) * (Q - 1) * V, 0.0f);
    for (int i = 0; i < batch; ++i) {
      const int b = lanesOf[i];
      std::vector<float> q;
      const std::vector<int> drafts = drafter.draft(s.ids[b], s.tokens[b], gamma, options.sampling,
                                                    options.seed, options.sampling ? &q : nullptr);
      draftLens[i] = gamma;
      std::copy(drafts.begin(), drafts.end(), draftTokens.begin() + i * (Q - 1));
      if (options.sampling)
        std::copy(q.begin(), q.end(),
                  draftProbs.begin() + static_cast<std::ptrdiff_t>(i) * (Q - 1) * V);
      blocks[i].assign(1, s.tokens[b].back());
      blocks[i].insert(blocks[i].end(), drafts.begin(), drafts.end());
      ids.push_back(s.ids[b]);
      lanes.push_back({blocks[i].data(), gamma + 1, s.history[b], &s.keys[b]});
    }
    check(dhs_verify_begin(s.rt, ids.data(), batch, draftLens.data(), draftTokens.data(), nullptr),
          "dhs_verify_begin");
    BlockResult r;
    try {
      VerifyPort port(s.rt, c, static_cast<std::size_t>(batch) * Q);
      r = forwardBlock(model, lanes, Q, port, s.topk.get());
    } catch (...) {
      dhs_step_abort(s.rt);
      throw;
    }
    std::fill(target.begin(), target.end(), 0.0f);
    for (int i = 0; i < batch; ++i)
      for (int j = 0; j <= gamma; ++j) {
        const std::size_t p = static_cast<std::size_t>(i) * Q + j;
        if (options.sampling)
          softmax(&r.logits[p * V], V, &target[p * V]);
        else
          std::copy(&r.logits[p * V], &r.logits[p * V] + V, &target[p * V]);
      }
    check(dhs_verify_accept(s.rt,
                            options.sampling ? DHS_ACCEPT_REJECTION_SAMPLING : DHS_ACCEPT_GREEDY, V,
                            target.data(), options.sampling ? draftProbs.data() : nullptr,
                            options.seed, accepted.data(), emitted.data()),
          "dhs_verify_accept");
    ++result.steps;
    for (int i = 0; i < batch; ++i) {
      const int b = lanesOf[i], a = accepted[i];
      if (a < 0 || a > gamma)
        throw DecodeError("dhs_verify_accept accepted " + std::to_string(a) + " of " +
                          std::to_string(gamma) + " drafts");
      // Greedy: the runtime's choice must be the host's argmax chain.
      if (!options.sampling)
        for (int j = 0; j <= a; ++j) {
          const int expected = argmax(&r.logits[(static_cast<std::size_t>(i) * Q + j) * V], V);
          if (emitted[i * Q + j] != expected || (j < a && expected != blocks[i][j + 1]))
            throw DecodeError("dhs_verify_accept's token " + std::to_string(j) + " of request " +
                              std::to_string(s.ids[b]) + " is " +
                              std::to_string(emitted[i * Q + j]) + ", the target's argmax is " +
                              std::to_string(expected));
        }
      // The committed positions' indexer keys join the history's.
      for (int g = 0; g < c.groups(); ++g)
        for (int j = 0; j <= a; ++j) {
          const float *key = &r.keys[((static_cast<std::size_t>(g) * batch + i) * Q + j) * D];
          s.keys[b][g].insert(s.keys[b][g].end(), key, key + D);
        }
      s.history[b] += a + 1;
      for (int j = 0; j <= a; ++j) {
        s.tokens[b].push_back(emitted[i * Q + j]);
        if (!done(b))
          result.streams[b].push_back(emitted[i * Q + j]);
      }
      drafter.accepted(s.ids[b], static_cast<std::int64_t>(s.tokens[b].size()));
      std::int64_t length = 0;
      check(dhs_request_length(s.rt, s.ids[b], &length), "dhs_request_length");
      if (length != s.history[b])
        throw DecodeError("request " + std::to_string(s.ids[b]) + " has " + std::to_string(length) +
                          " rows of history after acceptance, not " + std::to_string(s.history[b]));
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char backend[256];
  check(dhs_runtime_describe(s.rt, backend, sizeof backend), "dhs_runtime_describe");
  result.backend = backend;
  check(dhs_runtime_get_stats(s.rt, &result.stats), "dhs_runtime_get_stats");
  dhs_spec_stats spec;
  check(dhs_runtime_get_spec_stats(s.rt, &spec), "dhs_runtime_get_spec_stats");
  result.drafted = spec.drafted;
  result.accepted = spec.accepted;
  result.meanAcceptedLength = spec.mean_accepted_length;
  result.hostRowsRead = spec.host_rows_read;
  result.hostRowsSelectedMissing = spec.host_rows_selected_missing;
  if (options.checkInvariants)
    check(dhs_runtime_check(s.rt), "dhs_runtime_check");
  return result;
}

} // namespace dhs::decode
