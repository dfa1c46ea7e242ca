//===- Forward.h - A block of positions through the model -------*- C++ -*-===//
//
// One forward pass of the model over a batch of lanes, each a block of up to
// Q consecutive positions of one sequence (Q = 1: a plain decode step; Q =
// gamma + 1: a verify block; the drafter and the prefill run Q = 1 too).
// Layer by layer: normalize, compute the layer's KV rows of every position,
// at a group's first layer run the indexer, select its top k through dhs
// (dhs_topk) and hand the selections to the attention port, hand it the rows, compute queries,
// attend through the port, add the attention and MLP branches. The port is where attention runs:
// the dhs runtime (a step in parts, or a verify step) or the host.
//
// Row ids in selections: 0 .. start-1 are the lane's history, start + i is
// the block's position i (a position selects history and earlier positions
// of its block, never itself).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_EXAMPLES_DECODE_FORWARD_H
#define DHS_EXAMPLES_DECODE_FORWARD_H

#include "examples/decode/Model.h"
#include "runtime/capi/dhs_runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dhs::decode {

/// Where a block's attention runs.
class AttentionPort {
public:
  virtual ~AttentionPort() = default;
  /// Group `group`'s selections [batch][Q][K] (row ids as above, -1 none).
  virtual void select(int group, const std::int32_t *rowIds) = 0;
  /// Layer `layer`'s KV rows of the block's positions [batch][Q][576] bf16,
  /// before the layer's attention.
  virtual void writeRows(int layer, const std::uint16_t *rows) = 0;
  /// Layer `layer`'s attention: queries [batch][Q][H][576] bf16 in, output
  /// [batch][Q][H][512] bf16 out.
  virtual void attend(int layer, const std::uint16_t *queries, std::uint16_t *output) = 0;
};

/// The indexer's top-k through dhs: a runtime with dhs-decode's compiled
/// top-k step loaded, each position one lane of it (one position per lane,
/// its own causal bound).
class TopK {
public:
  /// Loads the top-k step in `directory` into `rt` (not owned) and checks
  /// that it selects `config.topk` rows for one position per lane. Throws
  /// DecodeError.
  TopK(dhs_runtime *rt, const std::string &directory, const ModelConfig &config);
  /// N: rows scored per position (a position's history and block rows).
  std::int64_t scored() const { return shape_.scored; }
  /// The top K rows of `count` positions (dhs_topk, in chunks of the
  /// step's lanes): scores [count][N], of which position p sees the first
  /// visible[p]; ids into rows [count][K], in descending score order, ties
  /// to the lower id, -1 past the visible rows. Throws DecodeError.
  void select(const float *scores, const std::int32_t *visible, std::int64_t count,
              std::int32_t *rows) const;

private:
  dhs_runtime *rt_;
  dhs_topk_shape shape_{};
};

/// One lane of a block.
struct Lane {
  const int *tokens = nullptr; ///< the block's tokens
  int count = 0;               ///< 1 .. Q
  std::int64_t start = 0;      ///< position of tokens[0] (= the history length)
  /// Indexer keys of the history per group: keys[g][pos * indexDim ..].
  const std::vector<std::vector<float>> *keys = nullptr;
};

/// What a block's forward pass produced.
struct BlockResult {
  std::vector<float> logits;       ///< [batch][Q][vocab] (0 past a lane's count)
  std::vector<std::uint16_t> rows; ///< [layers][batch][Q][576] bf16 KV rows
  std::vector<float> keys;         ///< [groups][batch][Q][indexDim] indexer keys
  /// Row `q` of lane `b` at `layer`.
  const std::uint16_t *row(int layer, int batch, int Q, int b, int q) const {
    return rows.data() +
           ((static_cast<std::size_t>(layer) * batch + b) * Q + q) * ModelConfig::kQkDim;
  }
};

/// Runs the lanes through the model with Q positions per lane, the
/// indexer's selections made by `topk`. With `topk` null no selections are
/// made (a port that attends to a fixed window, the drafter's).
BlockResult forwardBlock(const Model &model, const std::vector<Lane> &lanes, int Q,
                         AttentionPort &port, const TopK *topk);

/// An attention port on the host for lanes without history (start 0): the
/// block's positions attend to each other's rows. The prefill runs each
/// prompt through it as one block.
class HostPort : public AttentionPort {
public:
  HostPort(const Model &model, const std::vector<Lane> &lanes, int Q);
  void select(int group, const std::int32_t *rowIds) override;
  void writeRows(int layer, const std::uint16_t *rows) override;
  void attend(int layer, const std::uint16_t *queries, std::uint16_t *output) override;

private:
  const Model &model_;
  const std::vector<Lane> &lanes_;
  int Q_;
  std::vector<std::vector<std::int32_t>> selections_; // per group
  std::vector<std::uint16_t> rows_;                   // the layer's block rows
};

} // namespace dhs::decode

#endif // DHS_EXAMPLES_DECODE_FORWARD_H
