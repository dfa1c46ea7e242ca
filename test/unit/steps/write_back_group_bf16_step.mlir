// write_back_attention_step.mlir with 128 heads of bf16 rows over a layer
// group's pool (layer 0 of 4), for WriteBackTest: the two tensor-core CTAs
// of a query each gather every row (no cluster), and head block 0's writes
// the missing rows into their ring entries' layer 0.
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
