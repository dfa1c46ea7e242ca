// A decision step's layer with a write-back ring, for WriteBackTest: the
// selections resolved on the device (each miss given its ring entry), then
// fused attention over one-layer FP8 rows (16 heads: the CUDA-core kernel),
// which writes each host row it reads into its entry.
func.func @step(%queries: memref<4x1x16x576xbf16>,
                %rows: memref<4x1x256xi32>, %slots: memref<4x1x256xi32>,
                %entries: memref<4x1x256xi32>,
                %history_start: memref<4xi64>, %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
                %out: memref<4x1x16x512xbf16>) {
  dhs.resolve pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      rows(%rows : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      into(%slots : memref<4x1x256xi32>) write_back(%entries : memref<4x1x256xi32>)
  dhs.sparse_attention queries(%queries : memref<4x1x16x576xbf16>)
      rows(%rows : memref<4x1x256xi32>) slots(%slots : memref<4x1x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      write_back(%entries : memref<4x1x256xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x1x16x512xbf16>) scale = 0.0416666679
  return
}
