// Residency resolve on the GPU: each selected row id of 4 requests x 2 query
// positions x top-256 looks up its HBM slot (or -1) in the pool's residency
// map at history_start + id; ids outside a request's history are reported
// through the step status and resolve to -1. The selections never visit the
// host.
//
//   dhs-compile examples/resolve_step.mlir -o /tmp/resolve
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                %rows: memref<4x2x256xi32>, %history_start: memref<4xi64>,
                %history_len: memref<4xi32>, %slots: memref<4x2x256xi32>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      rows(%rows : memref<4x2x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x2x256xi32>)
  return
}
