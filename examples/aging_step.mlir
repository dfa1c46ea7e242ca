// The aging step of one layer group: between two decode steps the host
// records the appends of the group's requests (one per request at most: the
// row leaving its request's newest window, the new row and the request's
// host range; AgeRowsLayout), and the device replays them over the group's
// residency state (bound by role: hot_rows, clock_cleared, free_stack,
// promotion_control and the pool's replacement state) as the residency
// controller's append does them (dhs.age_rows), then carries out the list
// it writes (dhs.place_rows: the new rows into their slots, the released
// rows out of the map). The appends (age_list) and the list (place_rows,
// place_slots) are the step's own buffers.
//
// Written once; dhs-compile fixes the serving configuration, e.g. the
// decision step's large shape (16 requests, 16384 slots):
//
//   dhs-compile examples/aging_step.mlir --requests 16 --hbm-slots 16384 -o /tmp/aging
//
// The pool's residency spec is the rule's, as in examples/decision_step.mlir
// (adaptive, no floor, CLOCK: the policy dhs.age_rows replays); the runtime
// compares it with its residency configuration. examples/age_rows_step.mlir
// is the kernel test's fixed-shape age_rows alone.
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %appends: memref<?x4xi64>, %hot: memref<?xi64>, %cleared: memref<?xi32>,
                %free: memref<?xi32>, %control: memref<8xi32>,
                %rows: memref<?xi64>, %slots: memref<?xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      newest = 64 floor = 0 policy = adaptive replacement = clock
  dhs.age_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      appends(%appends : memref<?x4xi64>) hot(%hot : memref<?xi64>)
      cleared(%cleared : memref<?xi32>) free(%free : memref<?xi32>)
      control(%control : memref<8xi32>) into(%rows, %slots : memref<?xi64>, memref<?xi32>)
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%rows : memref<?xi64>) slots(%slots : memref<?xi32>)
  return
}
