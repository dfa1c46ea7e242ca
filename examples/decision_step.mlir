// The decision step of one layer group (issue 10): after the group's last
// layer, its residency decisions are made on the device over the group's
// pool. From the layer step's selections and their slots (bound by role:
// row_ids, slots, history_start), the distinct missing rows of each request
// (union_missing, in order of first appearance) are sorted ascending, the
// order in which the residency controller promotes them (sort_rows), the
// promotions and releases are planned over the device residency state
// (plan_promotions: hot_rows, clock_cleared, free_stack, promotion_control
// and the pool's replacement state) and carried out (place_rows). The
// union, its remap, the sorted list and the plan's list are the step's own
// buffers. A failed step (the status word set) plans nothing.
//
// Written once; dhs-compile fixes the serving configuration, e.g. the
// large step of dhs-step-bench (16 requests, decode, top-2048, 16384 slots):
//
//   dhs-compile examples/decision_step.mlir --requests 16 --positions 4 \
//       --topk 2048 --hbm-slots 16384 -o /tmp/decisions
//
// The pool's residency spec is the rule's (adaptive, no floor, CLOCK,
// promotions uncapped as dhs-step-bench configures them; a cap would be
// `promotions = c` on both ops); the runtime compares it with its
// residency configuration.
func.func @step(%pool: !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>,
                %rows: memref<?x?x?xi32>, %slots: memref<?x?x?xi32>, %start: memref<?xi64>,
                %union: memref<?x?xi32>, %remap: memref<?x?x?xi32>, %fetched: memref<?x?xi32>,
                %hot: memref<?xi64>, %cleared: memref<?xi32>, %free: memref<?xi32>,
                %control: memref<8xi32>, %plan_rows: memref<?xi64>, %plan_slots: memref<?xi32>) {
  dhs.residency pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      newest = 64 floor = 0 policy = adaptive replacement = clock
  dhs.union_missing rows(%rows : memref<?x?x?xi32>) slots(%slots : memref<?x?x?xi32>)
      into(%union, %remap : memref<?x?xi32>, memref<?x?x?xi32>)
  dhs.sort_rows rows(%union : memref<?x?xi32>) into(%fetched : memref<?x?xi32>)
  dhs.plan_promotions pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      fetched(%fetched : memref<?x?xi32>) history(%start : memref<?xi64>)
      hot(%hot : memref<?xi64>) cleared(%cleared : memref<?xi32>)
      free(%free : memref<?xi32>) control(%control : memref<8xi32>)
      into(%plan_rows, %plan_slots : memref<?xi64>, memref<?xi32>)
      replacement = clock
  dhs.place_rows pool(%pool : !dhs.kv_pool<#dhs.mla_fp8, layers = 4, hbm = ?, host = ?>)
      rows(%plan_rows : memref<?xi64>) slots(%plan_slots : memref<?xi32>)
  return
}
