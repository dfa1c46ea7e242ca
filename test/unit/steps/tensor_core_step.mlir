// The unit tests' tensor-core step: 4 requests x 2 query positions x 64
// heads, top-256 of FP8 MLA rows (656 B) in a pool of 2048 slots. Compiled
// as written (the attention reads missing rows from the host store itself)
// and with --overlap-retrieval (a fetch of 4 CTAs stages them beside it).
func.func @step(%queries: memref<4x2x64x576xbf16>,
                %rows: memref<4x2x256xi32>,
                %slots: memref<4x2x256xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>,
                %out: memref<4x2x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x256xi32>) slots(%slots : memref<4x2x256xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = 2048, host = ?>)
      layer = 0 output(%out : memref<4x2x64x512xbf16>) scale = 0.0721687824
  return
}
