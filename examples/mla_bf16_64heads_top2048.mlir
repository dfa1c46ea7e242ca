// One layer shaped like GLM-5 in the MLA BF16 row format: 64 query heads,
// top-2048 selection, 16 requests with two query positions each (a verify
// step with gamma = 1). 65536 HBM slots (75 MB); the host store is sized by
// the runtime from the requests' histories.
//
//   dhs-run examples/mla_bf16_64heads_top2048.mlir --history-rows 100000
func.func @step(%queries: memref<16x2x64x576xbf16>,
                %rows: memref<16x2x2048xi32>,
                %slots: memref<16x2x2048xi32>,
                %history_start: memref<16xi64>,
                %history_len: memref<16xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 65536, host = ?>,
                %out: memref<16x2x64x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<16x2x64x576xbf16>)
      rows(%rows : memref<16x2x2048xi32>) slots(%slots : memref<16x2x2048xi32>)
      history(%history_start, %history_len : memref<16xi64>, memref<16xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = 65536, host = ?>)
      layer = 0 output(%out : memref<16x2x64x512xbf16>) scale = 0.0416666679
  return
}
