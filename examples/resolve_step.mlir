// Residency resolve on the GPU: each selected row id of 4 requests x 2 query
// positions x top-256 looks up its HBM slot (or -1) in the requests'
// row-to-slot tables of 8192 rows; ids outside a request's history are
// reported through the step status and resolve to -1.
//
//   dhs-compile examples/resolve_step.mlir -o /tmp/resolve
func.func @step(%rows: memref<4x2x256xi32>, %residency: memref<4x8192xi32>,
                %history_len: memref<4xi32>, %slots: memref<4x2x256xi32>) {
  dhs.resolve rows(%rows : memref<4x2x256xi32>)
      residency(%residency : memref<4x8192xi32>)
      history(%history_len : memref<4xi32>) into(%slots : memref<4x2x256xi32>)
  return
}
