// The top-k benchmark's step: a GLM-5-like verify step's selection, 16
// requests x 5 query positions (gamma = 4), top-2048 of 131072 indexer
// scores each (42 MB of scores).
func.func @step(%scores: memref<16x5x131072xf32>, %history_len: memref<16xi32>,
                %rows: memref<16x5x2048xi32>) {
  dhs.topk scores(%scores : memref<16x5x131072xf32>)
      history(%history_len : memref<16xi32>) into(%rows : memref<16x5x2048xi32>)
  return
}
