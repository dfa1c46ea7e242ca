// The mixed steps' retrieval baseline (dhs-retrieval-bench): one layer's fetch
// of missing rows, 128 requests x top-2048 FP8 rows (656 B) stored one layer
// to a token, so a missing row is one 656-byte unit of the host store, copied
// into staging. bench/attention.sh times it on the mixed steps' store (32768
// rows a request, 2.75 GB): the rate the generated fetch kernel reaches on
// single rows, against the contiguous copy rate the mixed steps' floor uses.
func.func @step(%history_start: memref<128xi64>, %history_len: memref<128xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = ?, host = ?>,
                %rows: memref<128x1x2048xi32>, %slots: memref<128x1x2048xi32>) {
  %stage = dhs.scratch : memref<128x2048x1x656xi8>
  dhs.fetch pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 1, hbm = ?, host = ?>)
      rows(%rows : memref<128x1x2048xi32>) slots(%slots : memref<128x1x2048xi32>)
      history(%history_start, %history_len : memref<128xi64>, memref<128xi32>)
      into(%stage : memref<128x2048x1x656xi8>)
  return
}
