//===- Forward.cpp - A block of positions through the model ---------------===//

#include "examples/decode/Forward.h"

#include "examples/decode/Decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace dhs::decode {

TopK::TopK(dhs_runtime *rt, const std::string &directory, const ModelConfig &config) : rt_(rt) {
  check(dhs_runtime_load_topk_step(rt, directory.c_str(), &shape_), "dhs_runtime_load_topk_step");
  if (shape_.positions != 1 || shape_.k != config.topk)
    throw DecodeError("the top-k step " + directory + " selects " + std::to_string(shape_.k) +
                      " rows for " + std::to_string(shape_.positions) +
                      " positions per lane; the model needs " + std::to_string(config.topk) +
                      " for 1");
}

void TopK::select(const float *scores, const std::int32_t *visible, std::int64_t count,
                  std::int32_t *rows) const {
  for (std::int64_t first = 0; first < count; first += shape_.batch) {
    const std::int64_t lanes = std::min(shape_.batch, count - first);
    check(dhs_topk(rt_, scores + first * shape_.scored, visible + first, lanes,
                   rows + first * shape_.k),
          "dhs_topk");
  }
}

BlockResult forwardBlock(const Model &model, const std::vector<Lane> &lanes, int Q,
                         AttentionPort &port, const TopK *topk) {
  const bool indexer = topk != nullptr;
  const ModelConfig &c = model.config();
  const int batch = static_cast<int>(lanes.size()), d = c.hidden, H = c.heads;
  const int K = c.topk, D = c.indexDim;
  const std::size_t positions = static_cast<std::size_t>(batch) * Q;
  constexpr int QK = ModelConfig::kQkDim, V = ModelConfig::kLatent;

  BlockResult result;
  result.logits.assign(positions * c.vocab, 0.0f);
  result.rows.assign(static_cast<std::size_t>(c.layers) * positions * QK, 0);
  result.keys.assign(static_cast<std::size_t>(c.groups()) * positions * D, 0.0f);
  std::vector<float> h(positions * d, 0.0f), x(d);
  std::vector<std::uint16_t> queries(positions * H * QK, 0), output(positions * H * V, 0);
  std::vector<std::int32_t> selections(positions * K, -1), visible(positions, 0);
  std::vector<float> scores, iq(static_cast<std::size_t>(c.indexHeads) * D), iw(c.indexHeads);
  const std::size_t N = indexer ? static_cast<std::size_t>(topk->scored()) : 0;

  auto valid = [&](int b, int q) { return q < lanes[b].count; };
  for (int b = 0; b < batch; ++b)
    for (int q = 0; q < lanes[b].count; ++q)
      model.embed(lanes[b].tokens[q], &h[(static_cast<std::size_t>(b) * Q + q) * d]);

  for (int layer = 0; layer < c.layers; ++layer) {
    const int group = layer / c.layersPerGroup;
    const bool first = layer % c.layersPerGroup == 0;
    std::uint16_t *rows = result.rows.data() + static_cast<std::size_t>(layer) * positions * QK;
    float *keys = result.keys.data() + static_cast<std::size_t>(group) * positions * D;
    // Normalized inputs give the layer's rows and queries (and at a group's
    // first layer the indexer's keys of the block's positions).
    for (int b = 0; b < batch; ++b)
      for (int q = 0; q < Q; ++q) {
        if (!valid(b, q))
          continue;
        const std::size_t p = static_cast<std::size_t>(b) * Q + q;
        const std::int64_t position = lanes[b].start + q;
        model.norm(&h[p * d], x.data());
        model.kvRow(layer, x.data(), position, rows + p * QK);
        model.query(layer, x.data(), position, &queries[p * H * QK]);
        if (first && indexer)
          model.indexKey(group, x.data(), keys + p * D);
      }
    if (first && indexer) {
      // Position q of lane b scores the history's keys and the block's
      // positions before q; the top K (through dhs) are its selections.
      // Positions past a lane's block see nothing and select nothing.
      scores.assign(positions * N, 0.0f);
      std::fill(visible.begin(), visible.end(), 0);
      for (int b = 0; b < batch; ++b) {
        const std::vector<float> &history = (*lanes[b].keys)[group];
        for (int q = 0; q < lanes[b].count; ++q) {
          const std::size_t p = static_cast<std::size_t>(b) * Q + q;
          model.norm(&h[p * d], x.data());
          model.indexQuery(group, x.data(), iq.data(), iw.data());
          const std::int64_t start = lanes[b].start;
          if (static_cast<std::size_t>(start + q) > N)
            throw DecodeError("position " + std::to_string(start + q) +
                              " selects from more rows than the top-k step scores (" +
                              std::to_string(N) + ")");
          float *score = &scores[p * N];
          for (std::int64_t r = 0; r < start; ++r)
            score[r] = model.indexScore(iq.data(), iw.data(), &history[r * D]);
          for (int i = 0; i < q; ++i)
            score[start + i] = model.indexScore(iq.data(), iw.data(),
                                                keys + (static_cast<std::size_t>(b) * Q + i) * D);
          // The newest rows are always selected (DSA's selections keep the
          // local window); the indexer's best fill the rest.
          for (std::int64_t r = std::max<std::int64_t>(0, start + q - c.localWindow); r < start + q;
               ++r)
            score[r] = INFINITY;
          visible[p] = static_cast<std::int32_t>(start + q);
        }
      }
      topk->select(scores.data(), visible.data(), static_cast<std::int64_t>(positions),
                   selections.data());
      port.select(group, selections.data());
    }
    port.writeRows(layer, rows);
    port.attend(layer, queries.data(), output.data());
    for (int b = 0; b < batch; ++b)
      for (int q = 0; q < lanes[b].count; ++q) {
        const std::size_t p = static_cast<std::size_t>(b) * Q + q;
        model.addAttention(layer, &output[p * H * V], &h[p * d]);
        model.addMlp(layer, &h[p * d]);
      }
  }
  for (int b = 0; b < batch; ++b)
    for (int q = 0; q < lanes[b].count; ++q) {
      const std::size_t p = static_cast<std::size_t>(b) * Q + q;
      model.logits(&h[p * d], &result.logits[p * c.vocab]);
    }
  return result;
}

