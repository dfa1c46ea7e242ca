//===- ProblemShape.h - The shape of one attention step ---------*- C++ -*-===//
//
// B, Q, H, K, the row layout, the layer read, the pool sizes and the sliding
// window of a compiled sparse_attention step, as its manifest gives them.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_PROBLEMSHAPE_H
#define DHS_RUNTIME_CORE_PROBLEMSHAPE_H

#include "runtime/core/RowFormat.h"

#include <cstdint>

namespace dhs::runtime {

struct Manifest;

/// Shapes and attributes of a sparse_attention step.
struct ProblemShape {
  std::int64_t batch = 0;                ///< B: requests
  std::int64_t queries = 0;              ///< Q: query positions per request
  std::int64_t heads = 0;                ///< H: query heads
  std::int64_t topk = 0;                 ///< K: selected rows per query
  RowFormat format = RowFormat::MlaBf16; ///< layout of one layer's row
  GqaLayout gqa;                         ///< the row layout when format is Gqa
  std::int64_t rowBytes = 1152;          ///< bytes of one layer's row
  std::int64_t layers = 1;               ///< layers per token in the pool's group
  std::int64_t layer = 0;                ///< the layer attention reads
  /// Storage of one token in bf16-sized units: layers * row_bytes / 2 (for
  /// mla_bf16 with one layer, its 576 elements).
  std::int64_t rowElems = 576;
  std::int64_t qkDim = 576;   ///< dims used for scores
  std::int64_t vDim = 512;    ///< leading dims used as values
  std::int64_t hbmSlots = -1; ///< HBM slots (-1: chosen by the generator)
  std::int64_t hostRows = -1; ///< host-store rows (-1: chosen by the generator)
  float softmaxScale = 0.0f;  ///< multiplies q.k before the softmax
  /// W: tokens of the sliding window each query also attends to (0: none).
  std::int64_t windowSize = 0;
  /// R: tokens of each request's window ring (>= W + Q - 1 with a window).
  std::int64_t windowRing = 0;

  /// B * Q * K: selection entries.
  std::int64_t selectionCount() const { return batch * queries * topk; }
  /// B * Q * H * v_dim: output elements.
  std::int64_t outputCount() const { return batch * queries * heads * vDim; }
  /// B * Q * H * qk_dim: query elements.
  std::int64_t queryCount() const { return batch * queries * heads * qkDim; }
};

/// Reads the problem shape of a validated attention step: its first layer's
/// (a whole-model step's layers share it; the scale and the layer read are
/// the first layer's, StepPlan.h has each layer's). hbm_slots / host_rows
/// stay -1 where the manifest leaves them to run time. Throws Error when
/// its launches do not form a plan (planStep) or disagree on the window.
ProblemShape problemShapeFromManifest(const Manifest &manifest);

/// Checks a shape on its own: no empty dimension, GQA query heads divisible
/// by the KV heads, a row layout that is its format's, a finite scale, a
/// window ring that holds the window for every query position. Pool sizes
/// may be -1 (chosen at run time). Throws InputError naming what is wrong.
void checkProblemShape(const ProblemShape &shape);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_PROBLEMSHAPE_H
