// The attention benchmark's step: one GLM-5-shaped sparse MLA attention over
// bf16 rows (1152 B),
// 576/512 dims, top-2048. bench/attention.sh compiles it for each shape it
// measures (dhs-compile --requests/--positions/--heads/--hbm-slots).
func.func @step(%queries: memref<?x?x?x576xbf16>,
                %rows: memref<?x?x2048xi32>,
                %slots: memref<?x?x2048xi32>,
                %history_start: memref<?xi64>,
                %history_len: memref<?xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>,
                %out: memref<?x?x?x512xbf16>) {
  dhs.sparse_attention queries(%queries : memref<?x?x?x576xbf16>)
      rows(%rows : memref<?x?x2048xi32>) slots(%slots : memref<?x?x2048xi32>)
      history(%history_start, %history_len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_bf16, layers = 1, hbm = ?, host = ?>)
      layer = 0 output(%out : memref<?x?x?x512xbf16>) scale = 0.0721687824
  return
}
