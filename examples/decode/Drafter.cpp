//===- Drafter.cpp - Self-speculation over the draft ring -----------------===//

#include "examples/decode/Drafter.h"

#include "examples/decode/Decoder.h"
#include "examples/decode/Forward.h"

#include <algorithm>
#include <string>

namespace dhs::decode {

namespace {

constexpr int QK = ModelConfig::kQkDim;

/// Attention over a window of rows [count][layers][576] held by the caller;
/// the block's own rows are never read (a position attends to earlier ones).
class WindowPort : public AttentionPort {
public:
  WindowPort(const ModelConfig &config, const std::uint16_t *window, int count)
      : config_(config), window_(window), count_(count) {}
  void select(int, const std::int32_t *) override {}
  void writeRows(int, const std::uint16_t *) override {}
  void attend(int layer, const std::uint16_t *queries, std::uint16_t *output) override {
    std::vector<const std::uint16_t *> rows(count_);
    for (int i = 0; i < count_; ++i)
      rows[i] = window_ + (static_cast<std::size_t>(i) * config_.layers + layer) * QK;
    hostAttention(queries, config_.heads, rows.data(), count_, output);
  }

private:
  const ModelConfig &config_;
  const std::uint16_t *window_;
  int count_;
};

/// Appends one position's rows (BlockResult rows of lane 0, Q = 1) to
/// `out` as [layers][576].
void appendRows(const BlockResult &r, int layers, std::vector<std::uint16_t> &out) {
  for (int l = 0; l < layers; ++l) {
    const std::uint16_t *row = r.row(l, 1, 1, 0, 0);
    out.insert(out.end(), row, row + QK);
  }
}

} // namespace

std::int64_t draftPrefill(const Model &model, const std::vector<int> &tokens, std::int64_t end,
                          int window, std::vector<std::uint16_t> &rows) {
  const int L = model.config().layers;
  const std::int64_t start = std::max<std::int64_t>(0, end - 2 * window);
  const std::size_t token = static_cast<std::size_t>(L) * QK;
  rows.clear();
  for (std::int64_t p = start; p < end; ++p) {
    const std::int64_t from = std::max(start, p - window);
    const int count = static_cast<int>(p - from);
    WindowPort port(model.config(), rows.data() + (from - start) * token, count);
    Lane lane{&tokens[p], 1, p, nullptr};
    const BlockResult r = forwardBlock(model, {lane}, 1, port, /*topk=*/nullptr);
    appendRows(r, L, rows);
  }
  return start;
}

Drafter::Drafter(const Model &model, dhs_runtime *runtime, int window)
    : model_(model), runtime_(runtime), window_(window) {}

Drafter::Ring &Drafter::ring(std::uint64_t id) {
  for (Ring &r : rings_)
    if (r.id == id)
      return r;
  throw DecodeError("drafter: request " + std::to_string(id) + " has no ring");
}

void Drafter::admit(std::uint64_t id, std::int64_t start, const std::vector<std::uint16_t> &rows) {
  const std::size_t token = static_cast<std::size_t>(model_.config().layers) * QK;
  const std::int64_t count = static_cast<std::int64_t>(rows.size() / token);
  const std::int64_t ringSize = window_ + kMaxGamma;
  // Only the newest ring-size rows can be held; older ones are never read.
  const std::int64_t skip = std::max<std::int64_t>(0, count - ringSize);
  for (std::int64_t i = skip; i < count; i += ringSize) {
    const std::int64_t n = std::min(ringSize, count - i);
    check(dhs_draft_append(runtime_, id, start + i, n,
                           packRows(model_.config(), rows.data() + i * token,
                                    static_cast<std::size_t>(n * model_.config().layers))
                               .data()),
          "dhs_draft_append (prefill)");
  }
  rings_.push_back({id, start + skip, start + count});
}

std::vector<float> Drafter::step(Ring &r, int token, std::int64_t position) {
  const int L = model_.config().layers;
  const std::int64_t from = std::max(r.lo, position - window_);
  const int count = static_cast<int>(position - from);
  std::vector<std::uint16_t> window(static_cast<std::size_t>(count) * L * QK);
  if (count > 0) {
    std::vector<std::uint8_t> packed(static_cast<std::size_t>(count) * L *
                                     static_cast<std::size_t>(model_.config().rowBytes()));
    check(dhs_draft_read(runtime_, r.id, position, count, packed.data()), "dhs_draft_read");
    unpackRows(model_.config(), packed.data(), static_cast<std::size_t>(count) * L, window.data());
  }
  WindowPort port(model_.config(), window.data(), count);
  Lane lane{&token, 1, position, nullptr};
  BlockResult result = forwardBlock(model_, {lane}, 1, port, /*topk=*/nullptr);
  std::vector<std::uint16_t> rows;
  appendRows(result, L, rows);
  check(dhs_draft_append(runtime_, r.id, position, 1,
                         packRows(model_.config(), rows.data(), L).data()),
        "dhs_draft_append");
  r.end = position + 1;
  return std::move(result.logits);
}

std::vector<int> Drafter::draft(std::uint64_t id, const std::vector<int> &tokens, int gamma,
                                bool sampling, std::uint64_t seed, std::vector<float> *probs) {
  Ring &r = ring(id);
  const int V = model_.config().vocab;
  const std::int64_t last = static_cast<std::int64_t>(tokens.size()) - 1;
  // Catch up on accepted tokens the drafter has not run (the last draft of
  // a fully accepted block).
  for (std::int64_t p = r.end; p < last; ++p)
    step(r, tokens[p], p);
  std::vector<int> drafts;
  if (probs)
    probs->assign(static_cast<std::size_t>(gamma) * V, 0.0f);
  int input = tokens[last];
  for (int i = 0; i < gamma; ++i) {
    const std::int64_t position = last + i;
    std::vector<float> logits = step(r, input, position);
    int next;
    if (sampling) {
      // The draft's position (position + 1) and a salt keep the drafter's
      // draws apart from the target's.
      next = sampleToken(logits.data(), V, seed ^ 0xD1B54A32D192ED03ull, id, position + 1);
      softmax(logits.data(), V, probs->data() + static_cast<std::size_t>(i) * V);
    } else {
      next = argmax(logits.data(), V);
    }
    drafts.push_back(next);
    input = next;
  }
  return drafts;
}

void Drafter::accepted(std::uint64_t id, std::int64_t length) {
  Ring &r = ring(id);
  // Rows of positions < length - 1 are the accepted tokens' (the last token
  // is the next input and has none yet).
  r.end = std::min(r.end, length - 1);
}

void Drafter::finish(std::uint64_t id) {
  rings_.erase(
      std::remove_if(rings_.begin(), rings_.end(), [&](const Ring &r) { return r.id == id; }),
      rings_.end());
}

} // namespace dhs::decode