HostPort::HostPort(const Model &model, const std::vector<Lane> &lanes, int Q)
    : model_(model), lanes_(lanes), Q_(Q), selections_(model.config().groups()) {
  for (const Lane &lane : lanes)
    if (lane.start != 0)
      throw std::invalid_argument("HostPort: a lane with history");
}

void HostPort::select(int group, const std::int32_t *rowIds) {
  const std::size_t n = lanes_.size() * Q_ * model_.config().topk;
  selections_[group].assign(rowIds, rowIds + n);
}

void HostPort::writeRows(int /*layer*/, const std::uint16_t *rows) {
  rows_.assign(rows, rows + lanes_.size() * Q_ * ModelConfig::kQkDim);
}

void HostPort::attend(int layer, const std::uint16_t *queries, std::uint16_t *output) {
  const ModelConfig &c = model_.config();
  const int K = c.topk, H = c.heads;
  const std::vector<std::int32_t> &selected = selections_[layer / c.layersPerGroup];
  std::vector<const std::uint16_t *> rows;
  for (std::size_t b = 0; b < lanes_.size(); ++b)
    for (int q = 0; q < Q_; ++q) {
      const std::size_t p = b * Q_ + q;
      rows.clear();
      for (int k = 0; k < K && q < lanes_[b].count; ++k) {
        const std::int32_t id = selected[p * K + k];
        if (id < 0)
          continue;
        rows.push_back(&rows_[(b * Q_ + id) * ModelConfig::kQkDim]);
      }
      hostAttention(queries + p * H * ModelConfig::kQkDim, H, rows.data(),
                    static_cast<int>(rows.size()), output + p * H * ModelConfig::kLatent);
    }
}

} // namespace dhs::decode
