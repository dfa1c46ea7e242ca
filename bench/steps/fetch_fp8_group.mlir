// The retrieval benchmark's step (dhs-retrieval-bench): one layer group's
// fetch of missing rows, GLM-5 shaped: 128 requests x top-2048, FP8 rows
// (656 B) in groups of 4 layers, so a missing token is one 2624-byte unit of
// the host store, copied into staging for the group's attention.
func.func @step(%history_start: memref<128xi64>, %history_len: memref<128xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<128x1x2048xi32>, %slots: memref<128x1x2048xi32>) {
  %stage = dhs.scratch : memref<128x2048x4x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<128x1x2048xi32>) slots(%slots : memref<128x1x2048xi32>)
      history(%history_start, %history_len : memref<128xi64>, memref<128xi32>)
      into(%stage : memref<128x2048x4x656xi8>)
  return
}
