// A step's promotion decisions made on the device (CLOCK): up to 512
// fetched rows of each of 16 requests get a slot from the free stack or a
// victim found in hand order over the pool's slot table, written as the
// (host row, slot) list that dhs.place_rows carries out, with the releases
// of the evicted rows after the promotions (2 x 16 x 512 entries). The
// slot tables are step arguments, so their size (5000 slots) is static.
//
//   dhs-compile examples/plan_promotions_step.mlir -o /tmp/plan_promotions
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %fetched: memref<16x512xi32>, %start: memref<16xi64>,
                %hot: memref<5000xi64>, %cleared: memref<5000xi32>, %free: memref<5000xi32>,
                %control: memref<8xi32>, %rows: memref<16384xi64>, %slots: memref<16384xi32>) {
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<16x512xi32>) history(%start : memref<16xi64>)
      hot(%hot : memref<5000xi64>) cleared(%cleared : memref<5000xi32>)
      free(%free : memref<5000xi32>) control(%control : memref<8xi32>)
      into(%rows, %slots : memref<16384xi64>, memref<16384xi32>) replacement = clock
  return
}
