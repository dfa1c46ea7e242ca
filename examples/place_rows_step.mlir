// The residency controller's decisions carried out on the device in one
// launch: up to 4096 host rows of a GLM-5-like layer group (4 layers of FP8
// rows with scales, 2624 bytes a token) copied into their HBM slots, or
// released (slot -1), each recorded in the pool's residency map.
//
//   dhs-compile examples/place_rows_step.mlir -o /tmp/place_rows
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<4096xi64>, %slots: memref<4096xi32>) {
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<4096xi64>) slots(%slots : memref<4096xi32>)
  return
}
