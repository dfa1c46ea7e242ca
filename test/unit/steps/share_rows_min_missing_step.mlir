// dhs.share_rows alone, for ShareRowsTest: each request's selections with
// the rows every query position selected first, in tiles of 64, the tiles
// shared only where 24 or more of the prefix rows are on the host (slot -1
// in position 0). Compiled with a serving configuration, e.g.
//
//   dhs-compile test/unit/steps/share_rows_min_missing_step.mlir \
//       --requests 13 --positions 5 --topk 2048 -o /tmp/share_rows
func.func @step(%rows: memref<?x?x?xi32>, %slots: memref<?x?x?xi32>,
                %shared_rows: memref<?x?x?xi32>, %shared_slots: memref<?x?x?xi32>,
                %tiles: memref<?xi32>) {
  dhs.share_rows rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>) tile = 64
      min_missing = 24 into(%shared_rows, %shared_slots, %tiles
           : memref<?x?x?xi32>, memref<?x?x?xi32>, memref<?xi32>)
  return
}
