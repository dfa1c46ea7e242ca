// dhs.resolve with a write-back ring, for WriteBackTest: 4 requests x 256
// selections of one-layer FP8 rows, each miss given its entry in the pool's
// write-back ring (its index in the step log's misses) while the ring has
// room.
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
                %rows: memref<4x1x256xi32>, %start: memref<4xi64>, %len: memref<4xi32>,
                %slots: memref<4x1x256xi32>, %entries: memref<4x1x256xi32>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<4x1x256xi32>)
      history(%start, %len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x256xi32>) write_back(%entries : memref<4x1x256xi32>)
  return
}
