// The unit tests' sliding-window step: 2 requests x 3 query positions x 4
// heads, top-32 compressed entries (V4.1 FP8 rows) and a 16-token window in
// rings of 16 + 3 - 1 = 18 raw tokens, in a pool of 512 slots.
func.func @step(%queries: memref<2x3x4x512xbf16>,
                %rows: memref<2x3x32xi32>,
                %slots: memref<2x3x32xi32>,
                %history_start: memref<2xi64>,
                %history_len: memref<2xi32>,
                %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 512, host = ?>,
                %window: memref<2x18x1x528xi8>,
                %window_tokens: memref<2xi32>,
                %out: memref<2x3x4x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<2x3x4x512xbf16>)
      rows(%rows : memref<2x3x32xi32>) slots(%slots : memref<2x3x32xi32>)
      history(%history_start, %history_len : memref<2xi64>, memref<2xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 512, host = ?>)
      window(%window, %window_tokens : memref<2x18x1x528xi8>, memref<2xi32>) size = 16
      layer = 0 output(%out : memref<2x3x4x512xbf16>) scale = 0.0441941738
  return
}
