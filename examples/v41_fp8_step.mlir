// One DeepSeek-V4.1-Flash-like layer over compressed entries (528 B: 512 e4m3
// dims with a ue8m0 scale per 32): 8 requests, one decode position, 64 heads,
// top-512.
//
//   dhs-run examples/v41_fp8_step.mlir --resident 0,0.5,1
func.func @step(%queries: memref<8x1x64x512xbf16>,
                %rows: memref<8x1x512xi32>,
                %slots: memref<8x1x512xi32>,
                %history_start: memref<8xi64>,
                %history_len: memref<8xi32>,
                %pool: !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 4096, host = ?>,
                %out: memref<8x1x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<8x1x64x512xbf16>)
      rows(%rows : memref<8x1x512xi32>) slots(%slots : memref<8x1x512xi32>)
      history(%history_start, %history_len : memref<8xi64>, memref<8xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.v41_fp8, layers = 1, hbm = 4096, host = ?>)
      layer = 0 output(%out : memref<8x1x64x512xbf16>) scale = 0.0441941738
  return
}
