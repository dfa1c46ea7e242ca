// write_back_attention_step.mlir with 128 heads of bf16 rows, for
// WriteBackTest: the two tensor-core CTAs of a query form a cluster, each
// gathers half of every tile (its rank's 32 rows) and writes those it read
// from the host into their ring entries.
func.func @step(%queries: memref<4x1x128x576xbf16>,
                %rows: memref<4x1x256xi32>, %slots: memref<4x1x256xi32>,
                %entries: memref<4x1x256xi32>,
                %history_start: memref<4xi64>, %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 4, hbm = 2048, host = ?>,
                %out: memref<4x1x128x512xbf16>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 4, hbm = 2048, host = ?>)
      rows(%rows : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x256xi32>) write_back(%entries : memref<4x1x256xi32>)
  dhs.sparse_attention queries(%queries : memref<4x1x128x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      write_back(%entries : memref<4x1x256xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 4, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x128x512xbf16>) scale = 0.0416666679
  return
}
