// dhs.sort_rows alone, for SortRowsTest: each request's Q x K row ids
// ascending, -1 last. Compiled with a serving configuration, e.g.
//
//   dhs-compile test/unit/steps/sort_rows_step.mlir --requests 16 \
//       --positions 4 --topk 2048 -o /tmp/sort_rows
func.func @step(%rows: memref<?x?xi32>, %sorted: memref<?x?xi32>) {
  dhs.sort_rows rows(%rows : memref<?x?xi32>) into(%sorted : memref<?x?xi32>)
  return
}
