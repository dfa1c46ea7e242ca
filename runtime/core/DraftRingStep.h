//===- DraftRingStep.h - What a compiled draft-ring step is -----*- C++ -*-===//
//
// The structure of a compiled draft-ring step (examples/draft_ring_step.mlir
// compiled by dhs-compile), read from its manifest: the runtime runs a
// request's draft ring through its kernels on CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_DRAFTRINGSTEP_H
#define DHS_RUNTIME_CORE_DRAFTRINGSTEP_H

#include <cstdint>

namespace dhs::runtime {

struct Manifest;

/// A draft-ring step's arguments: ring [B, W, a, b], new rows [B, N, a, b],
/// positions [B], ends [B], window [B, R, a, b] (i8, a * b bytes per token)
/// and four launches: ring_index + copy_rows (scatter: append N rows at
/// positions p .. p+N-1 mod W), ring_index + copy_rows (gather: read the R
/// rows end-R .. end-1).
struct DraftStepInfo {
  int ringArgument = -1;       ///< argument index of the rings
  int rowsArgument = -1;       ///< of the appended rows
  int positionsArgument = -1;  ///< of the append positions
  int endsArgument = -1;       ///< of the read ends
  int windowArgument = -1;     ///< of the rows read
  std::int64_t lanes = 0;      ///< B: rings per launch
  std::int64_t window = 0;     ///< W: tokens per ring
  std::int64_t block = 0;      ///< N: rows per append
  std::int64_t readRows = 0;   ///< R: rows per read
  std::int64_t tokenBytes = 0; ///< a * b: bytes per ring token
};

/// Reads and checks a draft-ring step's structure. Throws Error naming what
/// is not a draft-ring step (other launches, arguments, shapes).
DraftStepInfo draftStepInfo(const Manifest &manifest);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_DRAFTRINGSTEP_H
