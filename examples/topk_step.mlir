// Top-k selection on the GPU: for 4 requests x 2 query positions, the 512
// highest-scoring rows of the lightning indexer's 16384 scores, causally
// bounded (query q of Q sees rows [0, history_len - (Q - 1 - q))), ties to the
// lower row id, in descending score order; -1 past the visible rows.
//
//   dhs-compile examples/topk_step.mlir -o /tmp/topk
func.func @step(%scores: memref<4x2x16384xf32>, %history_len: memref<4xi32>,
                %rows: memref<4x2x512xi32>) {
  dhs.topk scores(%scores : memref<4x2x16384xf32>)
      history(%history_len : memref<4xi32>) into(%rows : memref<4x2x512xi32>)
  return
}
