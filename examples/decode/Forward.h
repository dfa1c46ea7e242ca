//===- Forward.h - A block of positions through the model -------*- C++ -*-===//
//
// One forward pass of the model over a batch of lanes, each a block of up to
// Q consecutive positions of one sequence (Q = 1: a plain decode step; Q =
// gamma + 1: a verify block; the drafter and the prefill run Q = 1 too).
// Layer by layer: normalize, compute the layer's KV rows of every position,
// at a group's first layer run the indexer and hand its top-k selections to
// the attention port, hand it the rows, compute queries, attend through the
// port, add the attention and MLP branches. The port is where attention runs:
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

#include <cstdint>
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

/// Runs the lanes through the model with Q positions per lane. With
/// `indexer` false no selections are made (a port that attends to a fixed
/// window, the drafter's).
BlockResult forwardBlock(const Model &model, const std::vector<Lane> &lanes, int Q,
                         AttentionPort &port, bool indexer = true);

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
