// The verify benchmark's layer group: four GLM-5-shaped sparse MLA attention
// layers over one pool of FP8 rows (a token's 4 rows stored together, 2624 B)
// and one top-2048 selection, as an IndexShare group of GLM-5 reads them.
// tools/gpu-check.sh compiles it inside a verify phase with --share-tiles
// (one dhs.share_rows for the four layers) and checks it against fp64;
// bench/NOTES.md (fourteenth session) times it against each position alone.
func.func @step(%history_start: memref<?xi64>,
                %history_len: memref<?xi32>,
                %pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<?x?x2048xi32>,
                %slots: memref<?x?x2048xi32>,
                %q0: memref<?x?x?x576xbf16>, %out0: memref<?x?x?x512xbf16>,
                %q1: memref<?x?x?x576xbf16>, %out1: memref<?x?x?x512xbf16>,
                %q2: memref<?x?x?x576xbf16>, %out2: memref<?x?x?x512xbf16>,
                %q3: memref<?x?x?x576xbf16>, %out3: memref<?x?x?x512xbf16>) {
  dhs.sparse_attention queries(%q0 : memref<?x?x?x576xbf16>)
      rows(%rows : memref<?x?x2048xi32>) slots(%slots : memref<?x?x2048xi32>)
      history(%history_start, %history_len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      layer = 0 output(%out0 : memref<?x?x?x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%q1 : memref<?x?x?x576xbf16>)
      rows(%rows : memref<?x?x2048xi32>) slots(%slots : memref<?x?x2048xi32>)
      history(%history_start, %history_len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      layer = 1 output(%out1 : memref<?x?x?x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%q2 : memref<?x?x?x576xbf16>)
      rows(%rows : memref<?x?x2048xi32>) slots(%slots : memref<?x?x2048xi32>)
      history(%history_start, %history_len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      layer = 2 output(%out2 : memref<?x?x?x512xbf16>) scale = 0.0721687824
  dhs.sparse_attention queries(%q3 : memref<?x?x?x576xbf16>)
      rows(%rows : memref<?x?x2048xi32>) slots(%slots : memref<?x?x2048xi32>)
      history(%history_start, %history_len : memref<?xi64>, memref<?xi32>)
      pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      layer = 3 output(%out3 : memref<?x?x?x512xbf16>) scale = 0.0721687824
  return
}
