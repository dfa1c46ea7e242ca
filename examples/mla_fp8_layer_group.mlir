// Layer 2 of a GLM-5-like IndexShare group of 4 layers in the FP8 row format
// with scales (656 B per row, a token's 4 rows stored together: 2624 B):
// 4 requests, 2 query positions (gamma = 1), 64 heads, top-1024. The kernel
// dequantizes e4m3 x fp32 scale and the bf16 RoPE dims while staging rows.
//
//   dhs-run examples/mla_fp8_layer_group.mlir --resident 0,0.5,1
func.func @step(%queries: memref<4x2x64x576xbf16>,
                %rows: memref<4x2x1024xi32>,
                %slots: memref<4x2x1024xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 8192, host = ?>,
                %out: memref<4x2x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<4x2x64x576xbf16>)
      rows(%rows : memref<4x2x1024xi32>) slots(%slots : memref<4x2x1024xi32>)
      history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 8192, host = ?>)
      layer = 2 output(%out : memref<4x2x64x512xbf16>) scale = 0.0721687824
  return
}
