// The verify step of verify_step.mlir over FP8 rows with scales (656 B) in
// layer groups of 4 (a token's 4 rows stored together, 2624 B): the shared
// fetch copies whole tokens into staging, attention reads layer 3 of them.
//
//   dhs-run examples/verify_step_fp8_group.mlir --overlap 0.85 --resident 0,0.5,1
func.func @step(%queries: memref<4x5x16x576xbf16>,
                %rows: memref<4x5x256xi32>,
                %slots: memref<4x5x256xi32>,
                %history_start: memref<4xi64>,
                %history_len: memref<4xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>,
                %out: memref<4x5x16x512xbf16>) {
  dhs.verify gamma = 4 {
    %stage = dhs.scratch : memref<4x1280x4x656xi8>
    dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        history(%history_start, %history_len : memref<4xi64>, memref<4xi32>)
        into(%stage : memref<4x1280x4x656xi8>)
    dhs.attention queries(%queries : memref<4x5x16x576xbf16>)
        rows(%rows : memref<4x5x256xi32>) slots(%slots : memref<4x5x256xi32>)
        staging(%stage : memref<4x1280x4x656xi8>)
        pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = 4096, host = ?>)
        layer = 3 output(%out : memref<4x5x16x512xbf16>) scale = 0.0416666679
  }
  return
}
